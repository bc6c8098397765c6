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

Across launches (`compare_launches`, docs/evidence.md "Launches as blocks"): one `mpiexec` is one sample
(Hunold and Carpen-Amarie, ReproMPI): a launch can favour one algorithm over another for its whole life
(placement, binding, the state the machine was in), so runs within one launch are not independent pairs. A
launch gives one block value per cell, log(median baseline / median candidate) over its runs there, and a
verdict needs at least MIN_LAUNCHES launches. It is given for a range of cells (the neighbouring sizes a
tuning-file rule covers; one cell is a range of one) under a mixed model, block value = cell effect +
launch effect (shared by the range) + residual; both variances are pooled over the ranges measured in the
same launches (`launch_spread`, method of moments), and a range's own larger spread only widens its
interval. Then Student's t with Satterthwaite's degrees of freedom, and the consistency rule on the
launches: the range's mean favouring the candidate in at least CONSISTENCY of them. Without a pooled spread
(verify: each rule on its own launches), from as many launches as the signed-rank test can reach the level
with (6 at 2.5 %), that test on the launch means decides, as for pairs: one wild launch in favour (a 6x slower
default in one launch of six, every other launch 1.2x) no longer widens the interval past 1 and hides a gain
every launch showed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TypeVar

import numpy as np

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

#: A comparison across launches needs both sides measured in at least this many launches.
MIN_LAUNCHES = 2
#: The most degrees of freedom the pooled spread counts for against a range's own (compare_launches).
PRIOR_DF = 10.0

VERDICTS: tuple[str, ...] = ("faster", "slower", "same")
#: Block values: one cell's, one per launch, or a range's, cells x launches.
Blocks = Sequence[float] | Sequence[Sequence[float]] | np.ndarray

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


# Student's t from SciPy, imported on first use: SciPy costs every command about 0.3 s at start, and most
# commands never compare.
def _t_cdf(df: float, x: float) -> float:
    from scipy.special import stdtr

    return float(stdtr(df, x))


def _t_quantile(df: float, p: float) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(df, p))


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
    half = _t_quantile(n - 1, 1.0 - level) * se
    return mean, mean - half, mean + half, _t_cdf(n - 1, -t), _t_cdf(n - 1, t)


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
    from scipy.stats import rankdata  # here: scipy.stats costs every command ~0.7 s at start

    ranks = rankdata(np.abs(nonzero))  # ties share their mean rank
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


def launch_log_ratio(candidate: Sequence[float], baseline: Sequence[float]) -> float:
    """One launch's block value: log(median baseline / median candidate) over the runs of each side in that
    launch (> 0: the candidate was faster there). The median: a stalled run does not move it."""
    if len(candidate) == 0 or len(baseline) == 0:
        raise ValueError("a launch's block needs at least one run of each side")
    values = np.asarray([*candidate, *baseline], dtype=float)
    if not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError("times must be positive and finite")
    return math.log(float(np.median(baseline)) / float(np.median(candidate)))


@dataclass(frozen=True)
class LaunchSpread:
    """The variance components of block values, pooled over ranges of cells measured in the same launches:
    `launch`, a launch's effect shared by the cells of a range (a launch favouring one algorithm at every
    size), and `cell`, what each cell's block value adds on its own (its runs' noise, a launch effect on that
    cell alone); each with its degrees of freedom (0: not estimable, the variance then counted in the other)."""

    launch: float
    launch_df: int
    cell: float = 0.0
    cell_df: int = 0


def _matrix(blocks: Blocks) -> np.ndarray:
    """Block values as cells x launches (a flat sequence: one cell)."""
    values = np.asarray(blocks, dtype=float)
    values = values.reshape(1, -1) if values.ndim == 1 else values
    if values.ndim != 2 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("block values: a finite cells x launches matrix (or one cell's launches)")
    return values


