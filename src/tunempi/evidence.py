"""Paired evidence: is a candidate faster than a baseline, measured side by side in pairs?

Every command that keeps or drops a choice by comparing it with another (`verify`: tuned against the
library's default; `search`: the best configuration against the defaults; `online best` and the settled
losers of `online update`: an algorithm against another in the same application runs) asks this module, so
the same pairs get the same verdict whichever command measured them.

The rule (docs/evidence.md says why):
- each pair gives the log ratio log(baseline / candidate): a 10 % gain is 10 % at any scale, and the
  state a pair shares (a slow machine minute, a drift) cancels;
- "faster" at level `level` needs (1) at least MIN_PAIRS pairs, (2) a one-sided test of "faster" below
  `level`, and (3) consistency: the candidate faster in at least CONSISTENCY of the pairs. "slower" is the
  mirror image. Anything else is "same" (no evidence either way);
- the test: Wilcoxon's exact signed-rank test as soon as it can reach the level (2^-n < level: from 6
  pairs at 2.5 %), exact whatever the noise's shape and not swamped by one stalled run; below that,
  Student's t on the log ratios (exact for lognormal noise, conservative with heavy tails);
- the estimate and the two-sided 1 - 2 * level interval come from the same test (Hodges-Lehmann with the
  signed-rank interval; the geometric mean with the t interval), so the interval excludes 1 exactly when
  the test is significant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TypeVar

import numpy as np
from scipy import stats
from scipy.special import stdtr, stdtrit

#: One-sided error of each verdict: P("faster" | A/A) <= LEVEL, likewise "slower". The two-sided interval
#: the commands report is then the 1 - 2 * LEVEL = 95 % interval, and a verdict is that interval
#: excluding 1.
LEVEL = 0.025
#: Fewer pairs give no verdict: the spread of two log ratios is one number, and a run of stalls that hits
#: both pairs alike makes it look small.
MIN_PAIRS = 3
#: The candidate must win at least this share of the pairs: a mean carried by a few big wins while it
#: loses the rest (a ranking that flips with the machine's state) is no reason to switch.
CONSISTENCY = 0.75

VERDICTS: tuple[str, ...] = ("faster", "slower", "same")

T = TypeVar("T")


@dataclass(frozen=True)
class Comparison:
    """A candidate against a baseline over `pairs` pairs. speedup: the estimate of baseline / candidate
    (> 1: the candidate is faster); [low, high] its two-sided 1 - 2 * level interval; p_faster / p_slower
    the one-sided p-values; wins / losses the shares of pairs in which the candidate was faster / slower."""

    pairs: int
    speedup: float
    low: float
    high: float
    p_faster: float
    p_slower: float
    wins: float
    losses: float
    level: float
    verdict: str  # one of VERDICTS

    @property
    def confidence(self) -> float:
        """Of the two-sided interval [low, high]."""
        return 1.0 - 2.0 * self.level

    def to_dict(self) -> dict:
        return asdict(self)


def decide(pairs: int, p_faster: float, p_slower: float, wins: float, losses: float, level: float = LEVEL) -> str:
    """The decision rule on a comparison's numbers: faster / slower / same at the one-sided `level`."""
    if pairs < MIN_PAIRS:
        return "same"
    if p_faster < level and wins >= CONSISTENCY:
        return "faster"
    if p_slower < level and losses >= CONSISTENCY:
        return "slower"
    return "same"


def _student(logs: np.ndarray, level: float) -> tuple[float, float, float, float, float]:
    """(estimate, low, high, p_faster, p_slower) of the mean log ratio: one-sample Student t."""
    n = len(logs)
    mean = float(logs.mean())
    sd = float(logs.std(ddof=1)) if n > 1 else 0.0
    if n < 2:  # no estimate of the noise: the interval is the point, and nothing is significant
        return mean, mean, mean, 1.0, 1.0
    if sd == 0.0:  # the same ratio every time (a deterministic cost): the sign decides
        return mean, mean, mean, 0.0 if mean > 0 else 1.0, 0.0 if mean < 0 else 1.0
    se = sd / math.sqrt(n)
    t = mean / se
    half = float(stdtrit(n - 1, 1.0 - level)) * se
    return mean, mean - half, mean + half, float(stdtr(n - 1, -t)), float(stdtr(n - 1, t))


