"""GDE3's selection rule and population reduction, for one and several objectives."""

from __future__ import annotations

from tunempi.search import TrialResult, make_search, run_search
from tunempi.search.gde3 import (
    Member,
    crowding_distance,
    gde3_select,
    non_dominated_fronts,
    reduce_population,
)
from tunempi.search.space import IntParam, ParamSpace


def m(objectives, violations=(0.0,), tag=0.0) -> Member:
    return Member((tag,), (("tag", tag),), tuple(objectives), tuple(violations))


def test_feasible_beats_infeasible_either_way():
    assert gde3_select(m((5.0,), (1.0,)), m((9.0,))) == "trial"
    assert gde3_select(m((5.0,)), m((1.0,), (1.0,))) == "target"


def test_both_infeasible_compares_constraint_violations_by_weak_dominance():
    assert gde3_select(m((1.0,), (1.0, 1.0)), m((9.0,), (1.0, 0.0))) == "trial"
    assert gde3_select(m((1.0,), (1.0, 0.0)), m((1.0,), (1.0, 0.0))) == "trial"  # weakly: ties replace
    assert gde3_select(m((1.0,), (0.0, 1.0)), m((1.0,), (1.0, 0.0))) == "target"


def test_single_objective_reduces_to_de_greedy_selection():
    assert gde3_select(m((2.0,)), m((1.0,))) == "trial"
    assert gde3_select(m((2.0,)), m((2.0,))) == "trial"
    assert gde3_select(m((1.0,)), m((2.0,))) == "target"


def test_two_objectives_keep_both_when_neither_dominates():
    assert gde3_select(m((1.0, 3.0)), m((2.0, 2.0))) == "both"
    assert gde3_select(m((1.0, 3.0)), m((1.0, 2.0))) == "trial"
    assert gde3_select(m((1.0, 2.0)), m((1.0, 3.0))) == "target"


def test_fronts_and_crowding():
    pts = [(1, 4), (2, 3), (3, 2), (4, 1), (3, 3), (5, 5)]
    fronts = non_dominated_fronts(pts)
    assert fronts[0] == [0, 1, 2, 3] and fronts[1] == [4] and fronts[2] == [5]
    d = crowding_distance(pts[:4])
    assert d[0] == d[3] == float("inf") and d[1] > 0 and d[2] > 0


def test_reduce_population_keeps_best_fronts_and_spreads_the_last():
    members = [m((x, 5 - x), tag=x) for x in (0.0, 1.0, 1.1, 2.0, 3.0, 5.0)] + [m((0.0, 0.0), (1.0,), tag=9)]
    kept = reduce_population(members, 4)
    tags = sorted(k.genotype[0] for k in kept)
    # All six feasible points are mutually non-dominated; the crowded 1.0/1.1 pair loses one member,
    # the extremes survive, and the infeasible member goes first of all.
    assert len(kept) == 4 and 0.0 in tags and 5.0 in tags and 9 not in tags
    assert not (1.0 in tags and 1.1 in tags)


def test_defaults_are_ptfs_and_failures_never_enter_the_final_population():
    space = ParamSpace((IntParam("A", 0, 100), IntParam("B", 0, 100)))
    s = make_search("gde3", space, seed=0)
    assert (s.population_size, s.cr, s.f) == (10, 0.5, 0.5)

    def objective(p):
        if p["A"] > 70:
            return TrialResult.failed("crash")
        return TrialResult.ok(1 + (p["A"] - 60) ** 2 + (p["B"] - 20) ** 2)

    run_search(s, objective, 120)
    assert s.generation_ >= 5
    assert all(member.feasible for member in s.population_)
    best = s.recommend()
    assert abs(best["A"] - 60) <= 5 and abs(best["B"] - 20) <= 5
