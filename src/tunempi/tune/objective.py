"""What tune and verify measure a non-blocking collective's points for (`--objective`, collectives.OBJECTIVES).

`Figures` is the objective of one tune (or of the tuning directory verify reads) and, for `time`, the
computation of every non-blocking cell: one length per (collective, size, layout), the same for every algorithm
of the cell, so that algorithms are compared on the same work (what the application sees: start, its own
computation, wait). It is the library default's latency in that cell (`compute_lengths`), measured once and
kept: a cell that has `time` points in the store keeps the computation they were measured with (their
figures stay comparable across tunes), the manifest records every cell's, and verify measures with the
manifest's. Blocking collectives are measured as they are whatever the objective (their points' objective is
latency).

From a profile (`tune --from-profile`, autotune), a cell's computation is the application's own instead: its
mean time between a start's return and the completing wait, not spent waiting (profile/nonblocking.py), handed
in as `ApplicationComputation`s (plain data: tune does not read profiles) and mapped onto the tune's cells by
`application_lengths` (the profile row of the same collective nearest in size, then in communicator size).
`Figures.sources` says where each cell's computation came from and `objective_from` where the objective did;
the manifest records both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tunempi.bench.engine import Layout
from tunempi.bench.sweep import BenchPoint, computations
from tunempi.collectives import (
    DEFAULT_ALGORITHM,
    DEFAULT_DISTRIBUTION,
    LATENCY_OBJECTIVE,
    is_nonblocking,
    objective_of,
)
from tunempi.errors import TunempiError, UsageError
from tunempi.space import Cell
from tunempi.store.results import Measurement, ResultStore

TIME = "time"


@dataclass(frozen=True)
class Figures:
    """The objective of a tune and, under `time`, each non-blocking cell's computation in microseconds."""

    objective: str = LATENCY_OBJECTIVE
    compute_us: Mapping[Cell, float] = field(default_factory=dict)
    #: where each cell's computation came from: a profile row, the library default's latency, stored points
    sources: Mapping[Cell, str] = field(default_factory=dict)
    #: where the objective came from: "--objective", "profile PATH", "default"; "" when not said
    objective_from: str = ""

    def objective_of(self, collective: str) -> str:
        return objective_of(collective, self.objective)

    def check_cells(self, cells: Iterable[Cell]) -> None:
        """UsageError unless every non-blocking cell of `cells` has its computation under `time` (a manifest
        that lost them cannot be verified under its objective)."""
        if self.objective != TIME:
            return
        missing = sorted(f"{c.collective} {c.msg_bytes} B ({c.ranks} ranks)" for c in cells
                         if is_nonblocking(c.collective) and c not in self.compute_us)
        if missing:
            raise UsageError(f"tuned for time, but no computation length is recorded for {', '.join(missing)}")

    def point(self, cell: Cell, algorithm: str, run: int, distribution: str = DEFAULT_DISTRIBUTION) -> BenchPoint:
        """The point that measures `algorithm` in `cell` for this objective (TunempiError for a `time` cell
        without a computation: it would be measured on other work than the rest of its cell)."""
        objective = self.objective_of(cell.collective)
        compute = None
        if objective == TIME:
            if cell not in self.compute_us:
                raise TunempiError(f"--objective time: no computation length for {cell.collective} "
                                   f"{cell.msg_bytes} B at {cell.ranks} ranks")
            compute = self.compute_us[cell]
        return BenchPoint(cell.collective, algorithm, cell.msg_bytes, run, distribution, objective, compute)


#: Measures the library's default latency at cells: points in, stored measurements out (tune's runner).
MeasureDefaults = Callable[[Mapping[Layout, Sequence[BenchPoint]]], Sequence[Measurement]]


#: Figures.sources of a computation sized by the library default's latency, and of one kept from stored points
DEFAULT_LATENCY_SOURCE = "the library default's latency"
STORED_SOURCE = "its stored time points"


#: The longest application computation a point is measured with (us): every point runs it in each of at least
#: warm-up + min_iters iterations (12 in tune: 60 ms at this length), and beyond a few milliseconds a collective
#: of the sizes tuned has either progressed to its end behind the computation or waits for the wait (no progress
#: without MPI calls) whatever its length. A longer one is measured at this length, and its source says so.
MAX_COMPUTE_US = 5000.0


def capped_computation(us: float, source: str) -> tuple[float, str]:
    """(the computation a point is measured with, its source): `us` up to MAX_COMPUTE_US."""
    if us <= MAX_COMPUTE_US:
        return us, source
    return MAX_COMPUTE_US, f"{source} ({us:.0f}us, measured as {MAX_COMPUTE_US:.0f}us: MAX_COMPUTE_US)"


