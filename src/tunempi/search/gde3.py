"""GDE3: generalized differential evolution 3 (Kukkonen & Lampinen 2005), PTF's defaults.

DE/rand/1/bin over the unit cube [0, 1]^d (each parameter mapped by `Param.to_unit`; categorical
values by their index), population 10, CR = F = 0.5 (PTF's defaults). Configurations are decoded
from the continuous genotype, so several genotypes may share a configuration (measured once).

Selection is GDE3's, written for any number of objectives (here one: the measured value) and
constraints (the space's constraints, plus "the run failed", so failed runs lose to any run that
succeeded without a number having to be made up):
- both infeasible: the trial replaces the target if it weakly dominates it in constraint violations;
- one feasible: the feasible one survives;
- both feasible: the trial replaces the target if it weakly dominates it in objectives, the target
  stays if it dominates the trial, and otherwise both survive; the population is then cut back to its
  size by non-dominated sorting and crowding distance (feasible members first).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from tunempi.search.base import SearchStrategy, TrialResult
from tunempi.search.space import Config, ParamSpace, config_key


@dataclass(frozen=True)
class Member:
    """A population member: genotype, decoded configuration, objectives and constraint violations."""

    genotype: tuple[float, ...]
    config: tuple
    objectives: tuple[float, ...]
    violations: tuple[float, ...]

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations)


def weakly_dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a is no worse than b in every component."""
    return all(x <= y for x, y in zip(a, b, strict=True))


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a is no worse than b in every component and better in one."""
    return weakly_dominates(a, b) and any(x < y for x, y in zip(a, b, strict=True))


def gde3_select(target: Member, trial: Member) -> str:
    """GDE3's rule: 'trial' (replace the target), 'target' (keep it) or 'both' (keep both)."""
    if not target.feasible and not trial.feasible:
        return "trial" if weakly_dominates(trial.violations, target.violations) else "target"
    if trial.feasible and not target.feasible:
        return "trial"
    if target.feasible and not trial.feasible:
        return "target"
    if weakly_dominates(trial.objectives, target.objectives):
        return "trial"
    if dominates(target.objectives, trial.objectives):
        return "target"
    return "both"


def non_dominated_fronts(points: Sequence[Sequence[float]]) -> list[list[int]]:
    """Indices of `points` grouped into Pareto fronts, best front first."""
    n = len(points)
    dominated_by = [0] * n
    dominating: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i != j and dominates(points[i], points[j]):
                dominating[i].append(j)
            elif i != j and dominates(points[j], points[i]):
                dominated_by[i] += 1
    fronts = [[i for i in range(n) if dominated_by[i] == 0]]
    while fronts[-1]:
        nxt = []
        for i in fronts[-1]:
            for j in dominating[i]:
                dominated_by[j] -= 1
                if dominated_by[j] == 0:
                    nxt.append(j)
        fronts.append(nxt)
    return fronts[:-1]


def crowding_distance(points: Sequence[Sequence[float]]) -> list[float]:
    n = len(points)
    if n <= 2:
        return [float("inf")] * n
    distance = [0.0] * n
    for m in range(len(points[0])):
        order = sorted(range(n), key=lambda i: points[i][m])
        lo, hi = points[order[0]][m], points[order[-1]][m]
        distance[order[0]] = distance[order[-1]] = float("inf")
        if hi == lo:
            continue
        for k in range(1, n - 1):
            distance[order[k]] += (points[order[k + 1]][m] - points[order[k - 1]][m]) / (hi - lo)
    return distance


def reduce_population(members: Sequence[Member], size: int) -> list[Member]:
    """Cut back to `size`: feasible by fronts (crowding breaks the last front), then least violating."""
    if len(members) <= size:
        return list(members)
    feasible = [m for m in members if m.feasible]
    infeasible = sorted((m for m in members if not m.feasible), key=lambda m: sum(m.violations))
    kept: list[Member] = []
    for front in non_dominated_fronts([m.objectives for m in feasible]):
        group = [feasible[i] for i in front]
        if len(kept) + len(group) <= size:
            kept.extend(group)
            continue
        # Prune the front one member at a time, recomputing crowding (Kukkonen & Deb 2006).
        while len(kept) + len(group) > size:
            distance = crowding_distance([m.objectives for m in group])
            group.pop(int(np.argmin(distance)))
        kept.extend(group)
        break
    kept.extend(infeasible[: size - len(kept)])
    return kept


class GDE3Search(SearchStrategy):
    name = "gde3"

    def __init__(self, space: ParamSpace, *, seed: int = 0, population_size: int = 10, cr: float = 0.5,
                 f: float = 0.5) -> None:
        super().__init__(space, seed=seed)
        if population_size < 4:
            raise ValueError("GDE3 needs a population of at least 4 (DE/rand/1 draws 3 others)")
        self.population_size = population_size
        self.cr = cr
        self.f = f
        self.population_: list[Member] = []
        self.generation_ = 0
        self._plan: Iterator[Config] = self._evolve()

    def _ask(self) -> Config | None:
        return next(self._plan, None)

    def _observe(self, params: Config, result: TrialResult) -> None:
        pass  # the plan reads results back through _member

    def _member(self, genotype: np.ndarray, config: Config) -> Member:
        n_constraints = len(self.space.constraints)
        violations = [0.0 if c.names - config.keys() or c.evaluate(config) else 1.0
                      for c in self.space.constraints]
        mean = self.mean_value(config)
        failed = 0.0 if mean is not None or not self.space.is_feasible(config) else 1.0
        objective = mean if mean is not None else float("inf")
        assert len(violations) == n_constraints
        return Member(tuple(float(x) for x in genotype), config_key(config), (objective,),
                      (*violations, failed))

    def _evolve(self) -> Iterator[Config]:
        d = len(self.space)
        # Initial population: the start configuration (the library defaults, when declared) and
        # uniform draws.
        initial = [self.space.start_config()]
        while len(initial) < self.population_size:
            initial.append(self.space.sample(self.rng))
        for config in initial:
            genotype = self.space.to_unit_vector(config)
            if self.space.is_feasible(config):
                yield config
            self.population_.append(self._member(genotype, config))
        while True:
            self.generation_ += 1
            old = list(self.population_)
            n = len(old)
            candidates = []
            for i in range(n):
                r1, r2, r3 = self.rng.choice([k for k in range(n) if k != i], size=3, replace=False)
                mutant = np.asarray(old[r3].genotype) + self.f * (
                    np.asarray(old[r1].genotype) - np.asarray(old[r2].genotype))
                # Bounce back inside the cube rather than clip, so the bounds are not over-sampled.
                mutant = np.where(mutant < 0, -mutant, mutant)
                mutant = np.where(mutant > 1, 2 - mutant, mutant)
                mutant = np.clip(mutant, 0.0, 1.0)
                cross = self.rng.random(d) < self.cr
                cross[self.rng.integers(d)] = True
                candidates.append(np.where(cross, mutant, np.asarray(old[i].genotype)))
            survivors: list[Member] = []
            for target, genotype in zip(old, candidates, strict=True):
                config = self.space.from_unit_vector(genotype)
                if self.space.is_feasible(config):
                    yield config
                trial = self._member(genotype, config)
                verdict = gde3_select(target, trial)
                if verdict == "trial":
                    survivors.append(trial)
                elif verdict == "target":
                    survivors.append(target)
                else:
                    survivors.extend((target, trial))
            self.population_ = reduce_population(survivors, self.population_size)
