"""Offline evaluation of search strategies on the built-in landscapes.

For one (landscape, strategy, seed) the strategy runs `budget` trials against the landscape's noisy
objective; after each trial its current recommendation (what it would answer if stopped now) is
scored by the landscape's noise-free time. The figure of merit is the number of trials until that
recommendation is within `target` (5%) of the known optimum: not just "has it *measured* a good
configuration" but "does it *know* it has" — under noise the two differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from tunempi.search import make_search, run_search
from tunempi.search.landscapes import Landscape

DEFAULT_TARGET = 0.05


@dataclass(frozen=True)
class RunOutcome:
    """One strategy run on one landscape with one seed."""

    landscape: str
    strategy: str
    seed: int
    budget: int
    trials: int                      # trials actually run (an exhausted strategy stops early)
    failed: int                      # failed or timed-out trials among them
    trials_to_target: int | None     # first trial after which the recommendation was within target
    final_slowdown: float            # noise-free time of the final recommendation / optimum

    def to_dict(self) -> dict:
        d = asdict(self)
        d["final_slowdown"] = None if math.isinf(self.final_slowdown) else self.final_slowdown
        return d


def evaluate_run(landscape: Landscape, strategy: str, budget: int, seed: int,
                 target: float = DEFAULT_TARGET) -> RunOutcome:
    search = make_search(strategy, landscape.space, seed=seed)
    # The objective's noise stream is separate from the strategy's (offset seed), and identical for
    # every strategy at a given seed.
    objective = landscape.objective(seed=10_000 + seed)
    reached: list[int] = []

    def check(trial) -> None:
        if not reached and landscape.slowdown(search.recommend()) <= 1.0 + target:
            reached.append(trial.number + 1)

    run_search(search, objective, budget, on_trial=check)
    return RunOutcome(
        landscape.name, strategy, seed, budget, len(search.trials),
        sum(1 for t in search.trials if not t.is_ok),
        reached[0] if reached else None,
        landscape.slowdown(search.recommend()),
    )


def evaluate(landscapes: Iterable[Landscape], strategies: Iterable[str], budget: int, seeds: Iterable[int],
             target: float = DEFAULT_TARGET,
             on_outcome: Callable[[RunOutcome], None] | None = None) -> list[RunOutcome]:
    outcomes = []
    strategies = list(strategies)
    seeds = list(seeds)
    for landscape in landscapes:
        for strategy in strategies:
            for seed in seeds:
                outcome = evaluate_run(landscape, strategy, budget, seed, target)
                outcomes.append(outcome)
                if on_outcome is not None:
                    on_outcome(outcome)
    return outcomes


@dataclass(frozen=True)
class Summary:
    """Outcomes of one (landscape, strategy) over seeds."""

    landscape: str
    strategy: str
    seeds: int
    reached: int                         # seeds whose recommendation came within the target
    median_trials: float | None          # median trials-to-target over all seeds (None: most never got there)
    median_trials_reached: float | None  # median over the seeds that got there
    median_final_slowdown: float
    failed_fraction: float

    def to_dict(self) -> dict:
        d = asdict(self)
        if math.isinf(self.median_final_slowdown):
            d["median_final_slowdown"] = None
        return d


def summarize(outcomes: Iterable[RunOutcome]) -> list[Summary]:
    groups: dict[tuple[str, str], list[RunOutcome]] = {}
    for o in outcomes:
        groups.setdefault((o.landscape, o.strategy), []).append(o)
    out = []
    for (landscape, strategy), runs in groups.items():
        # Unreached seeds count as "more than the budget": the median is honest about failures.
        hits = [o.trials_to_target for o in runs if o.trials_to_target is not None]
        all_seeds = sorted(o.trials_to_target if o.trials_to_target is not None else math.inf for o in runs)
        median_all = float(np.median(all_seeds))
        out.append(Summary(
            landscape, strategy, len(runs), len(hits),
            None if math.isinf(median_all) or math.isnan(median_all) else median_all,
            float(np.median(hits)) if hits else None,
            float(np.median([o.final_slowdown for o in runs])),
            sum(o.failed for o in runs) / max(1, sum(o.trials for o in runs)),
        ))
    return out
