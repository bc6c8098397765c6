"""Built-in landscapes and the offline evaluation harness."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tunempi.errors import UsageError
from tunempi.search.evaluate import RunOutcome, evaluate_run, summarize
from tunempi.search.landscapes import CLIFF, INTERACT, LANDSCAPES, PARABOLA, get_landscape


def test_optima_are_the_grid_minima():
    assert PARABOLA.optimum == (1.0, {"CVAR": 200})
    for ls in LANDSCAPES.values():
        best, config = ls.optimum
        rng = np.random.default_rng(0)
        for _ in range(300):
            t = ls.true_time(ls.space.sample(rng))
            assert t is None or t >= best
        assert ls.slowdown(config) == 1.0


def test_parabola_noise_is_thirty_percent_one_sided():
    run = PARABOLA.objective(seed=0)
    values = [run({"CVAR": 200}).value for _ in range(2000)]
    assert min(values) >= 1.0 and max(values) <= 1.3
    assert np.mean(values) == pytest.approx(1.15, abs=0.01)


def test_interactions_move_the_best_value_of_one_parameter_with_another():
    def best_eager(progress):
        grid = INTERACT.space["EAGER_KB"].grid()
        base = {"SPIN": 500, "CELLS": 128, "PROGRESS": progress}
        return min(grid, key=lambda e: INTERACT.true_time({**base, "EAGER_KB": e}))

    assert best_eager("interrupt") < best_eager("poll") < best_eager("thread")


def test_cliff_fails_past_the_budget_and_has_its_optimum_at_the_edge():
    run = CLIFF.objective(seed=0)
    best = CLIFF.optimum[1]
    assert run(best).is_ok
    over = {**best, "CELLS": best["CELLS"] + 32}
    assert not run(over).is_ok and math.isinf(CLIFF.slowdown(over))
    slow = {**best, "SPIN": 800}
    assert CLIFF.true_time(slow) > 2.5 * CLIFF.optimum[0]
    assert "THREAD_CORE" not in CLIFF.space.normalize({**best, "PROGRESS": "poll"})


def test_evaluate_run_counts_trials_to_target():
    outcome = evaluate_run(PARABOLA, "random", budget=40, seed=0)
    assert outcome.trials == 40 and outcome.failed == 0
    assert outcome.trials_to_target is not None and 1 <= outcome.trials_to_target <= 40
    assert outcome.final_slowdown <= 1.05
    # exhaustive walks 0, 1, 2, ... and cannot reach CVAR ~ 200 in 40 runs
    assert evaluate_run(PARABOLA, "exhaustive", budget=40, seed=0).trials_to_target is None


def test_summary_counts_unreached_seeds_as_beyond_budget():
    def o(seed, reached):
        return RunOutcome("p", "s", seed, 50, 50, 0, reached, 1.0 if reached else 1.5)

    (s,) = summarize([o(0, 10), o(1, None), o(2, None)])
    assert s.reached == 1 and s.median_trials is None and s.median_trials_reached == 10
    (s,) = summarize([o(0, 10), o(1, 20), o(2, None)])
    assert s.median_trials == 20


def test_unknown_landscape_names_the_valid_ones():
    with pytest.raises(UsageError, match="parabola, interact, cliff"):
        get_landscape("bowl")
