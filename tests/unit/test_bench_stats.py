"""Statistics of a benchmark point: the median's confidence interval by order statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tunempi.bench.stats import median_confidence_interval, order_statistic_cut, summarize


def coverage(n: int, j: int) -> float:
    """P(x_(j) <= median <= x_(n-j+1)) for continuous data, from the binomial distribution directly."""
    return sum(math.comb(n, i) for i in range(j, n - j + 1)) / 2**n


def test_textbook_interval_for_100_samples() -> None:
    # The classic table value: for n = 100 the 95 % interval is [x_(40), x_(61)].
    samples = np.arange(1.0, 101.0)
    rng = np.random.default_rng(0)
    rng.shuffle(samples)
    assert median_confidence_interval(samples) == (40.0, 61.0)


@pytest.mark.parametrize("n", [6, 7, 10, 11, 25, 50, 99, 100, 1000])
def test_cut_is_the_tightest_with_95_percent_coverage(n: int) -> None:
    j = order_statistic_cut(n)
    assert coverage(n, j) >= 0.95
    assert coverage(n, j + 1) < 0.95  # one more cut would lose the guarantee


@pytest.mark.parametrize("n", [1, 2, 5])
def test_too_few_samples_give_the_whole_range(n: int) -> None:
    samples = [3.0, 1.0, 2.0, 5.0, 4.0][:n]
    assert order_statistic_cut(n) == 1
    assert median_confidence_interval(samples) == (min(samples), max(samples))


def test_summary_on_known_data() -> None:
    samples = [10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    stats = summarize(samples)
    assert stats.iterations == 10
    assert stats.median_us == 5.5
    assert stats.min_us == 1.0
    assert stats.mean_us == 5.5
    assert stats.p90_us == pytest.approx(9.1)  # linear interpolation between x_(9) and x_(10)
    assert (stats.ci_low_us, stats.ci_high_us) == (2.0, 9.0)  # n = 10: j = 2
    assert stats.relative_ci == pytest.approx(3.5 / 5.5)


def test_interval_contains_the_median_and_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(1)
    few = summarize(rng.lognormal(0.0, 0.3, size=20))
    many = summarize(rng.lognormal(0.0, 0.3, size=2000))
    for stats in (few, many):
        assert stats.ci_low_us <= stats.median_us <= stats.ci_high_us
    assert many.ci_half_width_us < few.ci_half_width_us / 4


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError):
        summarize([])
