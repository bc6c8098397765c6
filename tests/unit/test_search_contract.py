"""Contract every search strategy must honour (run over all of them, like Optuna's sampler tests)."""

from __future__ import annotations

import math

import pytest

from tunempi.search import STRATEGY_NAMES, TrialResult, TrialStatus, make_search, run_search
from tunempi.search.base import Suggestion
from tunempi.search.space import CategoricalParam, Expr, FloatParam, IntParam, ParamSpace

SPACE = ParamSpace(
    (
        IntParam("EAGER", 1024, 65536, log=True, default=4096),
        IntParam("CELLS", 8, 64, step_size=8, default=16),
        CategoricalParam("PROGRESS", ("poll", "thread"), default="poll"),
        FloatParam("SPIN", 0.0, 1.0, step_size=0.25, when=Expr.parse("PROGRESS == 'thread'")),
    ),
    constraints=(Expr.parse("CELLS * 1024 <= EAGER * 16"),),
)


def smooth(params) -> TrialResult:
    t = (1 + (math.log2(params["EAGER"]) - 14) ** 2 / 10) * (1 + abs(params["CELLS"] - 40) / 40)
    if params["PROGRESS"] == "thread":
        t *= 0.9 + 0.1 * params["SPIN"]
    return TrialResult.ok(t, {"queue": params["CELLS"]})


def failing(params) -> TrialResult:
    """Fails (or times out) in a third of the space; otherwise smooth."""
    if params["CELLS"] >= 48:
        return TrialResult.failed("out of memory")
    if params["PROGRESS"] == "thread" and params.get("SPIN", 0) == 1.0:
        return TrialResult.failed("hung", TrialStatus.TIMEOUT)
    return smooth(params)


@pytest.fixture(params=STRATEGY_NAMES)
def name(request):
    return request.param


def test_seeded_runs_are_reproducible(name):
    runs = []
    for _ in range(2):
        s = make_search(name, SPACE, seed=7)
        run_search(s, smooth, 25)
        runs.append([dict(t.params) for t in s.trials])
    assert runs[0] == runs[1]
    if name not in ("exhaustive", "individual"):  # deterministic by definition: no use for the seed
        other = make_search(name, SPACE, seed=8)
        run_search(other, smooth, 25)
        assert [dict(t.params) for t in other.trials] != runs[0]


def test_every_suggestion_is_in_the_space_and_budget_is_respected(name):
    s = make_search(name, SPACE, seed=1)
    trials = run_search(s, smooth, 30)
    assert len(trials) == len(s.trials) <= 30
    assert len(trials) == 30 or name in ("exhaustive", "individual")  # those may run out of grid
    for t in trials:
        assert SPACE.contains(dict(t.params)), t.params
    assert SPACE.contains(s.recommend())


def test_failed_and_timed_out_trials_are_survived_and_avoided(name):
    s = make_search(name, SPACE, seed=2)
    trials = run_search(s, failing, 30)
    assert len(trials) >= 10
    assert any(not t.is_ok for t in trials) or name in ("individual",)
    best = s.recommend()
    assert best is not None and SPACE.contains(best)
    assert failing(best).is_ok  # never recommends a configuration that failed


def test_penalty_ranks_failures_below_every_success(name):
    s = make_search(name, SPACE, seed=3)
    run_search(s, failing, 15)
    worst_ok = max(t.value for t in s.trials if t.is_ok)
    assert s.score(TrialResult.failed("x")) > worst_ok


def test_replay_reproduces_the_state(name):
    first = make_search(name, SPACE, seed=4)
    run_search(first, failing, 12)
    resumed = make_search(name, SPACE, seed=4)
    resumed.replay(first.trials)
    run_search(first, failing, 20)
    run_search(resumed, failing, 20)
    assert [dict(t.params) for t in resumed.trials] == [dict(t.params) for t in first.trials]


def test_ask_tell_protocol_is_enforced(name):
    s = make_search(name, SPACE, seed=5)
    suggestion = s.ask()
    assert suggestion is not None and suggestion.number == 0
    with pytest.raises(RuntimeError):
        s.ask()
    with pytest.raises(RuntimeError):
        s.tell(Suggestion(99, dict(suggestion.params)), smooth(suggestion.params))
    trial = s.tell(suggestion, smooth(suggestion.params))
    with pytest.raises((AttributeError, TypeError)):
        trial.params["EAGER"] = 1  # frozen records
    with pytest.raises(AttributeError):
        trial.number = 3


def test_exhaustive_covers_the_grid_exactly_once():
    s = make_search("exhaustive", SPACE)
    run_search(s, smooth, 10_000)
    assert len(s.trials) == SPACE.grid_size()
    assert len({tuple(sorted(t.params.items())) for t in s.trials}) == len(s.trials)


def test_individual_finds_the_separable_optimum():
    # On a separable function one pass per parameter is enough to land on the grid optimum.
    space = ParamSpace((IntParam("A", 0, 10), IntParam("B", 0, 10)))
    s = make_search("individual", space)
    run_search(s, lambda p: TrialResult.ok(1 + (p["A"] - 7) ** 2 + (p["B"] - 2) ** 2), 100)
    assert s.recommend() == {"A": 7, "B": 2}
    assert len(s.trials) < 11 * 11  # far fewer runs than the grid


def test_penalty_is_worse_than_every_value_whatever_the_sign():
    s = make_search("random", SPACE, seed=0)
    values = iter([-5.0, -1.0, -3.0])
    run_search(s, lambda p: TrialResult.ok(next(values)), 3)
    assert s.penalty() > -1.0
    assert s.score(TrialResult.failed("x")) == s.penalty()
