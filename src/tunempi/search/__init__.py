"""Run-time parameter search across whole application runs (PTF's strategies, TPE, rl).

Strategies see only a `ParamSpace` and frozen `Trial` records (search/base.py); whoever drives them
supplies an objective, `params -> TrialResult`. `make_search(name, space, seed=...)` builds one by
name; `STRATEGY_NAMES` lists them in the order the CLI shows them.
"""

from __future__ import annotations

import importlib
from typing import Any

from tunempi.errors import UsageError
from tunempi.search.base import (
    Objective,
    SearchStrategy,
    Suggestion,
    Trial,
    TrialResult,
    TrialStatus,
    run_search,
)

# name -> (module, class); modules are imported on demand (optuna is slow to import).
_STRATEGIES: dict[str, tuple[str, str]] = {
    "exhaustive": ("tunempi.search.exhaustive", "ExhaustiveSearch"),
    "individual": ("tunempi.search.individual", "IndividualSearch"),
    "random": ("tunempi.search.random", "RandomSearch"),
    "gde3": ("tunempi.search.gde3", "GDE3Search"),
    "bayes": ("tunempi.search.bayes", "BayesSearch"),
    "rl": ("tunempi.search.rl", "RLSearch"),
}
STRATEGY_NAMES: tuple[str, ...] = tuple(_STRATEGIES)


def strategy_class(name: str) -> type[SearchStrategy]:
    try:
        module, cls = _STRATEGIES[name]
    except KeyError:
        raise UsageError(f"unknown search strategy {name!r}; valid: {', '.join(STRATEGY_NAMES)}") from None
    return getattr(importlib.import_module(module), cls)


def make_search(name: str, space: Any, *, seed: int = 0, **options: Any) -> SearchStrategy:
    """A strategy by name (see STRATEGY_NAMES), seeded."""
    return strategy_class(name)(space, seed=seed, **options)


__all__ = [
    "STRATEGY_NAMES", "Objective", "SearchStrategy", "Suggestion", "Trial", "TrialResult", "TrialStatus",
    "make_search", "run_search", "strategy_class",
]
