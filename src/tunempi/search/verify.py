"""Noise-aware recommendation: is the best configuration really faster than the defaults?

A search's best measured value is optimistic (the minimum of noisy draws), so the winner is re-run
against the defaults, interleaved (default, best, best, default, ...: ABBA cancels a linear drift
such as a filling page cache or a neighbour job starting), `repeats` times each. Adjacent runs form
pairs; the paired log-ratios log(default / best) are tested one-sided with Student's t: the
recommendation is made only when the lower 95% confidence bound of the speedup is above 1.
Otherwise the answer is "keep the defaults". Logs make the test about ratios (a 10% gain is 10% at
any scale) and tame the right-skew of run times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from tunempi.search.base import Objective, TrialResult
from tunempi.search.space import Value

MIN_PAIRS = 3


@dataclass(frozen=True)
class Verdict:
    """The outcome of best-vs-default verification."""

    recommend: bool
    speedup: float | None          # geometric-mean default/best time ratio (>1: best is faster)
    speedup_low: float | None      # one-sided lower confidence bound of the speedup
    p_value: float | None          # one-sided: H0 "best is not faster"
    pairs: int                     # usable pairs
    confidence: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def interleaved_schedule(repeats: int) -> list[str]:
    """'default'/'best' run order for `repeats` pairs: ABBA blocks, so drift hits both sides alike."""
    order: list[str] = []
    for i in range(repeats):
        order.extend(("default", "best") if i % 2 == 0 else ("best", "default"))
    return order


def compare_to_default(best: Sequence[float | None], default: Sequence[float | None],
                       confidence: float = 0.95) -> Verdict:
    """Decide from paired measurements (None = failed run); `best[i]` and `default[i]` are a pair."""
    if len(best) != len(default):
        raise ValueError("best and default need the same number of measurements (pairs)")
    failed_best = sum(1 for b in best if b is None)
    if failed_best:
        return Verdict(False, None, None, None, 0, confidence,
                       f"keep the defaults: the best configuration failed {failed_best} of {len(best)} runs")
    pairs = [(b, d) for b, d in zip(best, default, strict=True) if b is not None and d is not None]
    if len(pairs) < MIN_PAIRS:
        return Verdict(False, None, None, None, len(pairs), confidence,
                       f"keep the defaults: {len(pairs)} usable pairs, at least {MIN_PAIRS} are needed")
    diffs = np.array([math.log(d / b) for b, d in pairs])
    n = len(diffs)
    mean = float(diffs.mean())
    sd = float(diffs.std(ddof=1))
    if sd == 0.0:
        # Identical ratios every time (a deterministic objective): the sign decides.
        p = 0.0 if mean > 0 else 1.0
        low = mean
    else:
        se = sd / math.sqrt(n)
        t = mean / se
        p = float(stats.t.sf(t, df=n - 1))
        low = mean - float(stats.t.ppf(confidence, df=n - 1)) * se
    speedup, speedup_low = math.exp(mean), math.exp(low)
    if p < 1 - confidence:
        reason = (f"recommend: {speedup:.3f}x faster than the defaults "
                  f"({confidence:.0%} lower bound {speedup_low:.3f}x, p={p:.3g}, {n} pairs)")
        return Verdict(True, speedup, speedup_low, p, n, confidence, reason)
    reason = (f"keep the defaults: measured {speedup:.3f}x but not significant at {confidence:.0%} "
              f"(lower bound {speedup_low:.3f}x, p={p:.3g}, {n} pairs)")
    return Verdict(False, speedup, speedup_low, p, n, confidence, reason)


@dataclass(frozen=True)
class VerificationRun:
    role: str  # "best" or "default"
    pair: int
    result: TrialResult


def verify_against_default(
    objective: Objective,
    best_params: Mapping[str, Value],
    default_params: Mapping[str, Value],
    repeats: int,
    confidence: float = 0.95,
    done: Sequence[VerificationRun] = (),
    on_run: Callable[[VerificationRun], None] | None = None,
) -> Verdict:
    """Run the interleaved schedule (skipping runs already `done`, for resume) and decide."""
    results: dict[tuple[str, int], TrialResult] = {(r.role, r.pair): r.result for r in done}
    for index, role in enumerate(interleaved_schedule(repeats)):
        pair = index // 2
        if (role, pair) in results:
            continue
        result = objective(best_params if role == "best" else default_params)
        results[(role, pair)] = result
        if on_run is not None:
            on_run(VerificationRun(role, pair, result))
    best = [results[("best", i)].value if results[("best", i)].is_ok else None for i in range(repeats)]
    default = [results[("default", i)].value if results[("default", i)].is_ok else None for i in range(repeats)]
    return compare_to_default(best, default, confidence)