@dataclass(frozen=True)
class ApplicationComputation:
    """What an application computes between a non-blocking collective's start and its wait (mean per call, us),
    in one row of its profile: the collective at a communicator size, nodes x ppn, message sizes lo..hi (the
    profile's bucket, inclusive)."""

    collective: str
    ranks: int
    nodes: int
    ppn: int
    size_lo: int
    size_hi: int
    compute_us: float
    source: str  # e.g. "profile app.json: iallreduce 4 ranks (1x4) 1 KiB"


def application_lengths(cells: Iterable[Cell], computations: Sequence[ApplicationComputation],
                        ) -> dict[Cell, ApplicationComputation]:
    """Each non-blocking cell of `cells` whose collective the application computations cover -> the one it takes:
    of the same collective, the row nearest in message size (0 inside its lo..hi, else the log2 distance to the
    nearer edge), then in communicator size (log2), then in nodes; the earlier row on a tie (the profile's
    order: most time first). Cells of other collectives are left out (they keep the default's latency)."""
    by_collective: dict[str, list[ApplicationComputation]] = {}
    for c in computations:
        by_collective.setdefault(c.collective, []).append(c)

    def log2(value: int) -> float:
        return math.log2(max(value, 1))

    def distance(cell: Cell, c: ApplicationComputation) -> tuple[float, float, int]:
        size = 0.0 if c.size_lo <= cell.msg_bytes <= c.size_hi else min(
            abs(log2(cell.msg_bytes) - log2(c.size_hi)), abs(log2(cell.msg_bytes) - log2(c.size_lo)))
        return (size, abs(log2(cell.ranks) - log2(c.ranks)), abs(cell.nodes - c.nodes))

    found = {}
    for cell in cells:
        rows = by_collective.get(cell.collective)
        if rows and is_nonblocking(cell.collective):
            found[cell] = min(rows, key=lambda c: distance(cell, c))
    return found


def compute_lengths(cells: Sequence[Cell], store: ResultStore, fingerprint: str, measure: MeasureDefaults, *,
                    system: str = "", run_of: Callable[[Cell], int] = lambda _: 0,
                    given: Mapping[Cell, float] | None = None,
                    sources: dict[Cell, str] | None = None) -> dict[Cell, float]:
    """Each non-blocking cell's computation for `time`: `given`'s where it has one (the application's, from a
    profile), else the one its stored `time` points were measured with (the latest), else the median of the
    library default's latency there, measured now by `measure` (one latency point of `default` per cell, its
    run `run_of(cell)`). `sources`, when passed, gets where each came from that was not given. TunempiError
    naming the cells where the default failed: they have no latency to size a computation by."""
    given = given or {}
    lengths: dict[Cell, float] = {cell: us for cell, us in given.items() if is_nonblocking(cell.collective)}
    by_layout: dict[Layout, list[Cell]] = {}
    for cell in cells:
        if is_nonblocking(cell.collective) and cell not in lengths:
            layout = Layout(ranks=cell.ranks, nodes=cell.nodes, ppn=cell.ppn if cell.nodes > 1 else None)
            by_layout.setdefault(layout, []).append(cell)
    work: dict[Layout, list[BenchPoint]] = {}
    for layout, group in by_layout.items():
        kept = computations(store, fingerprint, layout, [(c.collective, c.msg_bytes) for c in group], system=system)
        for cell in group:
            if (cell.collective, cell.msg_bytes) in kept:
                lengths[cell] = kept[(cell.collective, cell.msg_bytes)]
                if sources is not None:
                    sources[cell] = STORED_SOURCE
            else:
                work.setdefault(layout, []).append(BenchPoint(cell.collective, DEFAULT_ALGORITHM, cell.msg_bytes,
                                                              run_of(cell)))
    if work:
        for m in measure(work):
            cell = Cell(m.collective, m.ranks, m.nodes, m.ppn, m.msg_bytes)
            if m.ok and not m.errors and m.median_us is not None:
                lengths[cell] = round(m.median_us, 3)
                if sources is not None:
                    sources[cell] = DEFAULT_LATENCY_SOURCE
    missing = [c for cells_ in by_layout.values() for c in cells_ if c not in lengths]
    if missing:
        raise TunempiError("--objective time: the library's default failed at "
                           + ", ".join(f"{c.collective} {c.msg_bytes} B ({c.ranks} ranks)" for c in missing)
                           + ": no latency to size the computation by")
    return lengths
