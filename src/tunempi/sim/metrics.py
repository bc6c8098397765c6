"""Evaluation against the oracle: average slowdown of a selection table, default's slowdown, costs.

Per cell the oracle is the algorithm (never `default`) with the best median latency over the dataset's
runs; a selection's slowdown in a cell is median(selected) / median(oracle). An algorithm selected where
the dataset has no run of it is charged the worst candidate's median there (it would have to fall back).

An extension policy is scored against the library's default only where the oracle is known
(`oracle_known`): where a sweep ran few of a collective's algorithms (Peak PR 7730's alltoall at 512 ranks ran
`linear` alone), the "best" is one algorithm's time and the worst-candidate charge of an unmeasured pick is that
same time, so the comparison would be with a stand-in, not with the pick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.sim.cost import CostModel
from tunempi.space import Cell

if TYPE_CHECKING:
    from tunempi.sim.replay import ReplayBackend

#: A cell's oracle counts as known where the dataset ran at least this share of the algorithms it ran in the
#: fullest cell of the same collective among those scored (docs/measurements/strategies.md, "The oracle where a
#: sweep stopped short": every cell of both Peak files passes, except PR 7730's alltoall at 512 ranks, 1 of 4).
ORACLE_COVERAGE = 0.5


def oracle_known(collectives: Sequence[str], measured: Sequence[int]) -> np.ndarray:
    """Per cell (its collective, how many algorithms the dataset ran there, `default` not counted): whether
    it ran at least `ORACLE_COVERAGE` of its collective's fullest cell among these."""
    fullest: dict[str, int] = {}
    for collective, count in zip(collectives, measured, strict=True):
        fullest[collective] = max(fullest.get(collective, 0), count)
    return np.array([count > 0 and count >= ORACLE_COVERAGE * fullest[collective]
                     for collective, count in zip(collectives, measured, strict=True)], dtype=bool)


class Oracle:
    """Median latency of every (cell, algorithm) of a replayed dataset and the best per cell."""

    def __init__(self, backend: ReplayBackend, *, above_ranks: int | None = None) -> None:
        """`above_ranks`: evaluate only the cells with more ranks (the rest, after a warm start)."""
        self.cells = tuple(c for c in backend.cells if above_ranks is None or c.ranks > above_ranks)
        if not self.cells:
            from tunempi.errors import UsageError

            raise UsageError(f"no cells above {above_ranks} ranks to evaluate")
        self.algorithms = backend.algorithms
        self._column = {a: j for j, a in enumerate(self.algorithms)}
        self.median_us = np.full((len(self.cells), len(self.algorithms)), np.nan)
        self.default_us = np.full(len(self.cells), np.nan)
        for i, cell in enumerate(self.cells):
            for j, algorithm in enumerate(self.algorithms):
                runs = backend.runs(cell, algorithm)
                if runs is not None:
                    self.median_us[i, j] = float(np.median(runs))
            runs = backend.runs(cell, DEFAULT_ALGORITHM)
            if runs is not None:
                self.default_us[i] = float(np.median(runs))
        self.best_us = np.nanmin(self.median_us, axis=1)
        self.worst_us = np.nanmax(self.median_us, axis=1)
        self.best_algorithm = [self.algorithms[int(np.nanargmin(row))] for row in self.median_us]
        self.known = oracle_known([c.collective for c in self.cells],
                                  [int(np.isfinite(row).sum()) for row in self.median_us])
        self._cost_model = backend.cost_model

    def slowdowns(self, selection: Mapping[Cell, str]) -> np.ndarray:
        """Slowdown of the selection in every cell (cells missing from the selection count as worst)."""
        chosen = np.empty(len(self.cells))
        for i, cell in enumerate(self.cells):
            j = self._column.get(selection.get(cell, ""), -1)
            value = self.median_us[i, j] if j >= 0 else np.nan
            chosen[i] = value if np.isfinite(value) else self.worst_us[i]
        return chosen / self.best_us

    def slowdowns_with_default(self, selection: Mapping[Cell, str]) -> np.ndarray:
        """Like `slowdowns`, but `default` selects the library's own choice (its measured median): how an
        extension policy is scored. NaN in the cells where the default was not measured and where the
        oracle is not known (`known`)."""
        chosen = self.slowdowns(selection)
        picks_default = np.array([selection.get(c) == DEFAULT_ALGORITHM for c in self.cells])
        chosen[picks_default] = self.default_us[picks_default] / self.best_us[picks_default]
        chosen[~np.isfinite(self.default_us) | ~self.known] = np.nan
        return chosen

    def default_slowdowns(self) -> np.ndarray:
        """The library default's slowdown in every cell (NaN where it was not measured)."""
        return self.default_us / self.best_us

    def average_slowdown(self, selection: Mapping[Cell, str]) -> float:
        return float(np.mean(self.slowdowns(selection)))

    def geometric_slowdown(self, selection: Mapping[Cell, str]) -> float:
        return float(np.exp(np.mean(np.log(self.slowdowns(selection)))))

    def default_slowdown(self) -> float | None:
        known = np.isfinite(self.default_us)
        if not known.any():
            return None
        return float(np.mean(self.default_us[known] / self.best_us[known]))

    def exhaustive_cost(self, cost_model: CostModel | None = None, cells: np.ndarray | None = None) -> float:
        """Seconds to run every candidate (cell, algorithm) once, at its median latency.

        `cells` (boolean mask over `self.cells`) limits it to some cells. Under the engine cost model the
        launches are one per layout among them instead of one per point.
        """
        model = cost_model or self._cost_model
        total = 0.0
        layouts = set()
        for i, cell in enumerate(self.cells):
            if cells is not None and not cells[i]:
                continue
            for value in self.median_us[i]:
                if np.isfinite(value):
                    per_point = 1 if model.launch_per == "point" else 0
                    total += model.run_seconds(cell.msg_bytes, float(value), per_point)
                    layouts.add(cell.scale)
        if model.launch_per == "layout":
            total += len(layouts) * model.launch_overhead_s
        return total
