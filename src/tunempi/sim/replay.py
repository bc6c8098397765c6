"""Replay a benchmark dataset as if it were the benchmark engine.

Measuring (cell, algorithm) returns one of the dataset's repeated runs of that point: the runs are
visited in a seeded random order per point (without replacement until all were used, then again), so
asking twice gives two different real runs, as re-running the benchmark would. Points missing from the
dataset behave as failed runs (latency None; the launch is still paid). Under the `engine` cost model
(`CostModel(launch_per="layout")`) only the first point measured at a layout pays a launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from tunempi.collectives import DEFAULT_ALGORITHM, check_collective
from tunempi.errors import UsageError
from tunempi.sim.cost import CostModel
from tunempi.space import Cell, FeatureSpace
from tunempi.store.dataset import read_dataset
from tunempi.strategy.base import MeasurementRecord, Request


def load_frame(path: str | Path) -> pd.DataFrame:
    """The dataset as a DataFrame (via the shared reader, which validates the format)."""
    rows = read_dataset(path)
    frame = pd.DataFrame(
        [(r.collective, r.algorithm, r.ranks, r.nodes, r.ppn, r.msg_bytes, r.run, r.latency_us) for r in rows],
        columns=["collective", "algorithm", "ranks", "nodes", "ppn", "msg_bytes", "run", "latency_us"],
    )
    return frame


class ReplayBackend:
    """The benchmark engine, replayed from a dataset for one collective."""

    def __init__(self, frame: pd.DataFrame, collective: str, *, seed: int = 0,
                 cost_model: CostModel | None = None, measure_default: bool = False) -> None:
        collective = check_collective(collective)
        data = frame[(frame["collective"] == collective) & frame["latency_us"].notna() & (frame["latency_us"] > 0)]
        if data.empty:
            present = sorted(frame["collective"].unique())
            raise UsageError(f"no {collective} rows in the dataset; it has: {', '.join(present)}")
        self.collective = collective
        # The library's default measured like any algorithm (tune --plan's replay: a live tune's candidate);
        # else a request for it fails, as `simulate`'s spaces leave it out.
        self.measure_default = measure_default
        self.cost_model = cost_model or CostModel()
        self.rng = np.random.default_rng(seed)
        self._runs: dict[tuple[Cell, str], np.ndarray] = {}
        for key, group in data.groupby(["algorithm", "ranks", "nodes", "ppn", "msg_bytes"], sort=True):
            algorithm, ranks, nodes, ppn, msg = cast("tuple[str, int, int, int, int]", key)
            cell = Cell(collective, int(ranks), int(nodes), int(ppn), int(msg))
            self._runs[(cell, str(algorithm))] = group.sort_values("run")["latency_us"].to_numpy(float)
        self._order: dict[tuple[Cell, str], list[int]] = {}
        self._launched: set[tuple[int, int, int]] = set()  # layouts whose engine is up (engine model)
        # A cell where only the library's default ran has no candidate to choose (Peak PR 7730's alltoall
        # at 512 ranks, 512 KiB and 1 MiB): it is not a cell of the space.
        self.cells = tuple(sorted({cell for cell, algorithm in self._runs if algorithm != DEFAULT_ALGORITHM}))
        self.algorithms = tuple(sorted({a for _, a in self._runs} - {DEFAULT_ALGORITHM}))
        if not self.algorithms:
            raise UsageError(f"the dataset has no {collective} algorithm other than {DEFAULT_ALGORITHM!r}")

    def space(self) -> FeatureSpace:
        """Every cell of the dataset; an algorithm missing in a cell is marked unavailable there."""
        unavailable = {
            cell: frozenset(a for a in self.algorithms if (cell, a) not in self._runs) for cell in self.cells
        }
        return FeatureSpace(self.collective, self.cells, self.algorithms, unavailable)

    def runs(self, cell: Cell, algorithm: str) -> np.ndarray | None:
        return self._runs.get((cell, algorithm))

    def _next_run(self, key: tuple[Cell, str], runs: np.ndarray) -> float:
        order = self._order.get(key)
        if not order:
            order = list(self.rng.permutation(len(runs)))
            self._order[key] = order
        return float(runs[order.pop()])

    def _launches_for(self, cell: Cell) -> int:
        if self.cost_model.launch_per == "point":
            return 1
        if cell.scale in self._launched:
            return 0
        self._launched.add(cell.scale)
        return 1

    def prior_records(self, max_ranks: int) -> list[MeasurementRecord]:
        """One run of every point at <= `max_ranks` ranks, free (cost 0, no launch): an earlier job's data.

        The runs are drawn from the same replay order as `measure`, so measuring such a point again later
        returns another of its stored runs, as a new job would.
        """
        records = []
        for (cell, algorithm), runs in sorted(self._runs.items()):
            if cell.ranks <= max_ranks and algorithm != DEFAULT_ALGORITHM:
                records.append(MeasurementRecord(
                    cell=cell, algorithm=algorithm, latency_us=self._next_run((cell, algorithm), runs),
                    iterations=self.cost_model.iterations(cell.msg_bytes), launches=0, cost_s=0.0))
        return records

    def default_records(self, max_ranks: int) -> list[MeasurementRecord]:
        """One run of the library's default at every cell with <= `max_ranks` ranks, free: what tune
        measures beside the contenders in every cell it decides (an extension policy compares with it)."""
        return [MeasurementRecord(cell=cell, algorithm=DEFAULT_ALGORITHM,
                                  latency_us=self._next_run((cell, algorithm), runs),
                                  iterations=self.cost_model.iterations(cell.msg_bytes), launches=0, cost_s=0.0)
                for (cell, algorithm), runs in sorted(self._runs.items())
                if cell.ranks <= max_ranks and algorithm == DEFAULT_ALGORITHM]

    def measure(self, requests: Sequence[Request]) -> list[MeasurementRecord]:
        records = []
        for request in requests:
            if request.cell.collective != self.collective:
                raise UsageError(f"request for {request.cell.collective} on a {self.collective} replay")
            iterations = self.cost_model.iterations(request.cell.msg_bytes)
            for algorithm in request.algorithms:
                for _ in range(request.repeats):
                    runs = self._runs.get((request.cell, algorithm))
                    latency: float | None = None
                    if runs is not None and (algorithm != DEFAULT_ALGORITHM or self.measure_default):
                        latency = self._next_run((request.cell, algorithm), runs)
                    launches = self._launches_for(request.cell)
                    records.append(MeasurementRecord(
                        cell=request.cell, algorithm=algorithm, latency_us=latency,
                        iterations=iterations, launches=launches,
                        cost_s=self.cost_model.run_seconds(request.cell.msg_bytes, latency, launches),
                    ))
        return records
