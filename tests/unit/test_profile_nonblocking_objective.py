"""The objective a profile implies for its non-blocking collectives (issue 41): each cell's computation between
start and wait from the interposer's figures (profile/nonblocking.py), with and without a window; how tune maps
the rows onto its cells (tune/objective.py application_lengths), keeps them over the default's latency and over
stored points measured on other work, and the manifest recording where they came from. Pure parts; the real
interposer and tune in tests/integration/test_tune_from_profile_objective.py."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from store_history import nb_measurement

from tunempi.bench.engine import Layout
from tunempi.bench.sweep import BenchPoint
from tunempi.profile.nonblocking import (
    application_objective,
    chosen_objective,
    computation_rows,
    nonblocking_uses,
)
from tunempi.profile.reader import parse_profile
from tunempi.space import Cell, FeatureSpace
from tunempi.store.results import Measurement, ResultStore
from tunempi.tune.driver import records_from_store
from tunempi.tune.manifest import LibraryRecord, Manifest
from tunempi.tune.objective import (
    DEFAULT_LATENCY_SOURCE,
    ApplicationComputation,
    Figures,
    application_lengths,
    compute_lengths,
)

FP = "fp-nb-profile"


def row(collective: str = "iallreduce", *, calls: int = 100, start_us: float = 2.0, completion_us: float = 50.0,
        wait_us: float = 3.0, blocked_us: float | None = 8.0, completed: int | None = None, size: int = 1024,
        comm_size: int = 2) -> dict[str, Any]:
    """A non-blocking row of a profile file: per-call means given, stored as the interposer's sums."""
    done = calls if completed is None else completed
    data = {"collective": collective, "blocking": False, "comm_size": comm_size, "nodes": 1, "ppn": comm_size,
            "size_lo": size // 2 + 1, "size_hi": size, "ranks": comm_size, "calls": calls, "bytes": calls * size,
            "time_ns": int(calls * start_us * 1e3), "time_min_ns": 1, "time_max_ns": 2,
            "exact_sizes": {str(size): calls}, "completed": done, "completion_ns": int(done * completion_us * 1e3),
            "wait_ns": int(done * wait_us * 1e3)}
    if blocked_us is not None:
        data["blocked_ns"] = int(done * blocked_us * 1e3)
    return data


def profile_of(*rows: dict[str, Any]) -> Any:
    return parse_profile({
        "schema": "tunempi-profile", "schema_version": 2, "header": {"ranks": 2, "library": "MPICH Version: 5.0.2"},
        "ranks": [{"rank": r, "host": "h", "wall_ns": 10**9, "mpi_ns": 10**8, "collective_ns": 10**8, "p2p_ns": 0,
                   "collective_calls": 10, "send_calls": 0} for r in range(2)],
        "collectives": [*rows, {"collective": "allreduce", "blocking": True, "comm_size": 2, "nodes": 1, "ppn": 2,
                                "size_lo": 5, "size_hi": 8, "ranks": 2, "calls": 10, "bytes": 80, "time_ns": 10**6,
                                "time_min_ns": 1, "time_max_ns": 2, "exact_sizes": {"8": 10}}],
        "p2p_histogram": {"upper_bounds": [2048, 4096, 8192, 16384, 32768, 65536, None], "calls": [0] * 7,
                          "bytes": [0] * 7}})


def test_an_application_that_computes_between_start_and_wait_is_tuned_for_time_with_its_own_computation() -> None:
    """completion 50 us = start 2 + computation + the whole 8 us of the waits that named it (a Waitall of four
    requests gave it 3 us of them as its share): the computation is 40 us, not 45."""
    uses = nonblocking_uses(profile_of(row()))
    assert len(uses) == 1  # the blocking allreduce is not one
    use = uses[0]
    assert (use.start_us, use.wait_us, use.blocked_us, use.completion_us) == pytest.approx((2.0, 3.0, 8.0, 50.0))
    assert use.window_us == pytest.approx(40.0)
    assert use.overlaps and use.objective == "time" and use.compute_us == pytest.approx(40.0)
    implied = application_objective(uses)
    assert implied.objective == "time" and "computes between start and wait" in implied.reason
    assert "computes 40.0us" in use.text and use.to_dict()["compute_us"] == pytest.approx(40.0)


