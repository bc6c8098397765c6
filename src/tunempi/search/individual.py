"""Individual search (PTF): one parameter at a time, keeping the best value found for each.

Starts from the space's start configuration (declared defaults), then for each parameter in
declaration order runs every grid value with the other parameters held at the best so far, and keeps
the best. PTF makes one pass; here passes repeat until one changes nothing (a second pass catches
interactions the first missed, and configurations already measured cost no run).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from tunempi.search.base import SearchStrategy, TrialResult
from tunempi.search.space import Config, ParamSpace, config_key


class IndividualSearch(SearchStrategy):
    name = "individual"

    def __init__(self, space: ParamSpace, *, seed: int = 0, max_passes: int = 10) -> None:
        super().__init__(space, seed=seed)
        self.max_passes = max_passes
        self._plan: Iterator[Config] = self._walk()

    def _ask(self) -> Config | None:
        return next(self._plan, None)

    def _observe(self, params: Config, result: TrialResult) -> None:
        pass  # the plan reads results back through _score_of

    def _score_of(self, config: Config) -> float:
        mean = self.mean_value(config)
        if mean is not None:
            return mean
        penalty = self.penalty()
        return penalty if penalty is not None else math.inf

    def _walk(self) -> Iterator[Config]:
        # `full` keeps a value for every parameter, so a parameter that becomes active when another
        # changes has somewhere to start from.
        full: dict[str, Any] = {p.name: p.start_value() for p in self.space}
        current = self.space.normalize(full)
        if not self.space.is_feasible(current):
            current = self.space.sample(self.rng)
            full.update(current)
        yield current
        for _ in range(self.max_passes):
            changed = False
            for p in self.space:
                if p.name not in current:
                    continue  # inactive under the current best
                best_value, best_score = current[p.name], self._score_of(current)
                for v in p.grid():
                    candidate = self.space.normalize({**full, p.name: v})
                    if not self.space.is_feasible(candidate) or config_key(candidate) == config_key(current):
                        continue
                    yield candidate
                    score = self._score_of(candidate)
                    if score < best_score:
                        best_value, best_score = v, score
                if best_value != current[p.name]:
                    full[p.name] = best_value
                    current = self.space.normalize(full)
                    changed = True
            if not changed:
                return
