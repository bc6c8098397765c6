"""What tune and verify measure a non-blocking collective's points for (`--objective`, collectives.OBJECTIVES).

`Figures` is the objective of one tune (or of the tuning directory verify reads) and, for `time`, the
computation of every non-blocking cell: one length per (collective, size, layout), the same for every algorithm
of the cell, so that algorithms are compared on the same work (what the application sees: start, its own
computation, wait). It is the library default's latency in that cell (`compute_lengths`), measured once and
kept: a cell that has `time` points in the store keeps the computation they were measured with (their
figures stay comparable across tunes), the manifest records every cell's, and verify measures with the
manifest's. Blocking collectives are measured as they are whatever the objective (their points' objective is
latency).
"""

from __future__ import annotations

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


def compute_lengths(cells: Sequence[Cell], store: ResultStore, fingerprint: str, measure: MeasureDefaults, *,
                    system: str = "", run_of: Callable[[Cell], int] = lambda _: 0) -> dict[Cell, float]:
    """Each non-blocking cell's computation for `time`: the one its stored `time` points were measured with
    (the latest), else the median of the library default's latency there, measured now by `measure` (one
    latency point of `default` per cell, its run `run_of(cell)`). TunempiError naming the cells where the
    default failed: they have no latency to size a computation by."""
    by_layout: dict[Layout, list[Cell]] = {}
    for cell in cells:
        if is_nonblocking(cell.collective):
            layout = Layout(ranks=cell.ranks, nodes=cell.nodes, ppn=cell.ppn if cell.nodes > 1 else None)
            by_layout.setdefault(layout, []).append(cell)
    lengths: dict[Cell, float] = {}
    work: dict[Layout, list[BenchPoint]] = {}
    for layout, group in by_layout.items():
        kept = computations(store, fingerprint, layout, [(c.collective, c.msg_bytes) for c in group], system=system)
        for cell in group:
            if (cell.collective, cell.msg_bytes) in kept:
                lengths[cell] = kept[(cell.collective, cell.msg_bytes)]
            else:
                work.setdefault(layout, []).append(BenchPoint(cell.collective, DEFAULT_ALGORITHM, cell.msg_bytes,
                                                              run_of(cell)))
    if work:
        for m in measure(work):
            cell = Cell(m.collective, m.ranks, m.nodes, m.ppn, m.msg_bytes)
            if m.ok and not m.errors and m.median_us is not None:
                lengths[cell] = round(m.median_us, 3)
    missing = [c for cells_ in by_layout.values() for c in cells_ if c not in lengths]
    if missing:
        raise TunempiError("--objective time: the library's default failed at "
                           + ", ".join(f"{c.collective} {c.msg_bytes} B ({c.ranks} ranks)" for c in missing)
                           + ": no latency to size the computation by")
    return lengths
