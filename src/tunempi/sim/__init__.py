"""Replay of benchmark datasets as a benchmark engine, with a cost model and oracle-based metrics."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.sim.cost import CostModel
from tunempi.sim.extend import EXTENSION_POLICY, POLICIES, Evidence, Prediction, extend
from tunempi.sim.metrics import Oracle

if TYPE_CHECKING:
    from tunempi.sim.replay import ReplayBackend, load_frame
    from tunempi.sim.run import Trace, run_strategy, simulate, summarize

# The names backed by pandas load on first use: every command imports tunempi.sim.cost through the tune plan,
# and pandas alone took 0.3 s of the CLI's 1.4 s start.
_LAZY = {"ReplayBackend": "replay", "load_frame": "replay",
         "Trace": "run", "run_strategy": "run", "simulate": "run", "summarize": "run"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"tunempi.sim.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_ALGORITHM", "EXTENSION_POLICY", "POLICIES", "CostModel", "Evidence", "Oracle", "Prediction", "ReplayBackend", "Trace", "extend", "load_frame", "run_strategy",
    "simulate", "summarize",
]
