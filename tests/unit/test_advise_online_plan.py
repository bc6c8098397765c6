"""advise's plan names online only where the online mode can switch what the profile spends its time in
(collectives.ONLINE_SWITCHABLE, issue 40): not for alltoallv, gatherv and scatterv, whose size differs between
the ranks of one call."""

from __future__ import annotations

from test_profile_advise import time_profile

from tunempi.collectives import ONLINE_SWITCHABLE, VECTOR_COLLECTIVES
from tunempi.profile.advise import application_plan
from tunempi.profile.reader import parse_profile


def steps(times_ns: dict[str, int]) -> dict:
    profile = parse_profile(time_profile(times_ns, 10_000_000))
    return {step.kind: step for step in application_plan(profile, "p.json", "mpich")}


def test_online_is_not_planned_for_an_alltoallv_bound_profile() -> None:
    plan = steps({"alltoallv": 9_000_000})
    assert plan["tune"].worth
    assert not plan["online"].worth and "online cannot switch alltoallv per call" in plan["online"].why
    assert "alltoallv" in plan["online"].why and "online-best" not in plan["compare"].commands[0]


def test_online_names_what_it_switches_and_what_it_leaves() -> None:
    plan = steps({"alltoallv": 6_000_000, "allgatherv": 3_000_000})
    assert plan["online"].worth
    assert "it switches allgatherv, not alltoallv" in plan["online"].why
    assert "online-best" in plan["compare"].commands[0]


def test_online_is_not_planned_where_what_it_switches_takes_little_time() -> None:
    """LAMMPS' PPPM with collective remaps (docs/measurements/applications.md): 42 % of the run in alltoallv,
    1 % in allreduce: online could switch only the 1 %."""
    plan = steps({"alltoallv": 8_000_000, "allreduce": 100_000})
    assert plan["tune"].worth and not plan["online"].worth
    assert "those online switches (allreduce) only 0.2%" in plan["online"].why


def test_the_vocabulary_leaves_out_the_collectives_whose_ranks_see_different_sizes() -> None:
    assert VECTOR_COLLECTIVES - set(ONLINE_SWITCHABLE) == {"alltoallv", "alltoallw", "gatherv", "scatterv"}
