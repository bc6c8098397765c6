"""Where advice gets its numbers: measured cells from the results store, the model for the others.

Both implement `PerformanceSource` (profile/advise.py): `performance(Cell) -> CellPerformance | None`.

- `MeasuredCells`: per (collective, ranks, nodes, ppn, size) and algorithm, the median over stored runs of
  each run's median latency. A cell counts as measured when the library default (`default`, or the
  library's own spelling `auto`/`ignore`) and at least one other algorithm were measured there.
- `PredictedCells`: the collective-tuning model of strategy/tunempi.py (one Gaussian process on a linear
  trend per algorithm, model/gaussian_process.py) fitted on every measured run of a collective, over the
  same features (log2 of ranks, nodes, ppn, size, size per rank), answers for the cells never measured.
  Its latent standard deviation is reported with each prediction.
- `MeasuredOrPredicted`: measured where measured, else predicted.

Records are `store.results.Measurement`s of ONE library (the caller filters); latencies use each run's
median (robust on a noisy node; the live tuner does the same), else its mean.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from tunempi.model import TrendGaussianProcess
from tunempi.profile.advise import Cell, CellPerformance
from tunempi.space.feature import Cell as FeatureCell
from tunempi.store.results import Measurement

#: Names under which a store holds the library's own choice (tunempi's, MPICH's, Open MPI's).
DEFAULT_NAMES: frozenset[str] = frozenset({"default", "auto", "ignore"})
DEFAULT = "default"


def _latency(m: Measurement) -> float | None:
    value = m.median_us if m.median_us is not None else m.mean_us
    return float(value) if value is not None and value > 0 and math.isfinite(value) else None


def _algorithm(name: str) -> str:
    return DEFAULT if name in DEFAULT_NAMES else name


CellKey = tuple[str, int, int, int, int]


def _key(collective: str, ranks: int, nodes: int, ppn: int, msg_bytes: int) -> CellKey:
    return (collective, ranks, nodes, ppn, msg_bytes)


def cell_table(records: Iterable[Measurement]) -> dict[CellKey, dict[str, float]]:
    """cell -> algorithm -> median latency (us) over the successful runs."""
    runs: dict[CellKey, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in records:
        latency = _latency(m) if m.ok else None
        if latency is None:
            continue
        runs[_key(m.collective, m.ranks, m.nodes, m.ppn, m.msg_bytes)][_algorithm(m.algorithm)].append(latency)
    return {key: {a: float(np.median(v)) for a, v in algs.items()} for key, algs in runs.items()}


DefaultChoice = Callable[[Cell], "str | None"]


class MeasuredCells:
    """PerformanceSource over stored measurements (exact cells only)."""

    def __init__(self, records: Iterable[Measurement], default_choice: DefaultChoice | None = None) -> None:
        self.table_ = cell_table(records)
        self.default_choice = default_choice  # what the library's own selection picks, where known

    def performance(self, cell: Cell) -> CellPerformance | None:
        latencies = self.table_.get(_key(cell.collective, cell.ranks, cell.nodes, cell.ppn, cell.msg_bytes))
        if not latencies:
            return None
        choice = self.default_choice(cell) if self.default_choice else None
        default_us = latencies.get(DEFAULT)
        if default_us is None and choice is not None:
            default_us = latencies.get(choice)  # the default's own algorithm, forced and measured
        others = {a: t for a, t in latencies.items() if a != DEFAULT}
        if default_us is None or not others:
            return None
        best = min(latencies, key=lambda a: latencies[a])
        return CellPerformance(default_us, best, latencies[best], "measured", choice)


@dataclass(frozen=True)
class _Fitted:
    model: TrendGaussianProcess
    n_runs: int


class PredictedCells:
    """PerformanceSource from the collective-tuning model (strategy/tunempi.py's surrogate).

    One `TrendGaussianProcess` per (collective, algorithm) with at least `min_runs` successful runs,
    fitted lazily on first use on the log of each measured cell's median latency (at most `max_cells`
    cells per algorithm, a seeded sample beyond that). Features are scaled to [0, 1] over the measured cells of
    the collective (constant ones dropped), as the strategy does; cells outside that range extrapolate
    along the model's linear trend, with a growing standard deviation.
    """

    def __init__(self, records: Iterable[Measurement], *, min_runs: int = 3, max_cells: int = 800,
                 random_state: int | None = 0, default_choice: DefaultChoice | None = None) -> None:
        self.min_runs = min_runs
        self.max_cells = max_cells
        self.random_state = random_state
        self.default_choice = default_choice
        # One training point per (cell, algorithm): the median of its runs. A GP fit is cubic in the
        # points, and repeated runs of one cell add noise, not shape (the white-noise kernel takes the rest).
        records = list(records)
        runs_per: dict[tuple[CellKey, str], int] = defaultdict(int)
        for m in records:
            if m.ok and _latency(m) is not None:
                runs_per[(_key(m.collective, m.ranks, m.nodes, m.ppn, m.msg_bytes), _algorithm(m.algorithm))] += 1
        self._runs: dict[str, list[tuple[FeatureCell, str, float]]] = defaultdict(list)
        self._n_runs: dict[tuple[str, str], int] = defaultdict(int)
        for key, latencies in cell_table(records).items():
            collective, ranks, nodes, ppn, size = key
            for algorithm, latency in latencies.items():
                cell = FeatureCell(collective, ranks, nodes, ppn, size)
                self._runs[collective].append((cell, algorithm, math.log(latency)))
                self._n_runs[(collective, algorithm)] += runs_per[(key, algorithm)]
        self._fitted: dict[str, tuple[dict[str, _Fitted], np.ndarray, np.ndarray, np.ndarray]] = {}

    @staticmethod
    def _raw(cells: Sequence[FeatureCell]) -> np.ndarray:
        base = np.array([c.features() for c in cells], dtype=float).reshape(len(cells), 4)
        return np.hstack([base, (base[:, 3] - base[:, 0])[:, None]])  # + log2(bytes per rank)

    def _fit(self, collective: str) -> tuple[dict[str, _Fitted], np.ndarray, np.ndarray, np.ndarray]:
        if collective in self._fitted:
            return self._fitted[collective]
        # Small matrices: threaded BLAS only adds contention (measured on the shared 2-core machine: 171
        # cells x 7 algorithms fitted in 54 s with the default threads, 3.5 s with one).
        with threadpool_limits(limits=1):
            return self._fit_unlimited(collective)

    def _fit_unlimited(self, collective: str) -> tuple[dict[str, _Fitted], np.ndarray, np.ndarray, np.ndarray]:
        runs = self._runs.get(collective, [])
        models: dict[str, _Fitted] = {}
        lo = hi = varying = np.zeros(0)
        if runs:
            raw = self._raw([c for c, _, _ in runs])
            lo, hi = raw.min(axis=0), raw.max(axis=0)
            varying = hi > lo
            scaled = (raw[:, varying] - lo[varying]) / (hi[varying] - lo[varying])
            algorithms = np.array([a for _, a, _ in runs])
            target = np.array([t for _, _, t in runs])
            rng = np.random.default_rng(self.random_state)
            if scaled.shape[1] > 0:
                for algorithm in sorted(set(algorithms)):
                    rows = np.flatnonzero(algorithms == algorithm)
                    if self._n_runs[(collective, str(algorithm))] < self.min_runs or len(rows) < 2:
                        continue
                    if len(rows) > self.max_cells:
                        rows = np.sort(rng.choice(rows, self.max_cells, replace=False))
                    model = TrendGaussianProcess(random_state=self.random_state).fit(scaled[rows], target[rows])
                    models[str(algorithm)] = _Fitted(model, len(rows))
        self._fitted[collective] = (models, lo, hi, varying)
        return self._fitted[collective]

    def predict(self, cell: Cell) -> dict[str, tuple[float, float]]:
        """algorithm -> (predicted latency in us, standard deviation of its log) at the cell."""
        models, lo, hi, varying = self._fit(cell.collective)
        if not models or cell.nodes < 1 or cell.ppn < 1:
            return {}
        raw = self._raw([FeatureCell(cell.collective, cell.ranks, cell.nodes, cell.ppn, cell.msg_bytes)])
        x = (raw[:, varying] - lo[varying]) / (hi[varying] - lo[varying])
        out = {}
        with threadpool_limits(limits=1):
            for algorithm, fitted in models.items():
                mean, std = fitted.model.predict(x, return_std=True)
                out[algorithm] = (float(math.exp(mean[0])), float(std[0]))
        return out

    def performance(self, cell: Cell) -> CellPerformance | None:
        predicted = self.predict(cell)
        choice = self.default_choice(cell) if self.default_choice else None
        default_name = DEFAULT if DEFAULT in predicted else choice if choice in predicted else None
        others = [a for a in predicted if a != DEFAULT]
        if default_name is None or not others:
            return None
        best = min(predicted, key=lambda a: predicted[a][0])
        return CellPerformance(predicted[default_name][0], best, predicted[best][0], "predicted", choice,
                               log_std=max(predicted[default_name][1], predicted[best][1]))


class MeasuredOrPredicted:
    """Measured where the store has the cell, else the model's prediction."""

    def __init__(self, measured: MeasuredCells, predicted: PredictedCells | None) -> None:
        self.measured = measured
        self.predicted = predicted

    def performance(self, cell: Cell) -> CellPerformance | None:
        found = self.measured.performance(cell)
        if found is None and self.predicted is not None:
            found = self.predicted.performance(cell)
        return found
