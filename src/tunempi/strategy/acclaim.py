"""ACCLAiM (Wilkins et al., 2022) as its paper describes it.

- Surrogate: a random forest over the cell features and a one-hot algorithm, predicting log latency.
- Uncertainty: jackknife variance of the forest's per-tree predictions at every (cell, algorithm); a
  cell's score is the sum over its candidate algorithms.
- Next point: the unmeasured cell with the highest score, all its algorithms benchmarked; with
  probability `perturb_probability` (paper: about 20%) the pick is replaced by a nearby message size that
  is not a power of two (at the same scale), because real applications use such sizes. In a space with
  power-of-two sizes only there is nothing to replace it with and the pick stands.
- A few random initial cells (`n_initial`).
- Stop when the cumulative variance over the whole space stays below `variance_threshold` (per
  (cell, algorithm) point, in squared log units) for `patience` consecutive steps, or at the timeout
  (`budget_s`).
- Selection: the algorithm with the lowest predicted latency in every cell.

The public ACCLAiM code lacks the non-power-of-two part and tests stability of the variance rather than its
smallness; this follows the paper.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tunempi.space import is_power_of_two
from tunempi.strategy.base import Request, Strategy
from tunempi.strategy.forest_selection import ForestFill


class AcclaimStrategy(Strategy):
    name = "acclaim"

    def __init__(
        self,
        space: Any,
        *,
        n_initial: int = 3,
        n_estimators: int = 100,
        perturb_probability: float = 0.2,
        variance_threshold: float = 2e-5,
        patience: int = 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(space, **kwargs)
        self.n_initial = n_initial
        self.perturb_probability = perturb_probability
        self.variance_threshold = variance_threshold
        self.patience = patience
        self._fill = ForestFill(n_estimators=n_estimators, random_state=self.seed)
        self._below = 0
        self._first_variance: float | None = None
        self._last_variance: float | None = None

    # -- uncertainty ------------------------------------------------------------------------------
    def _variance_grid(self) -> np.ndarray | None:
        """Jackknife variance at every (cell, algorithm), 0 where the algorithm cannot run."""
        model = self._fill.fit(self)
        if model is None:
            return None
        cells, algorithms = self._fill.grid_rows(self)
        variance = model.jackknife_variance(self.one_hot_rows(cells, algorithms))
        return np.where(self.usable_mask(), variance.reshape(self.usable_mask().shape), 0.0)

    def _ask(self) -> list[Request]:
        todo = self.unmeasured_cells()
        if len(todo) == 0:
            return []
        measured_cells = len(self.measurable.cells) - len(todo)
        if measured_cells < self.n_initial:
            return [self.full_request(int(self.rng.choice(todo)))]
        variance = self._variance_grid()
        if variance is None:
            return [self.full_request(int(self.rng.choice(todo)))]
        mean_variance = float(variance.sum() / max(self.usable_mask().sum(), 1))
        self._first_variance = self._first_variance or mean_variance
        self._last_variance = mean_variance
        self._below = self._below + 1 if mean_variance < self.variance_threshold else 0
        if self._below >= self.patience:
            return []
        score = variance.sum(axis=1)[todo]
        pick = int(todo[int(np.argmax(score))])
        if self.rng.random() < self.perturb_probability:
            pick = self._nearby_non_power_of_two(pick, todo)
        return [self.full_request(pick)]

    def _nearby_non_power_of_two(self, index: int, todo: np.ndarray) -> int:
        cell = self.space.cells[index]
        options = [
            int(i) for i in todo
            if self.space.cells[i].scale == cell.scale
            and not is_power_of_two(self.space.cells[i].msg_bytes)
            and cell.msg_bytes / 2 <= self.space.cells[i].msg_bytes <= cell.msg_bytes * 2
        ]
        if not options:
            return index
        return options[int(self.rng.integers(len(options)))]

    def estimate_log_latency(self) -> np.ndarray:
        return self._fill.predict(self)

    def convergence(self) -> float:
        if not self._first_variance or not self._last_variance:
            return 0.0
        if self._last_variance <= self.variance_threshold:
            return 1.0
        span = np.log(self._first_variance / self.variance_threshold)
        done = np.log(self._first_variance / self._last_variance)
        return float(np.clip(done / span if span > 0 else 1.0, 0.0, 1.0))