def launch_spread(ranges: Iterable[Blocks]) -> LaunchSpread | None:
    """Pool the variance components over ranges (each: cells x launches block values, one cell a flat
    sequence): the additive two-way model per range (cell effect + launch effect + residual), the residual
    mean square pooled for `cell`, the launch mean square's excess over it (method of moments, not below 0)
    for `launch`. None without two launches anywhere."""
    matrices = [m for m in map(_matrix, ranges) if m.shape[1] >= 2]
    residual_ss = sum(float(((m - m.mean(axis=1, keepdims=True) - m.mean(axis=0) + m.mean()) ** 2).sum())
                      for m in matrices)
    cell_df = sum((m.shape[0] - 1) * (m.shape[1] - 1) for m in matrices)
    launch_df = sum(m.shape[1] - 1 for m in matrices)
    if not launch_df:
        return None
    cell = residual_ss / cell_df if cell_df else 0.0
    # E[sum over launches of (range mean - grand mean)^2] = (launches - 1) (launch + cell / cells)
    excess = sum(float(((m.mean(axis=0) - m.mean()) ** 2).sum()) - (m.shape[1] - 1) * cell / m.shape[0]
                 for m in matrices)
    return LaunchSpread(max(0.0, excess / launch_df), launch_df, cell, cell_df)


def compare_launches(blocks: Blocks, *, spread: LaunchSpread | None = None, level: float = LEVEL) -> Comparison:
    """Candidate against baseline over a range of cells (cells x launches block values from
    `launch_log_ratio`; one cell: a flat sequence, one value per launch): is the candidate faster over the
    range, launch after launch? The estimate is the mean block value; its variance (over launches) the
    pooled model's, launch + cell / cells (Satterthwaite's degrees of freedom, at most PRIOR_DF), moderated
    by the range's own spread of launch means; Student's t with the degrees of freedom of both. `spread`: from `launch_spread`
    over the ranges measured in the same launches (this one included); without it, the range's own spread,
    or from 6 launches on (at 2.5 %) the signed-rank test on the launch means.
    `pairs` of the result counts launches; wins / losses are shares of launches whose mean favours a side."""
    if not 0.0 < level < 0.5:
        raise ValueError(f"level must be in (0, 0.5), got {level}")
    matrix = _matrix(blocks)
    cells, n = matrix.shape
    per_launch = matrix.mean(axis=0)
    mean = float(per_launch.mean())
    own = float(per_launch.var(ddof=1)) if n > 1 else 0.0
    variance, df = own, float(n - 1)
    if spread is not None:
        parts = [(spread.launch, spread.launch_df), (spread.cell / cells, spread.cell_df)]
        model = sum(v for v, _ in parts)
        if model > 0:
            # the range's own spread moderates the pooled one (Smyth's moderated t): it weighs as its n - 1
            # degrees of freedom against at most PRIOR_DF of the model's, so one range cannot hide behind the
            # others' calm, and two launches still decide
            model_df = min(PRIOR_DF, model ** 2 / sum(v ** 2 / d for v, d in parts if v > 0 and d > 0))
            variance = (model_df * model + (n - 1) * own) / (model_df + n - 1)
            df = model_df + n - 1
    wins = float(np.count_nonzero(per_launch > 0)) / n
    losses = float(np.count_nonzero(per_launch < 0)) / n
    if spread is None and 0.5 ** n < level:
        # each launch its own sample and enough of them: the exact signed-rank test on the launch means, as
        # `compare` on pairs, whatever the launches' spread looks like (module docstring)
        centre, low, high, p_faster, p_slower = _signed_rank(per_launch, level)
        return Comparison(n, math.exp(centre), math.exp(low), math.exp(high), p_faster, p_slower, wins, losses,
                          level, decide(n, p_faster, p_slower, wins, losses, level))
    if n < MIN_LAUNCHES or df < 1:
        return Comparison(n, math.exp(mean), math.exp(mean), math.exp(mean), 1.0, 1.0, wins, losses, level, "same")
    if variance == 0.0:  # the same ratio in every launch: the sign decides
        p_faster, p_slower, half = (0.0 if mean > 0 else 1.0), (0.0 if mean < 0 else 1.0), 0.0
    else:
        se = math.sqrt(variance / n)
        p_faster, p_slower = _t_cdf(df, -mean / se), _t_cdf(df, mean / se)
        half = _t_quantile(df, 1.0 - level) * se
    verdict = "same"
    if p_faster < level and wins >= CONSISTENCY:
        verdict = "faster"
    elif p_slower < level and losses >= CONSISTENCY:
        verdict = "slower"
    return Comparison(n, math.exp(mean), math.exp(mean - half), math.exp(mean + half), p_faster, p_slower,
                      wins, losses, level, verdict)