@lru_cache(maxsize=64)
def _signed_rank_tail(n: int) -> np.ndarray:
    """tail[t] = P(T >= t) for Wilcoxon's signed-rank sum T of n untied pairs under "no difference"
    (every sign equally likely), t = 0 .. n(n+1)/2."""
    probabilities = np.zeros(n * (n + 1) // 2 + 1)
    probabilities[0] = 1.0
    for rank in range(1, n + 1):  # each rank joins the positive side with probability 1/2
        shifted = np.zeros_like(probabilities)
        shifted[rank:] = probabilities[:-rank]
        probabilities = 0.5 * (probabilities + shifted)
    return np.cumsum(probabilities[::-1])[::-1]


def _signed_rank(logs: np.ndarray, level: float) -> tuple[float, float, float, float, float]:
    """(estimate, low, high, p_faster, p_slower) from Wilcoxon's signed-rank test: the Hodges-Lehmann
    estimate (median of the Walsh averages) and the interval of the location values the test would not
    reject, which excludes 0 exactly when the test rejects."""
    walsh = np.sort(np.add.outer(logs, logs)[np.triu_indices(len(logs))] / 2.0)
    estimate = float(np.median(walsh))
    nonzero = logs[logs != 0.0]  # a pair without a difference says nothing about its sign
    n = len(nonzero)
    ranks = stats.rankdata(np.abs(nonzero))  # ties share their mean rank
    positive = float(ranks[nonzero > 0].sum())
    tail = _signed_rank_tail(n)
    total = n * (n + 1) // 2

    def p_at_least(t: float) -> float:
        return float(tail[min(max(math.ceil(t - 1e-9), 0), total)]) if t <= total else 0.0

    p_faster, p_slower = p_at_least(positive), p_at_least(total - positive)
    tail_all = _signed_rank_tail(len(logs))
    critical = int(np.argmax(tail_all < level))  # the smallest T the test calls significant
    m = len(walsh)
    return estimate, float(walsh[m - critical]), float(walsh[critical - 1]), p_faster, p_slower


def compare(candidate: Sequence[float], baseline: Sequence[float], *, level: float = LEVEL) -> Comparison:
    """Compare paired times (or any cost, lower is better): candidate[i] and baseline[i] are one pair."""
    if len(candidate) != len(baseline) or not candidate:
        raise ValueError("need the same, non-zero number of candidate and baseline values (pairs)")
    if not 0.0 < level < 0.5:
        raise ValueError(f"level must be in (0, 0.5), got {level}")
    ratios = np.asarray(baseline, dtype=float) / np.asarray(candidate, dtype=float)
    if not np.all(np.isfinite(ratios) & (ratios > 0)):
        raise ValueError("times must be positive and finite")
    logs = np.log(ratios)
    n = len(logs)
    rank_test = 0.5 ** n < level  # the signed-rank test can reach the level only from there on
    centre, low, high, p_faster, p_slower = _signed_rank(logs, level) if rank_test else _student(logs, level)
    wins = float(np.count_nonzero(logs > 0)) / n
    losses = float(np.count_nonzero(logs < 0)) / n
    return Comparison(n, math.exp(centre), math.exp(low), math.exp(high), p_faster, p_slower, wins, losses, level,
                      decide(n, p_faster, p_slower, wins, losses, level))


def pair_order(first: T, second: T, pair: int) -> tuple[T, T]:
    """The run order within pair number `pair`: first-second for even pairs, second-first for odd ones
    (ABBA), so a drift of the machine (a filling cache, a neighbour job starting) hits both sides alike."""
    return (first, second) if pair % 2 == 0 else (second, first)


def alternating(first: T, second: T, pairs: int, *, start: int = 0) -> list[tuple[int, T]]:
    """The run order of `pairs` interleaved pairs as (pair index, side), in pair_order; pair indices run
    from `start` (a second pass continues them)."""
    return [(pair, side) for pair in range(start, start + pairs) for side in pair_order(first, second, pair)]
