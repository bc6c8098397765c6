"""Collective-tuning strategies behind one ask/tell base class; one module per strategy."""

from __future__ import annotations

import importlib
import json
from typing import Any

from tunempi.errors import UsageError
from tunempi.space import FeatureSpace
from tunempi.strategy.base import MeasurementRecord, Request, SelectionTable, Strategy

# name -> (module, class), imported when a strategy is made: every strategy fits a scikit-learn model, and
# importing scikit-learn (with SciPy and pandas) costs each command that never tunes about a second at start.
_STRATEGY_CLASSES: dict[str, tuple[str, str]] = {
    "exhaustive": ("tunempi.strategy.exhaustive", "ExhaustiveStrategy"),
    "random": ("tunempi.strategy.random_sampling", "RandomStrategy"),
    "acclaim": ("tunempi.strategy.acclaim", "AcclaimStrategy"),
    "tunempi": ("tunempi.strategy.tunempi", "TunempiStrategy"),
}
STRATEGIES: tuple[str, ...] = tuple(_STRATEGY_CLASSES)
DEFAULT_STRATEGY = "tunempi"


def strategy_class(name: str) -> type[Strategy]:
    try:
        module, cls = _STRATEGY_CLASSES[name]
    except KeyError:
        raise UsageError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}") from None
    strategy: type[Strategy] = getattr(importlib.import_module(module), cls)
    return strategy


def import_strategies(*names: str) -> None:
    """Import these strategies (all without names) now, and with them the BLAS and OpenMP libraries of
    scikit-learn and SciPy: threadpoolctl limits only the libraries loaded when its limit is set."""
    for name in names or STRATEGIES:
        strategy_class(name)


def make_strategy(name: str, space: FeatureSpace, **kwargs: Any) -> Strategy:
    return strategy_class(name)(space, **kwargs)


def setting_value(text: str) -> Any:
    """A strategy setting's value from the command line: JSON (numbers, true/false, quoted strings), else
    the text itself (`tunempi simulate --param`, bench scripts)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


__all__ = [
    "DEFAULT_STRATEGY", "STRATEGIES", "MeasurementRecord", "Request", "SelectionTable", "Strategy",
    "import_strategies", "make_strategy", "setting_value", "strategy_class",
]
