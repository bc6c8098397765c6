"""The ask/tell contract every collective-tuning strategy implements, and the frozen records it sees.

A strategy sees a `FeatureSpace` (the cells it must choose an algorithm for), optionally a smaller
*measurable* space (the cells it may benchmark, e.g. only up to some scale) and `MeasurementRecord`s:
never a launcher, a vendor or a dataset. The driver (the live tuner or the replay in sim/) loops:

    while not strategy.finished:
        requests = strategy.ask()            # a batch of (cell, algorithms, repeats)
        strategy.tell(engine.measure(requests))
    table = strategy.select()                # cell -> algorithm, for every cell of the space

`ask()` returns an empty list once the strategy has stopped (its own stopping rule, or `budget_s` of
benchmark time spent); `convergence()` is a number in [0, 1] for a progress bar.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tunempi.errors import UsageError
from tunempi.space import Cell, FeatureSpace


@dataclass(frozen=True)
class MeasurementRecord:
    """One benchmark run of one algorithm in one cell.

    `latency_us` is the run's latency (OSU-style average over its iterations); None when the run failed
    or the algorithm cannot run there. `cost_s` is the wall time the run took including its launch.
    """

    cell: Cell
    algorithm: str
    latency_us: float | None
    min_us: float | None = None
    max_us: float | None = None
    iterations: int = 0
    launches: int = 1
    cost_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.latency_us is not None and math.isfinite(self.latency_us) and self.latency_us > 0

    @property
    def measured_us(self) -> float:
        """The latency of a successful run (a failed run has none)."""
        if self.latency_us is None:
            raise ValueError(f"{self.algorithm} in {self.cell} did not run: no latency")
        return self.latency_us


@dataclass(frozen=True)
class Request:
    """Benchmark these algorithms in this cell, `repeats` independent runs each."""

    cell: Cell
    algorithms: tuple[str, ...]
    repeats: int = 1


#: cell -> selected algorithm, for every cell of a space; later turned into rules and tuning files.
SelectionTable = dict[Cell, str]


class Strategy(ABC):
    """Base class: bookkeeping of records, budget, validation of requests, table of measured medians."""

    name: ClassVar[str] = "abstract"
    #: Whether the model features include derived ones (FeatureSpace.features(derived=True)).
    derived_features: ClassVar[bool] = False

    def __init__(
        self,
        space: FeatureSpace,
        *,
        seed: int = 0,
        measurable: FeatureSpace | None = None,
        budget_s: float | None = None,
        records: Iterable[MeasurementRecord] = (),
    ) -> None:
        self.space = space
        self.measurable = measurable if measurable is not None else space
        outside = [c for c in self.measurable.cells if c not in space]
        if outside:
            raise UsageError(f"measurable cells outside the space, e.g. {outside[0]}")
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.budget_s = budget_s
        self.spent_s = 0.0
        self.launches = 0
        self.records: list[MeasurementRecord] = []
        self._stopped = False
        n_cells, n_algorithms = len(space.cells), len(space.algorithms)
        self._algorithm_index = {a: j for j, a in enumerate(space.algorithms)}
        self._samples: dict[tuple[int, int], list[float]] = {}
        self._median_cache: tuple[int, np.ndarray] | None = None
        self._failed = np.zeros((n_cells, n_algorithms), dtype=bool)
        self._available = space.availability()
        self._measurable_mask = np.array([c in self.measurable for c in space.cells])
        features = space.features(derived=self.derived_features)
        lo, hi = features.min(axis=0), features.max(axis=0)
        varying = hi > lo
        #: Cell features scaled to [0, 1] over the space (constant features dropped).
        self.cell_features = (features[:, varying] - lo[varying]) / (hi[varying] - lo[varying])
        # Records from earlier jobs (the store) are knowledge, not spending.
        for record in records:
            self._ingest(record)

    # -- the contract ---------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._stopped or (self.budget_s is not None and self.spent_s >= self.budget_s)

    def ask(self) -> list[Request]:
        """The next batch of measurements; empty once the strategy has stopped."""
        if self.finished:
            return []
        requests = self._ask()
        if not requests:
            self._stopped = True
            return []
        for request in requests:
            if request.cell not in self.measurable:
                raise AssertionError(f"{self.name} asked for {request.cell}, outside the measurable space")
            allowed = set(self.space.candidates(request.cell))
            if not request.algorithms or not set(request.algorithms) <= allowed or request.repeats < 1:
                raise AssertionError(f"{self.name} asked for a bad request {request}")
        return requests

    def tell(self, records: Sequence[MeasurementRecord]) -> None:
        for record in records:
            self._ingest(record)
            self.spent_s += record.cost_s
            self.launches += record.launches
        self._after_tell(records)

    def select(self) -> SelectionTable:
        """The algorithm with the lowest estimated latency in every cell of the space."""
        estimate = self.estimate_log_latency()
        estimate = np.where(self.usable_mask(), estimate, np.inf)
        table: SelectionTable = {}
        for i, cell in enumerate(self.space.cells):
            row = estimate[i]
            if np.isfinite(row).any():
                table[cell] = self.space.algorithms[int(np.argmin(row))]
            else:  # nothing known: any candidate that has not failed here
                usable = [a for j, a in enumerate(self.space.algorithms) if self.usable_mask()[i, j]]
                table[cell] = (usable or list(self.space.candidates(cell)) or list(self.space.algorithms))[0]
        return table

    def convergence(self) -> float:
        """Progress in [0, 1]: by default the share of measurable cells measured at least once."""
        measured = self.measured_counts().sum(axis=1) > 0
        total = self._measurable_mask.sum()
        return float((measured & self._measurable_mask).sum() / total) if total else 1.0

    # -- for subclasses ---------------------------------------------------------------------------
    @abstractmethod
    def _ask(self) -> list[Request]:
        """The next batch; an empty list means the strategy stops."""

    def _after_tell(self, records: Sequence[MeasurementRecord]) -> None:  # noqa: B027 (optional hook)
        """Hook run after new records are stored."""

    @abstractmethod
    def estimate_log_latency(self) -> np.ndarray:
        """(cells x algorithms) estimate of log latency used by `select`; NaN/inf where unknown."""

    # -- bookkeeping helpers --------------------------------------------------------------------
    def _ingest(self, record: MeasurementRecord) -> None:
        if record.cell not in self.space or record.algorithm not in self._algorithm_index:
            return  # knowledge about other cells/algorithms does not apply here
        key = (self.space.index(record.cell), self._algorithm_index[record.algorithm])
        self.records.append(record)
        if record.ok:
            self._samples.setdefault(key, []).append(record.measured_us)
        else:
            self._failed[key] = True

    def usable_mask(self) -> np.ndarray:
        """(cells x algorithms): candidate there and not known to fail."""
        return self._available & ~self._failed

    def measured_counts(self) -> np.ndarray:
        counts = np.zeros(self._failed.shape, dtype=int)
        for (i, j), values in self._samples.items():
            counts[i, j] = len(values)
        return counts + self._failed.astype(int)  # a failed run counts as measured: do not retry it

    def measured_median_log(self) -> np.ndarray:
        """(cells x algorithms) log of the median measured latency; NaN where not measured."""
        # Cached on the number of records (only `_ingest` adds samples): model-based strategies ask for it
        # several times per round, and recomputing every median was a fifth of their model time.
        if self._median_cache is None or self._median_cache[0] != len(self.records):
            table = np.full(self._failed.shape, np.nan)
            for (i, j), values in self._samples.items():
                table[i, j] = math.log(float(np.median(values)))
            self._median_cache = (len(self.records), table)
        return self._median_cache[1].copy()

    def training_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cell index, algorithm index, log latency) of every successful run so far."""
        cells, algorithms, targets = [], [], []
        for (i, j), values in self._samples.items():
            for value in values:
                cells.append(i)
                algorithms.append(j)
                targets.append(math.log(value))
        return np.array(cells, dtype=int), np.array(algorithms, dtype=int), np.array(targets, dtype=float)

    def one_hot_rows(self, cells: np.ndarray, algorithms: np.ndarray) -> np.ndarray:
        """Cell features followed by a one-hot algorithm encoding."""
        one_hot = np.zeros((len(cells), len(self.space.algorithms)))
        one_hot[np.arange(len(cells)), algorithms] = 1.0
        return np.hstack([self.cell_features[cells], one_hot])

    def unmeasured_cells(self) -> np.ndarray:
        """Indices of measurable cells with no run yet."""
        measured = self.measured_counts().sum(axis=1) > 0
        return np.flatnonzero(self._measurable_mask & ~measured)

    def full_request(self, index: int, repeats: int = 1) -> Request:
        cell = self.space.cells[index]
        usable = [a for j, a in enumerate(self.space.algorithms) if self.usable_mask()[index, j]]
        return Request(cell, tuple(usable or self.space.candidates(cell)), repeats)
