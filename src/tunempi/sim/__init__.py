"""Replay of benchmark datasets as a benchmark engine, with a cost model and oracle-based metrics."""

from __future__ import annotations

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.sim.cost import CostModel
from tunempi.sim.extend import EXTENSION_POLICY, POLICIES, Evidence, Prediction, extend
from tunempi.sim.metrics import Oracle
from tunempi.sim.replay import ReplayBackend, load_frame
from tunempi.sim.run import Trace, run_strategy, simulate, summarize

__all__ = [
    "DEFAULT_ALGORITHM", "EXTENSION_POLICY", "POLICIES", "CostModel", "Evidence", "Oracle", "Prediction", "ReplayBackend", "Trace", "extend", "load_frame", "run_strategy",
    "simulate", "summarize",
]
