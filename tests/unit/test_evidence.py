"""The shared paired-evidence rule: its interval, its decision, and its error rates on simulated A/A data."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats

from tunempi.evidence import (
    CONSISTENCY,
    LEVEL,
    MIN_PAIRS,
    LaunchSpread,
    alternating,
    compare,
    compare_launches,
    decide,
    launch_log_ratio,
    launch_spread,
    pair_order,
)
from tunempi.sim.paired import NOISE, launch_blocks, same_runs, separate_runs


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


# -- across launches: one launch is one sample -------------------------------------------------------------


def launch_verdicts(candidate: np.ndarray, baseline: np.ndarray, ranges: Sequence[int] = ()) -> list[str]:
    """Per trial, the cells' block values grouped into ranges of the given sizes (the rest one cell each) and
    pooled as tune pools them (the ranges measured in the same launches); every range's verdict."""
    found = []
    for trial in range(candidate.shape[0]):
        blocks = np.array([[launch_log_ratio(c, b) for c, b in zip(cand, base, strict=True)]
                           for cand, base in zip(candidate[trial], baseline[trial], strict=True)])
        bounds = np.cumsum([0, *ranges, *([1] * (len(blocks) - sum(ranges)))])
        matrices = [blocks[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        spread = launch_spread(matrices)
        found += [compare_launches(matrix, spread=spread).verdict for matrix in matrices]
    return found


@pytest.mark.parametrize(("launches", "runs", "launch_sigma", "shared_sigma", "cell_spread", "stall"), [
    (2, 1, 0.05, 0.0, 0.0, 0.0), (2, 3, 0.10, 0.0, 0.0, 0.0), (3, 2, 0.05, 0.0, 0.0, 0.03),
    (2, 1, 0.05, 0.0, 0.5, 0.0), (4, 1, 0.02, 0.0, 0.3, 0.02), (2, 1, 0.05, 0.10, 0.0, 0.0),
    (3, 1, 0.05, 0.10, 0.3, 0.0)])
@pytest.mark.parametrize("ranges", [(), (2, 3, 5, 10)])
def test_a_a_across_launches_stays_within_the_level_with_launch_effects(
        launches: int, runs: int, launch_sigma: float, shared_sigma: float, cell_spread: float, stall: float,
        ranges: tuple[int, ...]) -> None:
    """Each launch favours one algorithm or the other for its whole life (its own offset per algorithm and
    cell, and one shared by the cells of a range); with cells of different noise (cell_spread), stalls, and
    cells judged one by one or in ranges, the rate of "faster" (and of "slower") on A/A data stays at the
    level. (An effect shared by every range alike is not: docs/evidence.md.)"""
    trials, cells = 200, 25
    found = launch_verdicts(*launch_blocks(np.random.default_rng(launches * 10 + runs), trials, cells, launches, runs,
                                           launch_sigma=launch_sigma, shared_sigma=shared_sigma, ranges=ranges,
                                           cell_spread=cell_spread, stall=stall), ranges)
    assert found.count("faster") / len(found) <= allowed(len(found))
    assert found.count("slower") / len(found) <= allowed(len(found))


def test_pairs_within_launches_are_not_independent_the_per_run_rule_would_say_faster_too_often() -> None:
    """Why the launch is the unit: the same A/A data judged as if every run were an independent pair."""
    candidate, baseline = launch_blocks(np.random.default_rng(3), 200, 25, 2, 3, launch_sigma=0.10)
    pooled_runs = [compare(list(c.ravel()), list(b.ravel())).verdict
                   for trial_c, trial_b in zip(candidate, baseline, strict=True)
                   for c, b in zip(trial_c, trial_b, strict=True)]
    assert pooled_runs.count("faster") / len(pooled_runs) > 3 * LEVEL
    assert launch_verdicts(candidate, baseline).count("faster") / len(pooled_runs) <= allowed(len(pooled_runs))


def test_a_real_gain_is_decided_across_launches() -> None:
    rng = np.random.default_rng(28)
    found = launch_verdicts(*launch_blocks(rng, 100, 25, 2, 1, speedup=1.3))
    assert found.count("faster") / len(found) >= 0.8  # 0.87 (docs/evidence.md)
    assert found.count("slower") == 0
    found = launch_verdicts(*launch_blocks(rng, 100, 25, 3, 1, speedup=1.15))
    assert found.count("faster") / len(found) >= 0.5  # 0.57: a smaller gain needs more launches
    # or a range of neighbouring cells: 5 cells of a 15 % gain, two launches
    found = launch_verdicts(*launch_blocks(rng, 100, 25, 2, 1, speedup=1.15), ranges=(5, 5, 5, 5, 5))
    assert found.count("faster") / len(found) >= 0.8


def test_a_rule_on_its_own_launches_is_not_hidden_by_one_wild_launch_in_favour() -> None:
    """Issue 39: verify judges a rule on its own launches; six launches all 1.2x faster but one in which the
    default ran 6x slower (the machine's slow state hit its launch) gave an interval of 0.88x-2.66x under
    Student's t. From six launches the signed-rank test decides: faster; one launch against it is not."""
    wild = [0.20, 0.25, 0.18, 0.22, 0.21, 1.5]
    found = compare_launches(wild)
    assert found.verdict == "faster" and found.low > 1.15
    assert compare_launches(wild[:5]).verdict == "faster"  # five launches: Student's t, no wild one there
    assert compare_launches([0.20, 0.25, 0.18, 0.22, -0.21, 1.5]).verdict == "same"


@pytest.mark.parametrize("launches", [6, 8])
def test_a_a_on_own_launches_with_wild_ones_stays_within_the_level(launches: int) -> None:
    """The signed-rank test on launch means: A/A with launch effects, stalls and one launch in ten wild."""
    trials = 2000
    rng = np.random.default_rng(launches)
    means = rng.normal(0.0, 0.05, (trials, launches))
    means += np.where(rng.random((trials, launches)) < 0.1, rng.choice([-1.0, 1.0], (trials, launches)) * 1.5, 0)
    found = [compare_launches(row).verdict for row in means]
    assert found.count("faster") / trials <= allowed(trials)
    assert found.count("slower") / trials <= allowed(trials)


def test_across_launches_needs_two_launches_and_the_sign_in_most_of_them() -> None:
    assert compare_launches([0.5]).verdict == "same"
    assert compare_launches([0.5], spread=LaunchSpread(1e-4, 50)).verdict == "same"
    assert compare_launches([0.2, 0.21], spread=LaunchSpread(1e-3, 40)).verdict == "faster"
    assert compare_launches([-0.2, -0.21], spread=LaunchSpread(1e-3, 40)).verdict == "slower"
    # a cell whose own launches disagree this much is not decided by a small pooled spread
    assert compare_launches([0.6, -0.1], spread=LaunchSpread(1e-3, 40)).verdict == "same"
    three = compare_launches([0.3, 0.25, -0.01], spread=LaunchSpread(1e-3, 40))
    assert three.wins == pytest.approx(2 / 3) and three.verdict == "same"  # consistency: 3 of 4 launches
    assert launch_log_ratio([1.0, 9.0, 1.1], [2.0]) == pytest.approx(np.log(2.0 / 1.1))  # medians
    assert launch_spread([[0.1], [0.2, 0.4], [0.0, 0.2, 0.4]]) == LaunchSpread(pytest.approx((0.02 + 0.08) / 3), 3)
    assert launch_spread([[0.1]]) is None
    # a range: cell effects and a launch effect shared by its cells, residual 0
    spread = launch_spread([[[0.1, 0.3], [0.2, 0.4], [0.0, 0.2]]])
    assert spread == LaunchSpread(pytest.approx(0.02), 1, pytest.approx(0.0), 2)
