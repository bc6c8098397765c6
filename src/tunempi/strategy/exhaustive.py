"""Exhaustive: benchmark every algorithm in every measurable cell, smallest scale and size first."""

from __future__ import annotations

from typing import Any

import numpy as np

from tunempi.strategy.base import Request, Strategy
from tunempi.strategy.forest_selection import ForestFill, measured_then_model


class ExhaustiveStrategy(Strategy):
    """Every cell once, in the space's order (scale, then message size): the cost reference.

    Cells not measured yet (stopped early, or beyond the measurable space) get a forest prediction.
    """

    name = "exhaustive"

    def __init__(self, space: Any, *, n_estimators: int = 100, refit_growth: float = 1.5, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self._fill = ForestFill(n_estimators=n_estimators, random_state=self.seed, refit_growth=refit_growth)

    def _ask(self) -> list[Request]:
        todo = self.unmeasured_cells()
        return [self.full_request(int(todo[0]))] if len(todo) else []

    def estimate_log_latency(self) -> np.ndarray:
        return measured_then_model(self, self._fill)
