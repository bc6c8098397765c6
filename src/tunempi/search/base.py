"""The ask/tell base every run-time-parameter search strategy implements, and its frozen records.

A strategy proposes configurations (`ask`) and learns from their results (`tell`); it never runs
anything itself. Whoever drives it (the CLI's trial loop, the simulator) calls an *objective*: any
callable `params -> TrialResult`. The value is always minimised (a time); failed or timed-out trials
carry no value, and strategies that need a number score them with `penalty()`.

Design (Optuna-like): `ask` returns a `Suggestion` (a trial number and parameters), `tell` takes it
back with the result and returns the frozen `Trial` that was recorded. A strategy that would like to
re-evaluate an already measured configuration gets the earlier result back at once, without a run
(`reuses_results = True`, the default), so budgets are spent on new configurations only; strategies
that want replicates (rl) switch this off. Every strategy takes a `seed`: given the same seed and
the same results it asks the same configurations, which is what makes resuming a journal exact.
"""

from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from tunempi.errors import UsageError
from tunempi.search.space import Config, ParamSpace, Value, config_key

# The penalty of a failed run, relative to the worst successful value seen so far.
FAILURE_PENALTY_FACTOR = 2.0
# How many consecutive already-measured suggestions mean the strategy has nothing new to offer.
MAX_CACHED_ASKS = 2000


class TrialStatus(enum.StrEnum):
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class TrialResult:
    """What an objective returns for one run.

    `value` is the objective (smaller is better), None unless status is OK. `metrics` are optional
    named side measurements (performance variables, timers, ...), used as state by rl.
    """

    value: float | None
    status: TrialStatus = TrialStatus.OK
    reason: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    duration: float | None = None  # seconds of wall time the run cost, when known

    def __post_init__(self) -> None:
        if self.status is TrialStatus.OK:
            if self.value is None or not math.isfinite(self.value):
                raise ValueError(f"an OK result needs a finite value, got {self.value!r}")
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))

    @classmethod
    def ok(cls, value: float, metrics: Mapping[str, float] | None = None, duration: float | None = None
           ) -> TrialResult:
        return cls(float(value), TrialStatus.OK, "", metrics or {}, duration)

    @classmethod
    def failed(cls, reason: str, status: TrialStatus = TrialStatus.FAILED, duration: float | None = None
               ) -> TrialResult:
        return cls(None, status, reason, {}, duration)

    @property
    def is_ok(self) -> bool:
        return self.status is TrialStatus.OK

    @property
    def ok_value(self) -> float:
        """The value of a successful run (a failed run has none to give)."""
        if self.value is None:
            raise ValueError(f"a {self.status.value} result has no value")
        return self.value


@dataclass(frozen=True)
class Suggestion:
    """A configuration a strategy asked to be run, with the trial number it will be recorded under."""

    number: int
    params: Mapping[str, Value]

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


@dataclass(frozen=True)
class Trial:
    """One finished run: its number, parameters and result. Immutable once recorded."""

    number: int
    params: Mapping[str, Value]
    result: TrialResult

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def value(self) -> float | None:
        return self.result.value

    @property
    def status(self) -> TrialStatus:
        return self.result.status

    @property
    def is_ok(self) -> bool:
        return self.result.is_ok

    @property
    def ok_value(self) -> float:
        return self.result.ok_value

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        out: dict[str, Any] = {"number": self.number, "params": dict(self.params), "status": r.status.value,
                               "value": r.value}
        if r.reason:
            out["reason"] = r.reason
        if r.metrics:
            out["metrics"] = dict(r.metrics)
        if r.duration is not None:
            out["duration"] = r.duration
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        try:
            status = TrialStatus(data["status"])
            result = TrialResult(data.get("value"), status, data.get("reason", ""),
                                 data.get("metrics", {}), data.get("duration"))
            return cls(int(data["number"]), dict(data["params"]), result)
        except (KeyError, ValueError, TypeError) as exc:
            raise UsageError(f"bad trial record {dict(data)!r}: {exc}") from None


Objective = Callable[[Mapping[str, Value]], TrialResult]


