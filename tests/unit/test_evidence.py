"""The shared paired-evidence rule: its interval, its decision, and its error rates on simulated A/A data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tunempi.evidence import CONSISTENCY, LEVEL, MIN_PAIRS, alternating, compare, decide, pair_order
from tunempi.sim.paired import NOISE, same_runs, separate_runs


def test_alternating_order_is_abba_and_continues_from_start() -> None:
    assert [side for _, side in alternating("a", "b", 4)] == ["a", "b", "b", "a"] * 2
    assert alternating("a", "b", 2, start=3) == [(3, "b"), (3, "a"), (4, "a"), (4, "b")]
    assert pair_order("x", "y", 5) == ("y", "x")


def test_small_samples_use_a_t_interval_on_log_ratios() -> None:
    found = compare([10.0, 10.0, 10.0], [12.0, 12.0, 12.0])
    assert (found.speedup, found.low, found.high) == pytest.approx((1.2, 1.2, 1.2))
    assert found.verdict == "faster"  # a deterministic cost: the same ratio every time
    found = compare([10.0, 11.0, 9.0], [10.5, 10.0, 10.0])
    logs = np.log([10.5 / 10, 10 / 11, 10 / 9])
    assert math.log(found.speedup) == pytest.approx(logs.mean())
    t = stats.ttest_1samp(logs, 0.0, alternative="greater")
    assert found.p_faster == pytest.approx(t.pvalue)
    assert found.low < 1.0 < found.high and found.verdict == "same"
    assert found.confidence == pytest.approx(0.95)
    with pytest.raises(ValueError):
        compare([1.0], [])
    with pytest.raises(ValueError):
        compare([1.0, -1.0], [1.0, 1.0])


def test_from_six_pairs_the_exact_signed_rank_test_decides_and_its_interval_agrees() -> None:
    rng = np.random.default_rng(4)
    for n in (6, 9, 15):
        for _ in range(30):
            candidate = rng.lognormal(0.0, 0.1, n)
            baseline = rng.lognormal(rng.choice([0.0, 0.1]), 0.1, n)
            found = compare(list(candidate), list(baseline))
            logs = np.log(baseline / candidate)
            assert found.p_faster == pytest.approx(stats.wilcoxon(logs, alternative="greater").pvalue)
            # the interval excludes 1 exactly when the test is significant at the level
            assert (found.low > 1.0) == (found.p_faster < LEVEL)
            assert (found.high < 1.0) == (found.p_slower < LEVEL)


def test_one_outlier_pair_does_not_hide_a_consistent_gain() -> None:
    # 10 % faster in 11 pairs; in one pair the candidate's run stalled (5x). A plain t-test loses it.
    candidate = [0.9 * (1 + 0.01 * (i % 3)) for i in range(12)]
    candidate[4] *= 5
    found = compare(candidate, [1.0] * 12)
    assert found.verdict == "faster" and 1.05 < found.speedup < 1.15
    assert stats.ttest_1samp(np.log(1 / np.array(candidate)), 0.0, alternative="greater").pvalue > LEVEL


def test_decision_needs_enough_pairs_significance_and_consistency() -> None:
    assert decide(MIN_PAIRS - 1, 0.0, 1.0, 1.0, 0.0) == "same"
    assert decide(MIN_PAIRS, 0.001, 0.999, 1.0, 0.0) == "faster"
    assert decide(10, 0.001, 0.999, CONSISTENCY - 0.1, 0.35) == "same"  # significant, not consistent
    assert decide(10, 0.999, 0.001, 0.1, 0.9) == "slower"
    assert decide(10, 0.04, 0.96, 1.0, 0.0) == "same"
    assert decide(10, 0.04, 0.96, 1.0, 0.0, level=0.05) == "faster"
    # 7 big wins and 3 small losses: significant, but no reason to switch
    found = compare([0.8] * 7 + [1.05] * 3, [1.0] * 10)
    assert found.p_faster < LEVEL and found.wins == pytest.approx(0.7) and found.verdict == "same"


def verdicts(candidate: np.ndarray, baseline: np.ndarray) -> list[str]:
    return [compare(list(c), list(b)).verdict for c, b in zip(candidate, baseline, strict=True)]


def allowed(trials: int) -> float:
    """The false-positive rate allowed: the level plus a one-sided 99.9 % binomial margin."""
    return float(stats.binom.ppf(0.999, trials, LEVEL)) / trials


@pytest.mark.parametrize("noise", ["typical", "harsh"])
@pytest.mark.parametrize("pairs", [3, 5, 6, 10, 20])
def test_a_a_false_positive_rate_is_within_the_level(noise: str, pairs: int) -> None:
    trials = 2000
    found = verdicts(*separate_runs(np.random.default_rng(pairs), trials, pairs, **NOISE[noise]))
    assert found.count("faster") / trials <= allowed(trials)
    assert found.count("slower") / trials <= allowed(trials)


@pytest.mark.parametrize("pairs", [5, 10, 20])
def test_a_a_false_positive_rate_within_the_level_when_both_share_each_run(pairs: int) -> None:
    trials = 1000
    found = verdicts(*same_runs(np.random.default_rng(pairs), trials, pairs))
    assert found.count("faster") / trials <= allowed(trials)
    assert found.count("slower") / trials <= allowed(trials)


def test_a_real_ten_percent_gain_is_detected() -> None:
    rng = np.random.default_rng(10)
    found = verdicts(*separate_runs(rng, 500, 16, speedup=1.1, **NOISE["typical"]))
    assert found.count("faster") / 500 >= 0.85
    assert found.count("slower") == 0
    found = verdicts(*separate_runs(rng, 500, 8, speedup=1.1, **NOISE["quiet"]))
    assert found.count("faster") / 500 >= 0.8  # quiet machine: 8 pairs are enough
