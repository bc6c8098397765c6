"""Selection shared by the model-light strategies: measured medians where measured, a forest elsewhere."""

from __future__ import annotations

import numpy as np

from tunempi.model import RandomForestSurrogate
from tunempi.strategy.base import Strategy


class ForestFill:
    """Fits a random forest on a strategy's records and predicts log latency in every (cell, algorithm).

    The fit is cached on the number of records, so `select()` after `ask()` costs one fit, not two. With
    `refit_growth` > 1 the forest is refitted only once the records grew by that factor since the last
    fit (the selection of exhaustive and random uses measured medians wherever it can, so the forest only
    fills the cells not measured yet: refitting it after every cell was most of a replay's time).
    """

    def __init__(self, n_estimators: int = 100, random_state: int = 0, refit_growth: float = 1.0) -> None:
        self.n_estimators = n_estimators
        self.random_state = random_state
        self.refit_growth = refit_growth
        self.model_: RandomForestSurrogate | None = None
        self._fitted_on = -1
        self._prediction: tuple[int, np.ndarray] | None = None

    def fit(self, strategy: Strategy) -> RandomForestSurrogate | None:
        n = len(strategy.records)
        stale = n > self._fitted_on * self.refit_growth if self.refit_growth > 1 else n != self._fitted_on
        if self.model_ is None or stale:
            cells, algorithms, target = strategy.training_rows()
            self._fitted_on = len(strategy.records)
            if len(target) == 0:
                self.model_ = None
            else:
                self.model_ = RandomForestSurrogate(
                    n_estimators=self.n_estimators, random_state=self.random_state,
                ).fit(strategy.one_hot_rows(cells, algorithms), target)
        return self.model_

    def grid_rows(self, strategy: Strategy) -> tuple[np.ndarray, np.ndarray]:
        n_cells, n_algorithms = strategy.usable_mask().shape
        cells = np.repeat(np.arange(n_cells), n_algorithms)
        algorithms = np.tile(np.arange(n_algorithms), n_cells)
        return cells, algorithms

    def predict(self, strategy: Strategy) -> np.ndarray:
        """(cells x algorithms) predicted log latency; NaN when there is no data yet."""
        shape = strategy.usable_mask().shape
        model = self.fit(strategy)
        if model is None:
            return np.full(shape, np.nan)
        if self._prediction is None or self._prediction[0] != self._fitted_on:
            cells, algorithms = self.grid_rows(strategy)
            self._prediction = (self._fitted_on,
                                model.predict(strategy.one_hot_rows(cells, algorithms)).reshape(shape))
        return self._prediction[1].copy()


def measured_then_model(strategy: Strategy, fill: ForestFill) -> np.ndarray:
    """Measured median where an algorithm was measured in a cell, the forest's prediction elsewhere.

    In a cell where some algorithms were measured, unmeasured ones keep their prediction: that way an
    algorithm is never chosen only because it was never tried, nor excluded for the same reason.
    """
    measured = strategy.measured_median_log()
    return np.where(np.isnan(measured), fill.predict(strategy), measured)
