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
    #: Which launches measured it, for tune's decision across launches (tune/launch_blocks.py): 0 earlier
    #: launches (read back from the store), 1 this tune's exploring launch, 2... its deciding launches.
    #: The strategies do not read it.
    launch_block: int = 0
    #: The machine's state just before the run (the bench engine's probe, tune/machine_state.py), for tune's
    #: decision across launches. The strategies do not read it.
    probe_us: float | None = None
    #: Which launch of its block measured it, where a block is several launches (tune/file_launches.py); ""
    #: where one launch measured every algorithm. The strategies do not read it.
    launch_side: str = ""

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
        self._context_samples: dict[tuple[int, int], list[float]] = {}
        self._median_table = np.full((n_cells, n_algorithms), np.nan)
        self._median_dirty: set[tuple[int, int]] = set()
        self._failed = np.zeros((n_cells, n_algorithms), dtype=bool)
        self._available = space.availability()
        self._measurable_mask = np.array([c in self.measurable for c in space.cells])
        records = list(records)
        # Earlier jobs' points of this collective at cells outside the space (other scales: warm start)
        # are *context*: models train on them, the selection and the bookkeeping never see them.
        self.context_cells: tuple[Cell, ...] = tuple(sorted({
            r.cell for r in records
            if r.cell not in space and r.cell.collective == space.collective and r.algorithm in self._algorithm_index
        }))
        self._context_index = {c: len(space.cells) + k for k, c in enumerate(self.context_cells)}
        features = space.features([*space.cells, *self.context_cells], derived=self.derived_features)
        lo, hi = features.min(axis=0), features.max(axis=0)
        varying = hi > lo
        #: Features of the space's cells, then of the context cells, scaled to [0, 1] over both (constant
        #: features dropped); training rows index into it.
        self.row_features = (features[:, varying] - lo[varying]) / (hi[varying] - lo[varying])
        if not varying.any():
            # One cell (an application's one size at one layout, issue 40) and no context: no feature
            # varies, yet every model needs a column. A constant one makes each model a per-algorithm
            # mean with its noise, which is all one cell has to say (its repeats still narrow it).
            self.row_features = np.zeros((len(features), 1))
        #: Features of the space's cells (the first rows of `row_features`).
        self.cell_features = self.row_features[: len(space.cells)]
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
        if record.algorithm not in self._algorithm_index:
            return  # knowledge about other algorithms does not apply here
        if record.cell in self.space:
            row = self.space.index(record.cell)
        elif record.cell in self._context_index:
            if record.ok:
                self._context_samples.setdefault(
                    (self._context_index[record.cell], self._algorithm_index[record.algorithm]), []
                ).append(record.measured_us)
            return
        else:
            return
        key = (row, self._algorithm_index[record.algorithm])
        self.records.append(record)
        if record.ok:
            self._samples.setdefault(key, []).append(record.measured_us)
            self._median_dirty.add(key)
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
        # Kept up to date incrementally (only `_ingest` adds samples, and marks what changed): strategies
        # ask for it several times per round, and recomputing every median was a fifth of their model time.
        for i, j in self._median_dirty:
            self._median_table[i, j] = math.log(float(np.median(self._samples[i, j])))
        self._median_dirty.clear()
        return self._median_table.copy()

    def training_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row of `row_features`, algorithm index, log latency) of every successful run so far, context
        cells' runs included."""
        cells, algorithms, targets = [], [], []
        for (i, j), values in [*self._samples.items(), *self._context_samples.items()]:
            for value in values:
                cells.append(i)
                algorithms.append(j)
                targets.append(math.log(value))
        return np.array(cells, dtype=int), np.array(algorithms, dtype=int), np.array(targets, dtype=float)

    def one_hot_rows(self, cells: np.ndarray, algorithms: np.ndarray) -> np.ndarray:
        """Cell features followed by a one-hot algorithm encoding."""
        one_hot = np.zeros((len(cells), len(self.space.algorithms)))
        one_hot[np.arange(len(cells)), algorithms] = 1.0
        return np.hstack([self.row_features[cells], one_hot])

    def unmeasured_cells(self) -> np.ndarray:
        """Indices of measurable cells with no run yet."""
        measured = self.measured_counts().sum(axis=1) > 0
        return np.flatnonzero(self._measurable_mask & ~measured)

    def full_request(self, index: int, repeats: int = 1) -> Request:
        cell = self.space.cells[index]
        usable = [a for j, a in enumerate(self.space.algorithms) if self.usable_mask()[index, j]]
        return Request(cell, tuple(usable or self.space.candidates(cell)), repeats)
