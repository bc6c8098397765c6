"""Collective-tuning strategies behind one ask/tell base class; one module per strategy."""

from __future__ import annotations

import json
from typing import Any

from tunempi.errors import UsageError
from tunempi.space import FeatureSpace
from tunempi.strategy.acclaim import AcclaimStrategy
from tunempi.strategy.base import MeasurementRecord, Request, SelectionTable, Strategy
from tunempi.strategy.exhaustive import ExhaustiveStrategy
from tunempi.strategy.random_sampling import RandomStrategy
from tunempi.strategy.tunempi import TunempiStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (ExhaustiveStrategy, RandomStrategy, AcclaimStrategy, TunempiStrategy)
}
DEFAULT_STRATEGY = "tunempi"


def make_strategy(name: str, space: FeatureSpace, **kwargs: Any) -> Strategy:
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise UsageError(f"unknown strategy {name!r}; valid: {', '.join(STRATEGIES)}") from None
    return cls(space, **kwargs)


def setting_value(text: str) -> Any:
    """A strategy setting's value from the command line: JSON (numbers, true/false, quoted strings), else
    the text itself (`tunempi simulate --param`, bench scripts)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


__all__ = [
    "DEFAULT_STRATEGY", "STRATEGIES", "AcclaimStrategy", "ExhaustiveStrategy", "MeasurementRecord",
    "RandomStrategy", "Request", "SelectionTable", "Strategy", "TunempiStrategy", "make_strategy", "setting_value",
]
