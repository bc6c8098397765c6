"""Random sampling: benchmark uniformly random unmeasured cells (Hunold et al. 2020's baseline)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tunempi.strategy.base import Request, Strategy
from tunempi.strategy.forest_selection import ForestFill, measured_then_model


class RandomStrategy(Strategy):
    """One uniformly random unmeasured cell per step, all its algorithms; a forest fills the rest."""

    name = "random"

    def __init__(self, space: Any, *, n_estimators: int = 100, refit_growth: float = 1.5, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self._fill = ForestFill(n_estimators=n_estimators, random_state=self.seed, refit_growth=refit_growth)

    def _ask(self) -> list[Request]:
        todo = self.unmeasured_cells()
        return [self.full_request(int(self.rng.choice(todo)))] if len(todo) else []

    def estimate_log_latency(self) -> np.ndarray:
        return measured_then_model(self, self._fill)
