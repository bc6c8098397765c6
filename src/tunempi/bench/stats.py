"""Statistics of one benchmark point from its per-iteration times.

Each sample is one iteration's time: the MAXIMUM over ranks of that iteration (the collective is done
when the slowest rank is). The median is the headline figure (robust against the scheduler hiccups
of a shared machine); its 95 % confidence interval comes from order statistics, which needs no
assumption about the distribution of times:

    [x_(j), x_(n-j+1)] (1-based, sorted) covers the median with probability
    1 - 2 P(Binomial(n, 1/2) <= j - 1),

and j is the largest cut that keeps that probability >= 95 %. Below 6 samples no cut reaches 95 % and
the whole range is returned. The C engine uses the same definition for its stopping rule
(bench/c/stats.c); an integration test checks that the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Statistics:
    """Summary of one point's per-iteration times, in microseconds."""

    iterations: int
    median_us: float
    min_us: float
    p90_us: float
    mean_us: float
    ci_low_us: float
    ci_high_us: float

    @property
    def ci_half_width_us(self) -> float:
        return (self.ci_high_us - self.ci_low_us) / 2

    @property
    def relative_ci(self) -> float:
        """Half-width of the median's confidence interval relative to the median (0.05 = +-5 %)."""
        return self.ci_half_width_us / self.median_us if self.median_us > 0 else math.inf


def order_statistic_cut(n: int, confidence: float = CONFIDENCE) -> int:
    """How many order statistics j to cut from each end: the largest j (>= 1) with
    P(Binomial(n, 1/2) <= j - 1) <= (1 - confidence) / 2."""
    if n < 1:
        raise ValueError("need at least one sample")
    tail = (1.0 - confidence) / 2
    from scipy.special import bdtr  # imported here: SciPy costs every command's start, most never summarize

    cdf = bdtr(np.arange(n // 2 + 1), n, 0.5)  # Binomial(n, 1/2) CDF
    return max(1, int(np.count_nonzero(cdf <= tail)))


def median_confidence_interval(samples: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free confidence interval of the median (order-statistics/binomial method)."""
    ordered = np.sort(np.asarray(samples, dtype=float))
    j = order_statistic_cut(len(ordered), confidence)
    return float(ordered[j - 1]), float(ordered[len(ordered) - j])


def summarize(samples_us: Sequence[float]) -> Statistics:
    """Median, min, p90 (linear interpolation), mean and the median's 95 % CI of per-iteration times."""
    values = np.asarray(samples_us, dtype=float)
    if values.size == 0:
        raise ValueError("no samples to summarize")
    low, high = median_confidence_interval(values)
    return Statistics(
        iterations=int(values.size),
        median_us=float(np.median(values)),
        min_us=float(values.min()),
        p90_us=float(np.percentile(values, 90)),
        mean_us=float(values.mean()),
        ci_low_us=low,
        ci_high_us=high,
    )