def test_an_application_that_waits_right_after_starting_is_tuned_for_latency() -> None:
    """completion = start + wait, give or take the interposer's own time between the two calls: no window."""
    use = nonblocking_uses(profile_of(row(completion_us=10.3, start_us=2.0, wait_us=8.0, blocked_us=8.0)))[0]
    assert use.window_us == pytest.approx(0.3)
    assert use.overlaps is False and use.objective == "latency" and use.compute_us == 0.0
    assert application_objective([use]).objective == "latency"
    # a window that is a sizeable share of a short collective is still no window under 1 us
    short = nonblocking_uses(profile_of(row(completion_us=3.0, start_us=0.5, wait_us=1.7, blocked_us=1.7)))[0]
    assert short.window_us == pytest.approx(0.8) and short.objective == "latency"
    # a window below 5 % of a long collective's completion is none either
    long = nonblocking_uses(profile_of(row(completion_us=1000.0, start_us=2.0, wait_us=950.0, blocked_us=950.0)))[0]
    assert long.window_us == pytest.approx(48.0) and long.objective == "latency"


def test_one_overlapping_cell_makes_the_objective_time_and_a_waiting_one_gets_no_computation() -> None:
    profile = profile_of(row("iallreduce"), row("ibcast", completion_us=10.0, start_us=2.0, wait_us=8.0,
                                                blocked_us=8.0))
    uses = nonblocking_uses(profile)
    assert application_objective(uses).objective == "time"
    rows = computation_rows(uses, "a.json")
    assert {r["collective"]: r["compute_us"] for r in rows} == {"iallreduce": pytest.approx(40.0), "ibcast": 0.0}
    assert rows[0]["source"].startswith("profile a.json: ")
    assert nonblocking_uses(profile, ["ibcast"])[0].collective == "ibcast"  # only the collectives tuned


def test_an_older_profile_without_the_whole_wait_time_falls_back_to_the_shared_one() -> None:
    use = nonblocking_uses(profile_of(row(blocked_us=None)))[0]
    assert use.blocked_us == use.wait_us == pytest.approx(3.0)
    assert use.window_us == pytest.approx(45.0)


def test_no_call_seen_completed_gives_no_window_and_tune_keeps_its_default() -> None:
    uses = nonblocking_uses(profile_of(row(completed=0)))
    assert uses[0].window_us is None and uses[0].objective is None and uses[0].compute_us is None
    implied = application_objective(uses)
    assert implied.objective is None and "not known" in implied.reason
    assert computation_rows(uses, "a.json") == []
    assert chosen_objective(implied, None, "a.json") == (None, "default")
    assert application_objective(nonblocking_uses(profile_of())).objective is None  # no non-blocking call


def test_an_objective_given_on_the_command_line_wins_over_the_profile_s() -> None:
    implied = application_objective(nonblocking_uses(profile_of(row())))
    assert chosen_objective(implied, None, "a.json") == ("time", "profile a.json")
    assert chosen_objective(implied, "latency", "a.json") == ("latency", "--objective")


def comp(collective: str, ranks: int, lo: int, hi: int, us: float) -> ApplicationComputation:
    return ApplicationComputation(collective, ranks, 1, ranks, lo, hi, us, f"{collective} {ranks} {hi}")


def test_each_tune_cell_takes_the_profile_row_nearest_in_size_then_in_communicator_size() -> None:
    rows = [comp("iallreduce", 4, 513, 1024, 40.0), comp("iallreduce", 4, 65537, 131072, 300.0),
            comp("iallreduce", 2, 513, 1024, 20.0), comp("ibcast", 4, 5, 8, 0.0)]
    cells = [Cell("iallreduce", 4, 1, 4, 1024), Cell("iallreduce", 2, 1, 2, 1024), Cell("iallreduce", 2, 1, 2, 4),
             Cell("iallreduce", 4, 1, 4, 1 << 20), Cell("iallreduce", 4, 1, 4, 4096), Cell("ibcast", 2, 1, 2, 64),
             Cell("ialltoall", 2, 1, 2, 64), Cell("allreduce", 2, 1, 2, 1024)]
    found = {cell: c.compute_us for cell, c in application_lengths(cells, rows).items()}
    assert found == {cells[0]: 40.0, cells[1]: 20.0, cells[2]: 20.0, cells[3]: 300.0, cells[4]: 40.0,
                     cells[5]: 0.0}  # ialltoall: not in the profile; allreduce: blocking


