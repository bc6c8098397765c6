"""Exhaustive search (PTF): every configuration of the grid, in lexicographic order."""

from __future__ import annotations

from collections.abc import Iterator

from tunempi.search.base import SearchStrategy, TrialResult
from tunempi.search.space import Config, ParamSpace


class ExhaustiveSearch(SearchStrategy):
    """Walks `space.grid_configs()`; the seed is accepted for the common interface but unused.

    With a budget smaller than the grid, the first configurations in declaration order are run:
    use random search for a fair sample of a space too big to enumerate.
    """

    name = "exhaustive"

    def __init__(self, space: ParamSpace, *, seed: int = 0) -> None:
        super().__init__(space, seed=seed)
        self._configs: Iterator[Config] = space.grid_configs()

    def _ask(self) -> Config | None:
        return next(self._configs, None)

    def _observe(self, params: Config, result: TrialResult) -> None:
        pass