class SearchStrategy(ABC):
    """Ask/tell base class of every search strategy.

    Subclasses implement `_ask()` (a configuration, or None when they have nothing left to try) and
    `_observe(params, result)` (learn from a result); they read `self.space`, `self.rng` (seeded) and
    the records in `self.trials`. `recommend()` returns the configuration the strategy would pick now.
    """

    name: ClassVar[str]
    reuses_results: ClassVar[bool] = True

    def __init__(self, space: ParamSpace, *, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.trials: list[Trial] = []
        self._pending: Suggestion | None = None
        self._results_by_key: dict[Any, list[TrialResult]] = {}

    # -- public ask/tell ---------------------------------------------------------------------------
    def ask(self) -> Suggestion | None:
        """The next configuration to run, or None when the strategy is exhausted."""
        if self._pending is not None:
            raise RuntimeError("ask() called twice without tell(): finish the pending trial first")
        for _ in range(MAX_CACHED_ASKS):
            params = self._ask()
            if params is None:
                return None
            params = self.space.normalize(params)
            if not self.space.is_feasible(params):
                raise RuntimeError(f"{self.name} proposed an infeasible configuration {params}")
            previous = self._results_by_key.get(config_key(params))
            if previous and self.reuses_results:
                # Already measured: hand back the first result without spending a run.
                self._observe(params, previous[0])
                continue
            self._pending = Suggestion(len(self.trials), params)
            return self._pending
        return None

    def tell(self, suggestion: Suggestion, result: TrialResult) -> Trial:
        """Record the result of a suggestion and let the strategy learn from it."""
        if self._pending is None or suggestion.number != self._pending.number:
            raise RuntimeError("tell() must answer the suggestion returned by the last ask()")
        self._pending = None
        trial = Trial(suggestion.number, dict(suggestion.params), result)
        self.trials.append(trial)
        self._results_by_key.setdefault(config_key(trial.params), []).append(result)
        self._observe(dict(trial.params), result)
        return trial

    def replay(self, trials: Iterable[Trial]) -> None:
        """Feed recorded trials back in order (resume): each must be what this strategy asks next."""
        for recorded in trials:
            suggestion = self.ask()
            if suggestion is None or config_key(suggestion.params) != config_key(recorded.params):
                raise UsageError(
                    f"cannot resume: trial {recorded.number} ran {dict(recorded.params)} but {self.name} "
                    f"(seed {self.seed}) now asks {None if suggestion is None else dict(suggestion.params)}; "
                    "use the same space, strategy and seed, or start a new journal"
                )
            self.tell(suggestion, recorded.result)

    # -- results -----------------------------------------------------------------------------------
    @property
    def ok_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.is_ok]

    def mean_value(self, params: Mapping[str, Value]) -> float | None:
        """Mean of the OK measurements of a configuration (None if it never ran successfully)."""
        values = [r.ok_value for r in self._results_by_key.get(config_key(params), []) if r.is_ok]
        return float(np.mean(values)) if values else None

    def best_trial(self) -> Trial | None:
        """The successful trial whose configuration has the lowest mean measured value."""
        best: Trial | None = None
        best_value = math.inf
        for t in self.ok_trials:
            v = self.mean_value(t.params)
            if v is not None and v < best_value:
                best, best_value = t, v
        return best

    def recommend(self) -> Config | None:
        """The configuration this strategy would pick if stopped now (None before any OK trial)."""
        best = self.best_trial()
        return None if best is None else dict(best.params)

    def penalty(self) -> float | None:
        """The score of a failed run (None before any OK run): worse than every OK value.

        For times (positive) it is FAILURE_PENALTY_FACTOR x the worst value; the general form,
        worst + (factor - 1) x max(|worst|, worst - best), stays above the worst for any sign.
        """
        values = [t.ok_value for t in self.trials if t.is_ok]
        if not values:
            return None
        worst, best = max(values), min(values)
        return worst + (FAILURE_PENALTY_FACTOR - 1.0) * max(abs(worst), worst - best, 1e-12)

    def score(self, result: TrialResult) -> float:
        """The value to minimise: the measurement, or the penalty for a failed run."""
        if result.is_ok:
            return result.ok_value
        p = self.penalty()
        return p if p is not None else math.inf

    # -- for subclasses ----------------------------------------------------------------------------
    @abstractmethod
    def _ask(self) -> Config | None:
        """The next configuration to evaluate (full or active-only), or None when exhausted."""

    @abstractmethod
    def _observe(self, params: Config, result: TrialResult) -> None:
        """Learn from the result of `params` (a fresh run, or an earlier one re-served from cache)."""


def run_search(
    strategy: SearchStrategy,
    objective: Objective,
    budget: int,
    on_trial: Callable[[Trial], None] | None = None,
) -> list[Trial]:
    """Run up to `budget` new trials (stops early when the strategy is exhausted)."""
    if budget < 0:
        raise UsageError(f"budget must be >= 0, got {budget}")
    new: list[Trial] = []
    while len(strategy.trials) < budget:
        suggestion = strategy.ask()
        if suggestion is None:
            break
        trial = strategy.tell(suggestion, objective(suggestion.params))
        new.append(trial)
        if on_trial is not None:
            on_trial(trial)
    return new