def test_the_application_s_computations_are_kept_over_the_default_s_latency_and_stored_points() -> None:
    mine, other = Cell("iallreduce", 2, 1, 2, 1024), Cell("ibcast", 2, 1, 2, 1024)
    asked: list[str] = []

    def measure(work: Mapping[Layout, Sequence[BenchPoint]]) -> list[Measurement]:
        asked.extend(p.collective for points in work.values() for p in points)
        return [_m(p.collective, msg_bytes=p.msg_bytes, median_us=7.0) for points in work.values() for p in points]

    with ResultStore(":memory:") as store:
        store.add(_m(objective="time", compute_us=3.5, algorithm="ring"))  # an earlier tune's computation
        sources: dict[Cell, str] = {}
        lengths = compute_lengths([mine, other], store, FP, measure, given={mine: 40.0}, sources=sources)
        assert lengths == {mine: 40.0, other: 7.0} and asked == ["ibcast"]
        assert sources == {other: DEFAULT_LATENCY_SOURCE}
        # that earlier time point was measured on 3.5 us of work, not 40: a tune on the profile's leaves it out
        space = {"iallreduce": FeatureSpace("iallreduce", (mine,), ("default", "ring"))}
        store.add(_m(objective="time", compute_us=40.0, algorithm="ring", run=1, median_us=60.0))
        records, next_run = records_from_store(store, FP, space, objective="time", compute_us={mine: 40.0})
        assert [r.latency_us for r in records["iallreduce"]] == [60.0]
        assert next_run[("iallreduce", "ring", 2, 1, 2, 1024)] == 2  # both runs' indices stay taken
        records, _ = records_from_store(store, FP, space, objective="time")
        assert len(records["iallreduce"]) == 2


def test_the_manifest_records_where_the_objective_and_each_computation_came_from(tmp_path: Path) -> None:
    record = LibraryRecord("mpich-5.0.2", "mpich", "5.0.2", "fp", "/x", "/x/bin/mpicc")
    a, b = Cell("iallreduce", 2, 1, 2, 1024), Cell("ibcast", 2, 1, 2, 64)
    Manifest(directory=tmp_path, library=record, objective="time", compute_us={a: 40.0, b: 7.0},
             compute_from={a: "profile a.json: iallreduce 2 ranks (1x2) 1 KiB"},
             objective_from="profile a.json").save()
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["objective_from"] == "profile a.json"
    assert data["compute_us"] == [{**a.to_dict(), "compute_us": 40.0, "from": "profile a.json: iallreduce 2 ranks "
                                   "(1x2) 1 KiB"}, {**b.to_dict(), "compute_us": 7.0}]
    figures = Manifest.load(tmp_path).figures()
    assert figures == Figures("time", {a: 40.0, b: 7.0}, {a: "profile a.json: iallreduce 2 ranks (1x2) 1 KiB"},
                              "profile a.json")
    from tunempi.report.tuning import summary_lines

    assert "iallreduce, ibcast: tuned for their time (profile a.json; time: start + the application's own " \
           "computation between start and wait (profile a.json) + MPI_Wait" in "\n".join(
               summary_lines(replace(Manifest.load(tmp_path), collectives=("iallreduce", "ibcast"))))
    del data["objective_from"]
    for entry in data["compute_us"]:
        entry.pop("from", None)
    older = Manifest.from_dict(tmp_path, data)
    assert older.objective_from == "" and older.compute_from == {} and older.figures().compute_us == {a: 40.0, b: 7.0}


def _m(collective: str = "iallreduce", algorithm: str = "default", msg_bytes: int = 1024, **kw: object) -> Measurement:
    return nb_measurement(FP, collective, algorithm, msg_bytes, **kw)


