"""Measuring what a tuning file does: cells measured in fresh launches, each launch under its own
environment (a written file, or nothing: the library's default), nothing switched at run time.

An algorithm switched at run time inside one persistent launch is not always what the application sees
in its own launch under the file (issue 39: MPICH's default measured 4x too slow after another algorithm,
Open MPI's allgather ring a tie in-launch and 3x slower in its own launch). So the launches that decide
(tune's deciding launches, `FileDecider`) measure the way verify and its held-out pass do: a launch per side.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.bench.engine import EngineSession, Layout
from tunempi.bench.protocol import SET_KEEP, MeasureSettings
from tunempi.bench.sweep import Selection, measure_point, to_measurement
from tunempi.collectives import DEFAULT_ALGORITHM, is_nonblocking
from tunempi.launch.hosts import NodeAllocation
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import VendorAdapter
from tunempi.space import Cell
from tunempi.tune.driver import distribution_of, layout_of
from tunempi.tune.files import rule_sets_for, selection_table, write_tuning_files
from tunempi.tune.objective import Figures
from tunempi.tune.runner import PointResult

#: Runs of each (cell, side) in each launch that decides (tune's deciding launches, verify's launch pairs and
#: its held-out ones): a launch's value for a cell is the median of them, so one stalled point (a pairwise
#: alltoall 5x slower than its default at 8 B in one launch and 1.3x faster at every other size of it) cannot
#: split or sink a range, or send a rule back (issue 39).
RUNS_PER_LAUNCH = 3

OnPoint = Callable[[PointResult], None]
RunOf = Callable[[Cell, str], int]


def decided_under_files(adapter: VendorAdapter, collective: str) -> bool:
    """Whether tune's deciding launches measure the collective under files (FileDecider) rather than switched
    at run time: a file must select it by size, and not a non-blocking one."""
    return adapter.selects_by_size(collective) and not is_nonblocking(collective)


@dataclass(frozen=True)
class LaunchSide:
    """One launch of a layout: the cells it measures, each recorded under `labels[cell]` (the algorithm the
    environment makes the library choose there), with `env` (a tuning file's variables; empty: the default)."""

    name: str
    labels: Mapping[Cell, str]
    env: Mapping[str, str]


def measure_sides(library: MPILibrary, adapter: VendorAdapter, layout: Layout, sides: Sequence[LaunchSide],
                  run: int, settings: MeasureSettings, on_point: OnPoint = lambda _: None,
                  hosts: NodeAllocation | None = None, system: str = "",
                  next_id: Callable[[], int] | None = None, run_of: RunOf | None = None,
                  distributions: Mapping[str, str] | None = None, figures: Figures | None = None,
                  repeats: int = 1) -> list[PointResult]:
    """Each side in its own launch of `layout`, in the given order; inside a launch its cells in an order
    seeded by (`run`, side): no launch measures in tune's order of points; with `repeats` > 1, that many
    passes over the cells, each in its own order (tune's deciding blocks: the launch's block value is the
    median of a cell's runs, so one stalled point does not make it). A point's `run` is `run`, or
    `run_of(cell, label)` (tune numbers each (cell, algorithm)'s runs for the store); its count distribution
    the collective's in `distributions` (uniform where absent); a non-blocking collective's measured for
    `figures`' objective (its computation, for time; latency without `figures`)."""
    figures = figures or Figures()
    ids: Iterator[int] = itertools.count(1)
    take_id = next_id or (lambda: next(ids))
    keep = Selection(None, SET_KEEP, False)
    env = dict(adapter.launch_env())
    if hosts is None:
        env.update(adapter.single_node_env())
    results: list[PointResult] = []
    for side in sides:
        order: list[Cell] = []
        for number in range(repeats):
            one_pass = sorted(side.labels)
            random.Random(f"{run}/{side.name}" + (f"/{number}" if number else "")).shuffle(one_pass)
            order += one_pass
        with EngineSession(library, layout, env={**env, **side.env}, allocation=hosts) as session:
            for position, cell in enumerate(order):
                label = side.labels[cell]
                point = figures.point(cell, label, run if run_of is None else run_of(cell, label),
                                      distribution_of(cell.collective, distributions))
                started = time.perf_counter()
                outcome = measure_point(session, point, keep, settings, next_id=take_id, retries=2,
                                        says_not_usable=adapter.says_not_usable)
                result = PointResult(point, layout, outcome,
                                     to_measurement(library, layout, point, outcome, system=system),
                                     time.perf_counter() - started, session.launches if position == 0 else 0,
                                     side=side.name, emulated=hosts is not None and hosts.emulated)
                results.append(result)
                on_point(result)
    return results


class FileDecider:
    """Tune's deciding launches under files (issue 39). For each layout and deciding block: one launch
    without a file (the library's default in every contested cell) and, for each contender rank k, one
    launch under a file tunempi writes selecting every cell's k-th contender (the files are written once,
    per layout, without the smoke check: the final files get theirs). The order of the launches is seeded
    by the block. Collectives a file cannot select by size (adapter.selects_by_size: alltoallv) and the
    non-blocking ones stay with the switched deciding launches (`takes`)."""

    def __init__(self, library: MPILibrary, adapter: VendorAdapter, settings: MeasureSettings, *,
                 allocation: NodeAllocation | None = None, system: str = "", staging: Path | None = None,
                 distributions: Mapping[str, str] | None = None) -> None:
        self.library, self.adapter, self.settings = library, adapter, settings
        self.distributions = dict(distributions or {})
        self.allocation, self.system = allocation, system
        self._temporary = tempfile.TemporaryDirectory(prefix="tunempi-decide-") if staging is None else None
        self.staging = staging if staging is not None else Path(self._temporary.name)  # type: ignore[union-attr]
        self._written: dict[tuple, dict[str, str]] = {}
        self._ids = itertools.count(1)

    def takes(self, collective: str) -> bool:
        return decided_under_files(self.adapter, collective)

    def sides(self, layout: Layout, contested: Mapping[Cell, Sequence[str]]) -> list[LaunchSide]:
        """The launches one deciding block makes at `layout`: the default's, then one per contender rank."""
        sides = [LaunchSide(DEFAULT_ALGORITHM, {cell: DEFAULT_ALGORITHM for cell in contested}, {})]
        for k in range(1, max((len(a) for a in contested.values()), default=1)):
            labels = {cell: algorithms[k] for cell, algorithms in contested.items()
                      if len(algorithms) > k and algorithms[k] != DEFAULT_ALGORITHM}
            if labels:
                sides.append(LaunchSide(f"contender{k}", labels, self._file_env(layout, k, labels)))
        return sides

    def _file_env(self, layout: Layout, k: int, labels: Mapping[Cell, str]) -> dict[str, str]:
        key = (layout, tuple(sorted(labels.items())))
        if key not in self._written:
            out = self.staging / f"r{layout.ranks}n{layout.nodes}-contender{k}-{len(self._written)}"
            table = selection_table(labels, preferred_ppn=layout.ppn)
            written = write_tuning_files(out, self.library, self.adapter, rule_sets_for(table), smoke=False,
                                         smoke_ranks=(layout.ranks,))
            self._written[key] = written.activation_env(out)
        return self._written[key]

    def measure(self, contested: Mapping[Cell, Sequence[str]], block: int, on_point: OnPoint = lambda _: None,
                run_of: RunOf | None = None) -> list[PointResult]:
        """One deciding block: every layout's launches (`sides`), their order shuffled by the block."""
        by_layout: dict[Layout, dict[Cell, Sequence[str]]] = {}
        for cell, algorithms in contested.items():
            by_layout.setdefault(layout_of(cell), {})[cell] = algorithms
        results: list[PointResult] = []
        for layout, cells in sorted(by_layout.items(), key=lambda item: (item[0].nodes, item[0].ranks)):
            sides = self.sides(layout, cells)
            random.Random(f"decide/{block}/{layout.ranks}/{layout.nodes}").shuffle(sides)
            hosts = (self.allocation.first(layout.nodes)
                     if self.allocation is not None and layout.nodes > 1 else None)
            results += measure_sides(self.library, self.adapter, layout, sides, block, self.settings, on_point,
                                     hosts, self.system, next_id=lambda: next(self._ids), run_of=run_of,
                                     distributions=self.distributions, repeats=RUNS_PER_LAUNCH)
        return results

    def close(self) -> None:
        if self._temporary is not None:
            self._temporary.cleanup()
