"""Noise-aware recommendation: only recommend what beats the defaults with 95% confidence."""

from __future__ import annotations

import numpy as np
import pytest

from tunempi.search import TrialResult
from tunempi.search.verify import (
    VerificationRun,
    compare_to_default,
    interleaved_schedule,
    verify_against_default,
)


def test_schedule_interleaves_abba():
    assert interleaved_schedule(4) == ["default", "best", "best", "default"] * 2
    assert interleaved_schedule(3).count("best") == 3


def test_a_clear_speedup_is_recommended():
    rng = np.random.default_rng(0)
    default = list(1.0 * (1 + 0.05 * rng.random(5)))
    best = list(0.8 * (1 + 0.05 * rng.random(5)))
    v = compare_to_default(best, default)
    assert v.recommend and 1.15 < v.speedup < 1.35 and v.speedup_low > 1.0 and v.p_value < 0.05


def test_noise_alone_is_rarely_recommended():
    # Same distribution for both: a 95% test should recommend in about 5% of cases, not more.
    rng = np.random.default_rng(1)
    recommended = sum(
        compare_to_default(list(1 + 0.3 * rng.random(5)), list(1 + 0.3 * rng.random(5))).recommend
        for _ in range(400)
    )
    assert recommended / 400 < 0.09


def test_small_gain_under_big_noise_keeps_the_defaults():
    rng = np.random.default_rng(2)
    v = compare_to_default(list(0.98 * (1 + 0.3 * rng.random(4))), list(1 + 0.3 * rng.random(4)))
    assert not v.recommend and v.reason.startswith("keep the defaults")


def test_a_failing_best_or_too_few_pairs_keeps_the_defaults():
    assert not compare_to_default([0.5, None, 0.5], [1.0, 1.0, 1.0]).recommend
    v = compare_to_default([0.5, 0.5, 0.5], [1.0, None, None])
    assert not v.recommend and "usable pairs" in v.reason
    with pytest.raises(ValueError):
        compare_to_default([1.0], [1.0, 2.0])


def test_verification_runs_interleaved_and_resumes():
    calls = []

    def objective(params):
        calls.append(dict(params))
        return TrialResult.ok(0.5 if params else 1.0)

    done = [VerificationRun("default", 0, TrialResult.ok(1.0))]
    recorded = []
    v = verify_against_default(objective, {"X": 1}, {}, 4, done=done, on_run=recorded.append)
    assert v.recommend and v.speedup == pytest.approx(2.0)
    assert len(calls) == 7 and calls[0] == {"X": 1}  # the recorded first default run is not repeated
    assert [(r.role, r.pair) for r in recorded][:3] == [("best", 0), ("best", 1), ("default", 1)]
