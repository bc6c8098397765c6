"""Random search (PTF): configurations drawn uniformly (log-uniformly on log ranges), seeded."""

from __future__ import annotations

from tunempi.search.base import SearchStrategy, TrialResult
from tunempi.search.space import Config


class RandomSearch(SearchStrategy):
    """Independent uniform draws; repeats of a measured configuration are served from the cache,
    so on a small discrete space the search ends once every configuration has been drawn."""

    name = "random"

    def _ask(self) -> Config | None:
        return self.space.sample(self.rng)

    def _observe(self, params: Config, result: TrialResult) -> None:
        pass
