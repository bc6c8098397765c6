"""rl: AITuning's design with the credit assignment fixed, failures handled, ensemble answer."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tunempi.search import TrialResult, run_search
from tunempi.search.base import Trial
from tunempi.search.rl import KEEP, RLSearch, median_config, near_best_configs
from tunempi.search.space import CategoricalParam, IntParam, ParamSpace, config_key

SPACE = ParamSpace((IntParam("A", 0, 4, default=0), IntParam("B", 0, 4, default=2)))


def only_a_matters(params) -> TrialResult:
    # Deterministic: raising A saves one second per step; B does nothing.
    return TrialResult.ok(10.0 - params["A"], {"queue": 5.0 - params["A"]})


def test_each_reward_is_credited_to_the_action_that_caused_it():
    """With AITuning's off-by-one credit, B's steps and 'keep' would inherit A's rewards."""
    # Random actions, so every kind gets taken; no replicate cap, so no episode restarts.
    rl = RLSearch(SPACE, seed=0, epsilon=1.0, min_epsilon=1.0, max_replicates=1000)
    run_search(rl, only_a_matters, 60)
    assert len(rl.transitions_) == 59  # every run after the reference is one transition
    seen = set()
    for t in rl.transitions_:
        action = rl.actions_[t.action]
        before, after = dict(t.from_config), dict(t.to_config)
        a_before, a_after = before["A"][1], after["A"][1]
        expected = ((10.0 - a_before) - (10.0 - a_after)) / 10.0  # relative to the reference (A=0: 10 s)
        assert t.reward == pytest.approx(expected)
        if action.param == "A":
            assert a_after - a_before == action.direction and t.reward > 0 if action.direction > 0 else t.reward < 0
        else:  # B steps and keep change nothing that matters: zero reward, always
            assert t.reward == pytest.approx(0.0)
        seen.add(str(action))
    assert {"A+", "A-", "B+", "B-", "keep"} <= seen


def test_state_is_relative_to_the_reference_and_holds_positions():
    rl = RLSearch(SPACE, seed=0, epsilon=1.0, min_epsilon=1.0)
    run_search(rl, only_a_matters, 10)
    assert rl.reference_value_ == 10.0
    assert rl.reference_metrics_ == {"queue": 5.0}
    first = rl.transitions_[0]
    # positions of A and B, log(time / reference), log-ratio of the queue metric
    assert first.state == pytest.approx((0.0, 0.5, 0.0, 0.0))


def test_learned_q_prefers_the_improving_action():
    rl = RLSearch(SPACE, seed=1, epsilon=1.0, min_epsilon=1.0)
    run_search(rl, only_a_matters, 80)
    index = {str(a): i for i, a in enumerate(rl.actions_)}
    state = rl.transitions_[-1].next_state
    q = rl.q_values(state)
    assert q[index["A+"]] > q[index["A-"]]
    assert q[index["A+"]] > q[index["keep"]]


def test_greedy_agent_climbs_to_the_optimum():
    rl = RLSearch(SPACE, seed=2)
    run_search(rl, only_a_matters, 40)
    assert rl.recommend()["A"] == 4


def test_failed_run_is_penalised_and_the_agent_stays_put():
    def cliff(params):
        if params["A"] >= 3:
            return TrialResult.failed("crash")
        return only_a_matters(params)

    rl = RLSearch(SPACE, seed=0, epsilon=1.0, min_epsilon=1.0)
    run_search(rl, cliff, 60)
    failures = [t for t in rl.transitions_ if dict(t.to_config)["A"][1] >= 3]
    assert failures
    for t in failures:
        assert t.reward < -0.5  # penalty: 2x the worst time, relative to the reference
        assert t.next_state == t.state
    # After a failure the next action starts from where the agent was, not from the failed config.
    for prev, nxt in zip(rl.transitions_, rl.transitions_[1:], strict=False):
        if dict(prev.to_config)["A"][1] >= 3:
            assert nxt.from_config == prev.from_config or dict(nxt.from_config)["A"][1] < 3
    assert rl.recommend()["A"] == 2


def test_no_configuration_is_measured_more_than_max_replicates():
    rl = RLSearch(SPACE, seed=0, max_replicates=2, epsilon=1.0, min_epsilon=1.0)
    run_search(rl, lambda p: TrialResult.ok(1.0), 45)  # flat: nothing to learn, keep is as good as any
    counts = Counter(config_key(t.params) for t in rl.trials)
    assert len(rl.trials) == 45 and max(counts.values()) == 2
    assert any(rl.actions_[t.action] == KEEP for t in rl.transitions_)


def test_answer_is_the_median_of_the_near_best_ensemble():
    space = ParamSpace((IntParam("X", 0, 100, step_size=10, default=0),
                        CategoricalParam("M", ("a", "b", "c"), default="a")))
    # Near-best (within 5% of 1.0): X in {40, 50, 70} with M a/b/b; the two replicates of X=90 average
    # 1.1, so one lucky 1.0 there does not make it a member.
    records = [(0, "a", 2.0), (40, "a", 1.03), (50, "b", 1.0), (70, "b", 1.04), (90, "c", 1.0), (90, "c", 1.2)]
    trials = [Trial(i, {"X": x, "M": m}, TrialResult.ok(v)) for i, (x, m, v) in enumerate(records)]
    members = near_best_configs(trials, 0.05)
    assert {config_key(c) for c in members} == {
        config_key({"X": x, "M": m}) for x, m in ((40, "a"), (50, "b"), (70, "b"))}
    assert median_config(space, members, {"X": 0, "M": "a"}) == {"X": 50, "M": "b"}


def test_ensemble_is_robust_to_one_lucky_measurement():
    space = ParamSpace((IntParam("X", 0, 400, default=50),))
    rng = np.random.default_rng(0)
    rl = RLSearch(space, seed=3)
    run_search(rl, lambda p: TrialResult.ok((1 + ((p["X"] - 200) / 100) ** 2) * (1 + 0.3 * rng.random())), 80)
    x = rl.recommend()["X"]
    assert abs(x - 200) <= 45  # the 5%-of-optimum band is +-22; the grid ladder step is ~27
