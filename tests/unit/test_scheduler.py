from __future__ import annotations

import pytest

from tunempi.errors import UsageError
from tunempi.launch.scheduler import BenchJob, GroupScheduler, plan_waves
from tunempi.launch.topology import group_nodes

# Two racks of four nodes and one of two, named the way many sites do (r<rack>n<node>).
HOSTS = [f"r1n{i}" for i in range(1, 5)] + [f"r2n{i}" for i in range(1, 5)] + ["r3n1", "r3n2"]
GROUPS = group_nodes(HOSTS, pattern=r"^(r\d+)")


def _plan(jobs: list[BenchJob], mode: str = "topology") -> list[list[tuple[object, tuple[str, ...]]]]:
    return [[(p.job.key, p.hosts) for p in wave] for wave in plan_waves(jobs, GroupScheduler(GROUPS, mode))]


def test_topology_plan_never_shares_a_group_and_prefers_the_smallest_fitting_group() -> None:
    jobs = [BenchJob("a", 2), BenchJob("b", 2), BenchJob("c", 1), BenchJob("d", 4)]
    assert _plan(jobs) == [
        [("d", ("r1n1", "r1n2", "r1n3", "r1n4")), ("a", ("r3n1", "r3n2")), ("b", ("r2n1", "r2n2"))],
        [("c", ("r3n1",))],
    ]


def test_job_bigger_than_any_group_spans_the_fewest_groups() -> None:
    assert _plan([BenchJob("big", 6), BenchJob("small", 2)]) == [
        [("big", ("r1n1", "r1n2", "r1n3", "r1n4", "r2n1", "r2n2")), ("small", ("r3n1", "r3n2"))],
    ]
    assert _plan([BenchJob("all", 10), BenchJob("one", 1)]) == [
        [("all", tuple(HOSTS))],
        [("one", ("r3n1",))],
    ]


def test_serial_runs_one_job_per_wave_and_local_runs_all_at_once() -> None:
    jobs = [BenchJob("x", 1), BenchJob("y", 2)]
    assert _plan(jobs, "serial") == [[("y", ("r1n1", "r1n2"))], [("x", ("r1n1",))]]
    assert _plan(jobs, "local") == [[("y", ("r1n1", "r1n2")), ("x", ("r1n1",))]]


def test_release_frees_the_groups_for_the_next_job() -> None:
    scheduler = GroupScheduler(GROUPS)
    first = scheduler.place(BenchJob(1, 4))
    second = scheduler.place(BenchJob(2, 4))
    assert first is not None and second is not None
    assert scheduler.place(BenchJob(3, 3)) is None  # only r3 (2 nodes) is free
    scheduler.release(first)
    third = scheduler.place(BenchJob(3, 3))
    assert third is not None and third.hosts == ("r1n1", "r1n2", "r1n3")
    assert scheduler.running == 2


def test_bad_requests_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="needs 11 node"):
        plan_waves([BenchJob("huge", 11)], GroupScheduler(GROUPS))
    with pytest.raises(UsageError, match="valid: serial, local, topology"):
        GroupScheduler(GROUPS, "parallel")