def test_online_best_records_the_objective_its_records_measured_so_verify_can_measure_it_too() -> None:
    """An online record runs from the start to the completing wait: start + the application's computation +
    wait. best's manifest says so: time with the profile's computations, latency where the profile says the
    application waits right away, and latency (saying why) without a profile; never time without computations,
    which verify refuses."""
    from tunempi.online.report import NO_PROFILE, best_figures
    from tunempi.online.state import OnlineConfig

    a, b, blocking = Cell("iallreduce", 2, 1, 2, 1024), Cell("ibcast", 2, 1, 2, 64), Cell("allreduce", 2, 1, 2, 8)
    rows = computation_rows(nonblocking_uses(profile_of(row())), "a.json")
    config = OnlineConfig(collectives=["iallreduce", "ibcast", "allreduce"], objective="time",
                          objective_from="profile a.json", computations=rows)
    found = best_figures(config, [a, b, blocking])
    assert found["objective"] == "time" and found["objective_from"] == "profile a.json"
    assert found["compute_us"] == {a: pytest.approx(40.0), b: 0.0}  # ibcast: no row in the profile
    Figures(found["objective"], found["compute_us"]).check_cells([a, b, blocking])  # verify takes it
    assert best_figures(OnlineConfig(objective="latency", objective_from="profile a.json"), [a]) == {
        "objective": "latency", "objective_from": "profile a.json"}
    assert best_figures(OnlineConfig(), [a]) == {"objective": "latency", "objective_from": NO_PROFILE}
    assert best_figures(OnlineConfig(), [blocking]) == {}


def test_without_a_profile_online_best_takes_the_computation_its_own_records_show() -> None:
    """Each non-blocking record holds the start call's time and the whole time of the waits and tests naming its
    request: the median window per cell sizes best's computations (time), or says the application waits at once
    (latency); records without those columns (older files) say nothing."""
    from tunempi.online.report import NO_PROFILE, RECORDS, best_figures, record_computations
    from tunempi.online.state import OnlineConfig, Record

    def rec(collective: str, seq: int, total_us: float, call_us: float, blocked_us: float | None) -> Record:
        return Record(0, seq, "s", collective, 1024, 2, 1, 2, "default", 1000, 1000 + int(total_us * 1e3),
                      int(call_us * 1e3), None if blocked_us is None else int(blocked_us * 1e3))

    config = OnlineConfig(collectives=["iallreduce", "ibcast"])
    computing = [rec("iallreduce", i, 50.0 + i, 2.0, 8.0) for i in range(5)]  # windows 40..44 us: median 42
    waiting = [rec("ibcast", i, 10.0, 2.0, 7.9) for i in range(5)]
    assert computing[0].window_ns == 40_000 and rec("ibcast", 0, 10.0, 2.0, None).window_ns is None
    rows = record_computations([*computing, *waiting, rec("allreduce", 9, 5.0, 5.0, 0.0)], config.sizes)
    assert {row["collective"]: row["compute_us"] for row in rows} == {"iallreduce": 42.0, "ibcast": 0.0}
    a, b = Cell("iallreduce", 2, 1, 2, 1024), Cell("ibcast", 2, 1, 2, 1024)
    found = best_figures(config, [a, b], [*computing, *waiting])
    assert (found["objective"], found["objective_from"]) == ("time", RECORDS)
    assert found["compute_us"] == {a: 42.0, b: 0.0} and found["compute_from"][a].startswith(f"{RECORDS}: iallreduce")
    assert best_figures(config, [b], waiting)["objective"] == "latency"
    assert best_figures(config, [a], [rec("iallreduce", 0, 50.0, 2.0, None)]) == {"objective": "latency",
                                                                                 "objective_from": NO_PROFILE}


def test_a_computation_longer_than_the_cap_is_measured_at_the_cap_and_says_so() -> None:
    from tunempi.online.report import best_figures
    from tunempi.online.state import OnlineConfig
    from tunempi.tune.objective import MAX_COMPUTE_US, capped_computation

    assert capped_computation(40.0, "profile a.json: x") == (40.0, "profile a.json: x")
    us, source = capped_computation(2e6, "profile a.json: x")
    assert us == MAX_COMPUTE_US and source.startswith("profile a.json: x (2000000us, measured as 5000us")
    a = Cell("iallreduce", 2, 1, 2, 1024)
    rows = computation_rows(nonblocking_uses(profile_of(row(completion_us=2e6 + 10.0))), "a.json")
    found = best_figures(OnlineConfig(objective="time", objective_from="profile a.json", computations=rows), [a])
    assert found["compute_us"] == {a: MAX_COMPUTE_US} and "measured as 5000us" in found["compute_from"][a]
