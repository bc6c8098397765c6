"""Requests to the benchmark engine: validation before MPI, the line protocol, sweep planning, summaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.bench.engine import Layout, PointOutcome, condense
from tunempi.bench.protocol import (
    SET_DEFAULT,
    SET_KEEP,
    EngineReady,
    MeasureSettings,
    PointReply,
    PointRequest,
    decode_line,
)
from tunempi.bench.stats import summarize
from tunempi.bench.summary import fastest_table
from tunempi.bench.sweep import BenchPoint, Sweep, plan_points, selection_for, to_measurement
from tunempi.bench.validate import check_engine_collective, parse_algorithms, size_problem
from tunempi.errors import MPIError, UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import Algorithm, CvarSwitch, VendorAdapter
from tunempi.store.results import Measurement, ResultStore


class FakeAdapter(VendorAdapter):
    """The adapter interface with a fixed catalog: what the bench package may rely on, without MPI."""

    vendor = "fake"

    def default_name(self) -> str:
        return "auto"

    def check_algorithm(self, collective: str, name: str) -> Algorithm:
        if name in ("default", "auto"):
            return Algorithm("auto", 0)
        for algorithm in self.algorithms(collective):
            if algorithm.name == name:
                return algorithm
        valid = ", ".join(a.name for a in self.algorithms(collective))
        raise UsageError(f"unknown {collective} algorithm {name!r}; valid: default, auto, {valid}")

    def force_env(self, collective: str, name: str) -> dict[str, str]:
        return {f"FAKE_{collective.upper()}": name}

    def runtime_switch(self, collective: str, name: str) -> CvarSwitch:
        return CvarSwitch(f"fake_{collective}", self.check_algorithm(collective, name).value, True)

    def launch_env(self) -> dict[str, str]:
        return {"FAKE_DYNAMIC": "1"}

    def tuning_file_mechanisms(self) -> list[str]:
        return []

    def parameter_env(self, name: str, value: bool | int | float | str) -> dict[str, str]:
        return {f"FAKE_{name.upper()}": str(value)}


LIBRARY = MPILibrary(
    vendor="mpich", version="0.0", version_string="fake", device="", prefix=Path("/nonexistent"),
    mpicc=Path("/nonexistent/bin/mpicc"), mpiexec=Path("/nonexistent/bin/mpiexec"),
)
ADAPTER = FakeAdapter(LIBRARY, {
    "allreduce": [Algorithm("ring", 3), Algorithm("tree", 5)],
    "bcast": [Algorithm("binomial", 1)],
})


# --- validation -----------------------------------------------------------------------------------
def test_unknown_collective_names_the_valid_ones() -> None:
    with pytest.raises(UsageError, match="valid: .*allreduce"):
        check_engine_collective("allreduse")
    with pytest.raises(UsageError, match="valid: .*alltoallv"):  # the engine measures every one tunempi names
        check_engine_collective("neighbor_alltoall")


def test_unknown_algorithm_is_rejected_naming_the_valid_ones() -> None:
    with pytest.raises(UsageError, match="ring"):
        parse_algorithms(ADAPTER, "allreduce", "ring,rnig")


def test_all_algorithms_start_with_the_default_and_spellings_are_canonical() -> None:
    assert parse_algorithms(ADAPTER, "allreduce", "all") == ["default", "ring", "tree"]
    assert parse_algorithms(ADAPTER, "allreduce", "tree, auto,tree") == ["tree", "default"]


@pytest.mark.parametrize(
    ("collective", "size", "ranks", "bad"),
    [
        ("allreduce", 6, 2, True),  # not whole floats
        ("allreduce", 8, 2, False),
        ("reduce_scatter", 2, 2, True),
        ("bcast", 3, 2, False),  # byte collectives take any size
        ("barrier", 8, 2, True),  # barrier only has size 0
        ("barrier", 0, 2, False),
        ("alltoall", 2**30, 4, True),  # 4 GiB buffers: counts overflow C ints
        ("bcast", 2**30, 4, False),
        ("gather", -1, 2, True),
    ],
)
def test_sizes_a_collective_cannot_take(collective: str, size: int, ranks: int, bad: bool) -> None:
    assert (size_problem(collective, size, ranks) is not None) == bad


def test_plan_rejects_bad_sizes_before_anything_runs() -> None:
    with pytest.raises(UsageError, match="multiples of 4"):
        plan_points({"allreduce": ["default"]}, [1, 8], ranks=2)


def test_plan_puts_algorithms_of_one_size_next_to_each_other() -> None:
    points = plan_points({"allreduce": ["default", "ring"], "barrier": ["default"]}, [8, 16], ranks=2, repeat=2)
    assert points[:5] == [
        BenchPoint("allreduce", "default", 8, 0), BenchPoint("allreduce", "ring", 8, 0),
        BenchPoint("allreduce", "default", 16, 0), BenchPoint("allreduce", "ring", 16, 0),
        BenchPoint("barrier", "default", 0, 0),
    ]
    assert len(points) == 10 and points[5].run == 1


# --- how a point selects its algorithm ------------------------------------------------------------
def test_mpit_mode_writes_the_cvar_and_restores_the_start_value_for_default() -> None:
    ring = selection_for(ADAPTER, BenchPoint("allreduce", "ring", 8), "mpit")
    assert (ring.cvar, ring.set_value, ring.new_communicator, ring.expected_value) == ("fake_allreduce", 3, True, 3)
    assert ring.env == {}
    default = selection_for(ADAPTER, BenchPoint("allreduce", "default", 8), "mpit")
    assert (default.cvar, default.set_value, default.expected_value) == ("fake_allreduce", SET_DEFAULT, None)


class PinningAdapter(FakeAdapter):
    """Like MPICH: a forced algorithm needs a second cvar pinned (the shared-memory level), default does not."""

    def runtime_switch(self, collective: str, name: str) -> CvarSwitch:
        switch = super().runtime_switch(collective, name)
        level = 2 if self.check_algorithm(collective, name).name == "auto" else 0
        return CvarSwitch(switch.cvar, switch.value, switch.needs_new_communicator, also=(("fake_level", level),))


def test_mpit_mode_pins_companion_cvars_with_the_point_so_default_shares_the_launch() -> None:
    adapter = PinningAdapter(LIBRARY, ADAPTER.catalog, ADAPTER.defaults)
    ring = selection_for(adapter, BenchPoint("allreduce", "ring", 8), "mpit")
    default = selection_for(adapter, BenchPoint("allreduce", "default", 8), "mpit")
    assert ring.also == (("fake_level", 0),) and default.also == ()
    # One launch for both (issue 39: a default measured in a launch of its own carried that launch's bias).
    assert ring.env == default.env == {}  # the launch key: no launch-wide setting tells them apart
    request = PointRequest(1, "allreduce", 8, ring.cvar, ring.set_value, also=ring.also)
    assert request.encode().endswith(" also=fake_level:0")
    assert "also=" not in PointRequest(1, "allreduce", 8, default.cvar, default.set_value).encode()
    with pytest.raises(ValueError, match="go with a written algorithm"):
        PointRequest(1, "allreduce", 8, "fake_allreduce", SET_DEFAULT, also=(("fake_level", 0),)).encode()


def test_env_mode_forces_through_the_environment_and_only_reads_the_cvar_back() -> None:
    ring = selection_for(ADAPTER, BenchPoint("allreduce", "ring", 8), "env")
    assert ring.env == {"FAKE_ALLREDUCE": "ring"}
    assert (ring.cvar, ring.set_value, ring.expected_value) == ("fake_allreduce", SET_KEEP, 3)
    assert selection_for(ADAPTER, BenchPoint("allreduce", "default", 8), "env").env == {}


def test_unknown_mode_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="valid: mpit, env"):
        selection_for(ADAPTER, BenchPoint("allreduce", "ring", 8), "osu")


# --- the line protocol ----------------------------------------------------------------------------
def test_request_encoding() -> None:
    request = PointRequest(
        id=7, collective="allreduce", msg_bytes=1024, cvar="MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", set_value=3,
        new_communicator=True, settings=MeasureSettings(warmup=1, min_iters=5, max_iters=50, rel_ci=0.02,
                                                        time_cap_s=0.5),
    )
    assert request.encode() == (
        "point id=7 coll=allreduce bytes=1024 cvar=MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM set=3 newcomm=1 "
        "warmup=1 min_iters=5 max_iters=50 rel_ci=0.02 time_cap=0.5"
    )
    plain = PointRequest(id=1, collective="bcast", msg_bytes=0).encode()
    assert " cvar=- set=keep newcomm=0 " in plain and "spoil" not in plain and "back_to_back" not in plain
    pipelined = PointRequest(id=1, collective="bcast", msg_bytes=8, settings=MeasureSettings(back_to_back=50))
    assert pipelined.encode().endswith(" time_cap=1 back_to_back=50")
    with pytest.raises(ValueError):
        MeasureSettings(back_to_back=0)
    assert PointRequest(id=1, collective="bcast", msg_bytes=8, spoil_every=3).encode().endswith(" spoil_every=3")


@pytest.mark.parametrize(
    "request_",
    [
        PointRequest(id=1, collective="bcast", msg_bytes=8, cvar="a b"),  # would split the line
        PointRequest(id=1, collective="bcast", msg_bytes=8, set_value=3),  # a write needs a cvar
        PointRequest(id=1, collective="bcast", msg_bytes=8, cvar="x", set_value="reset"),
    ],
)
def test_requests_that_cannot_be_encoded(request_: PointRequest) -> None:
    with pytest.raises(ValueError):
        request_.encode()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        MeasureSettings(min_iters=10, max_iters=5)


def test_decoding_engine_lines() -> None:
    ready = decode_line('{"event":"ready","ranks":2,"mpi_t":true,"library":"MPICH\\nVersion","hosts":["a"]}')
    assert ready == EngineReady(ranks=2, library="MPICH\nVersion", hosts=("a",), mpi_t=True)
    point = decode_line(
        '{"event":"point","id":3,"status":"ok","collective":"bcast","bytes":8,"ranks":2,"cvar":"c",'
        '"cvar_value":2,"cvar_consistent":true,"warmup":2,"iterations":3,"errors":1,"checked":5,"stop":"ci",'
        '"elapsed_s":0.1,"median_us":2.0,"ci_low_us":1.0,"ci_high_us":3.0,"samples_us":[1.0,2.0,3.0]}'
    )
    assert isinstance(point, PointReply) and point.ok
    assert (point.id, point.cvar_value, point.errors, point.samples_us) == (3, 2, 1, (1.0, 2.0, 3.0))
    error = decode_line('{"event":"point","id":4,"status":"error","error":"unknown cvar X"}')
    assert isinstance(error, PointReply) and not error.ok and error.error == "unknown cvar X"
    with pytest.raises(MPIError):
        decode_line("Abort(1) on node 0")
    with pytest.raises(MPIError):
        decode_line('{"event":"mystery"}')


# --- store round trip, resume and summary ----------------------------------------------------------
def _ok_outcome(point: BenchPoint, samples: list[float], errors: int = 0) -> PointOutcome:
    request = PointRequest(id=1, collective=point.collective, msg_bytes=point.msg_bytes)
    reply = PointReply(id=1, status="ok", iterations=len(samples), errors=errors, samples_us=tuple(samples))
    return PointOutcome(request=request, status="ok", reply=reply, statistics=summarize(samples), hosts=("h",))


def test_resume_skips_points_stored_ok_but_retries_failed_ones(tmp_path: Path) -> None:
    layout = Layout(ranks=2)
    points = plan_points({"allreduce": ["default", "ring"]}, [8, 16], ranks=2)
    with ResultStore(tmp_path / "r.sqlite") as store:
        sweep = Sweep(LIBRARY, ADAPTER, layout, store=store, executable=Path("/bin/true"))
        store.add(to_measurement(LIBRARY, layout, points[0], _ok_outcome(points[0], [1.0, 2.0])))
        failed = PointOutcome(request=PointRequest(id=2, collective="allreduce", msg_bytes=8), status="timeout")
        store.add(to_measurement(LIBRARY, layout, points[1], failed))
        assert sweep.pending(points) == points[1:]
        assert sweep.pending(points, force=True) == points
        # Another layout of the same library is a different point.
        assert Sweep(LIBRARY, ADAPTER, Layout(ranks=4), store=store).pending(
            plan_points({"allreduce": ["default"]}, [8], ranks=4)
        ) == [BenchPoint("allreduce", "default", 8)]


def test_fastest_table_compares_with_the_default_and_never_picks_wrong_results() -> None:
    layout = Layout(ranks=2)

    def m(algorithm: str, size: int, median: float, errors: int = 0, run: int = 0) -> Measurement:
        point = BenchPoint("allreduce", algorithm, size, run)
        return to_measurement(LIBRARY, layout, point, _ok_outcome(point, [median] * 3, errors))

    rows = fastest_table([
        m("default", 8, 4.0), m("ring", 8, 2.0), m("tree", 8, 1.0, errors=3),
        m("default", 16, 4.0), m("ring", 16, 5.0), m("ring", 16, 6.0, run=1),
    ])
    assert [(r.msg_bytes, r.fastest, r.fastest_us, r.default_us, r.failed) for r in rows] == [
        (8, "ring", 2.0, 4.0, 1),
        (16, "default", 4.0, 4.0, 0),
    ]
    assert rows[0].speedup == 2.0 and rows[1].speedup == 1.0


class ScriptedSession:
    """Stands in for an EngineSession: answers each request with the next scripted per-iteration times."""

    def __init__(self, *samples: list[float]) -> None:
        self.samples = list(samples)
        self.requests: list[PointRequest] = []

    def measure(self, request: PointRequest) -> PointOutcome:
        self.requests.append(request)
        times = self.samples.pop(0)
        reply = PointReply(id=request.id, status="ok", cvar="fake_allreduce", cvar_value=3,
                           iterations=len(times), samples_us=tuple(times))
        return PointOutcome(request=request, status="ok", reply=reply, statistics=summarize(times))


def test_a_point_disturbed_by_other_work_is_measured_again_and_the_best_attempt_kept() -> None:
    sweep = Sweep(LIBRARY, ADAPTER, Layout(ranks=2), executable=Path("/bin/true"), retries=2)
    point = BenchPoint("allreduce", "ring", 8)
    selection = selection_for(ADAPTER, point, "mpit")
    ticks = [1.0] + [4000.0] * 9  # most iterations took a scheduler tick
    session = ScriptedSession(ticks, [1.0, 1.1, 1.2] * 3, [0.5] * 9)
    outcome = sweep._measure(session, point, selection)  # type: ignore[arg-type]
    assert len(session.requests) == 2  # the clean second attempt ends the retries
    assert outcome.statistics is not None and outcome.statistics.median_us == 1.1
    assert "best of 2 attempts" in outcome.reason
    quiet = ScriptedSession([1.0, 1.1, 1.2] * 3)
    assert sweep._measure(quiet, point, selection).reason == ""  # type: ignore[arg-type]
    assert len(quiet.requests) == 1


def test_mpich_error_stacks_are_condensed_to_their_first_line_and_cause() -> None:
    stack = (
        "Other MPI error, error stack:\n"
        "internal_Allreduce(142)......: MPI_Allreduce(sendbuf=0x1, count=1, MPI_FLOAT, MPI_SUM) failed\n"
        "MPID_Allreduce(483)..........: \n"
        "MPIR_Allreduce_impl(4850)....: User set collective algorithm is not usable for the provided arguments"
    )
    assert condense(stack) == (
        "Other MPI error, error stack: ... User set collective algorithm is not usable for the provided arguments"
    )
    assert condense("MPI_ERR_UNSUPPORTED_OPERATION: operation not supported") == (
        "MPI_ERR_UNSUPPORTED_OPERATION: operation not supported"
    )


# --- vector collectives and their count distributions (issue 40) -----------------------------------------
def test_a_distribution_is_sent_only_when_not_uniform_and_must_be_known() -> None:
    assert "dist=" not in PointRequest(1, "alltoallv", 8).encode()
    assert PointRequest(1, "alltoallv", 8, distribution="skewed").encode().endswith(" dist=skewed")
    with pytest.raises(ValueError, match="distribution"):
        PointRequest(1, "alltoallv", 8, distribution="lopsided").encode()


def test_the_engine_takes_the_vector_collectives_and_plans_each_distribution_for_them_only() -> None:
    assert check_engine_collective("alltoallv") == "alltoallv" and check_engine_collective("allgatherv")
    points = plan_points({"allreduce": ["default"], "alltoallv": ["default", "scattered"]}, [8], ranks=2,
                         distributions=("uniform", "skewed"))
    assert [(p.collective, p.algorithm, p.distribution) for p in points] == [
        ("allreduce", "default", "uniform"),
        ("alltoallv", "default", "uniform"), ("alltoallv", "scattered", "uniform"),
        ("alltoallv", "default", "skewed"), ("alltoallv", "scattered", "skewed"),
    ]
    with pytest.raises(UsageError, match="sparse"):
        plan_points({"alltoallv": ["default"]}, [8], ranks=2, distributions=("lopsided",))
    # A skewed distribution gives some rank up to twice the mean block: the 2 GiB limit counts it.
    assert size_problem("alltoallv", 2**29, 2) is not None and size_problem("alltoall", 2**29, 2) is None


def test_a_distribution_is_part_of_a_point_in_the_store_the_sweep_and_the_summary(tmp_path: Path) -> None:
    layout = Layout(ranks=2)
    uniform, skewed = (BenchPoint("alltoallv", "default", 8, 0, d) for d in ("uniform", "skewed"))
    with ResultStore(tmp_path / "r.sqlite") as store:
        sweep = Sweep(LIBRARY, ADAPTER, layout, store=store, executable=Path("/bin/true"))
        store.add(to_measurement(LIBRARY, layout, uniform, _ok_outcome(uniform, [1.0, 2.0])))
        assert sweep.pending([uniform, skewed]) == [skewed]
        store.add(to_measurement(LIBRARY, layout, skewed, _ok_outcome(skewed, [3.0, 4.0])))
        rows = fastest_table(store.query())
    assert [(r.collective, r.fastest_us) for r in rows] == [("alltoallv", 1.5), ("alltoallv (skewed)", 3.5)]


def test_a_collective_whose_cvar_mpi_t_cannot_write_is_forced_per_launch() -> None:
    """Open MPI 5.0.11 registers coll_tuned_allgatherv_algorithm as a constant to MPI_T (a write fails): its
    algorithms are forced through the environment of their own launch, the cvar still read back."""
    from tunempi.mpi.openmpi import OpenMPIAdapter

    library = MPILibrary(vendor="openmpi", version="5.0.11", version_string="fake", device="", prefix=Path("/x"),
                         mpicc=Path("/x/bin/mpicc"), mpiexec=Path("/x/bin/mpiexec"))
    catalog = {"allgatherv": [Algorithm("bruck", 2)], "allgather": [Algorithm("bruck", 2)]}
    adapter = OpenMPIAdapter(library, catalog, fixed_cvars=["coll_tuned_allgatherv_algorithm"])
    forced = selection_for(adapter, BenchPoint("allgatherv", "bruck", 8), "mpit")
    assert forced.set_value == SET_KEEP and forced.expected_value == 2
    assert forced.env["OMPI_MCA_coll_tuned_allgatherv_algorithm"] == "2"
    switched = selection_for(adapter, BenchPoint("allgather", "bruck", 8), "mpit")
    assert switched.set_value == 2 and not switched.env and switched.new_communicator


def test_mpich_s_refusal_cut_inside_its_last_line_is_still_not_usable() -> None:
    """MPICH 5.0.2 cuts an alltoallv's error stack inside the fallback check's line (issue 40): the forced
    pairwise_sendrecv_replace on separate buffers is the library refusing the call, not a failure."""
    from tunempi.mpi.mpich import MpichAdapter

    adapter = MpichAdapter(LIBRARY, {})
    cut = ("engine: MPI_Alltoallv failed in 2 iteration(s): Other MPI error, error stack: ... "
           "MPIR_Alltoallv_impl(3525)....................: User set collective algorithm is n")
    assert adapter.says_not_usable(cut)
    assert not adapter.says_not_usable("engine: MPI_Alltoallv failed in 2 iteration(s): Other MPI error, error "
                                       "stack: ... MPID_Progress_wait(100): Message truncated")


# ------------------------------------------------------------------ non-blocking collectives (issue 41)


def test_nonblocking_collectives_are_engine_collectives_with_their_blocking_one_s_sizes() -> None:
    from tunempi.collectives import blocking_collective, is_nonblocking, parse_collectives

    for name, blocking in (("iallreduce", "allreduce"), ("ibcast", "bcast"), ("ialltoall", "alltoall"),
                           ("iallgather", "allgather")):
        assert check_engine_collective(name) == name and is_nonblocking(name)
        assert blocking_collective(name) == blocking and not is_nonblocking(blocking)
        for size, ranks in ((6, 2), (8, 2), (1 << 30, 4)):
            assert (size_problem(name, size, ranks) is None) == (size_problem(blocking, size, ranks) is None)
    assert "iallreduce reduces 4-byte floats" in (size_problem("iallreduce", 6, 2) or "")
    assert parse_collectives("iallreduce,bcast", nonblocking=True) == ["iallreduce", "bcast"]
    assert parse_collectives("allreduce,ialltoall") == ["allreduce", "ialltoall"]  # online takes them (issue 41)
    with pytest.raises(UsageError, match="non-blocking collectives are not taken here"):
        parse_collectives("allreduce,ialltoall", nonblocking=False)


def test_overlap_is_asked_with_nb_and_only_for_nonblocking_collectives() -> None:
    plain = PointRequest(id=1, collective="iallreduce", msg_bytes=64)
    assert " nb=" not in plain.encode()  # the engine's default for a non-blocking collective: latency
    assert PointRequest(id=1, collective="iallreduce", msg_bytes=64, nb="latency").encode() == plain.encode()
    assert PointRequest(id=1, collective="ibcast", msg_bytes=64, nb="overlap").encode().endswith(" nb=overlap")
    for bad in (
        PointRequest(id=1, collective="allreduce", msg_bytes=64, nb="overlap"),
        PointRequest(id=1, collective="iallreduce", msg_bytes=64, nb="both"),
        PointRequest(id=1, collective="iallreduce", msg_bytes=64, nb="overlap",
                     settings=MeasureSettings(back_to_back=2)),
    ):
        with pytest.raises(ValueError):
            bad.encode()


def test_decoding_an_overlap_reply_and_osu_s_overlap_formula() -> None:
    from tunempi.bench.protocol import overlap_percent

    line = ('{"event":"point","id":3,"status":"ok","collective":"iallreduce","bytes":64,"ranks":2,"cvar":null,'
            '"cvar_value":null,"cvar_consistent":true,"warmup":2,"iterations":3,"errors":0,"checked":8,'
            '"stop":"ci","elapsed_s":0.001,"nb":"overlap","overlap_iterations":3,"compute_loops":1200,'
            '"overlapped_us":15.0,"compute_us":10.0,"overlap_pct":50.0,"overlap_pct_ranks":[40.0,60.0],'
            '"pure_us_ranks":[1.5,10.0],"overlapped_us_ranks":[2.4,14.0],"median_us":10.0,"ci_low_us":9.0,'
            '"ci_high_us":11.0,"samples_us":[9.0,10.0,11.0]}')
    reply = decode_line(line)
    assert isinstance(reply, PointReply) and reply.ok
    assert (reply.nb, reply.overlap_iterations, reply.compute_loops) == ("overlap", 3, 1200)
    assert (reply.overlapped_us, reply.compute_us, reply.overlap_pct) == (15.0, 10.0, 50.0)
    assert reply.overlap_pct_ranks == (40.0, 60.0) and reply.pure_us_ranks == (1.5, 10.0)  # each rank's own
    assert reply.overlapped_us_ranks == (2.4, 14.0)
    older = decode_line(line.replace(',"overlap_pct_ranks":[40.0,60.0],"pure_us_ranks":[1.5,10.0],'
                                     '"overlapped_us_ranks":[2.4,14.0]', ""))
    assert isinstance(older, PointReply) and older.overlap_pct == 50.0 and older.overlap_pct_ranks == ()
    assert overlap_percent(10.0, 15.0, 10.0) == 50.0
    assert overlap_percent(10.0, 10.0, 10.0) == 100.0  # all of it hidden
    assert overlap_percent(10.0, 25.0, 10.0) == 0.0  # clamped: nothing hidden (the wait took longer)
    assert overlap_percent(0.0, 1.0, 1.0) == 0.0
    latency = decode_line(line.replace('"nb":"overlap"', '"nb":"latency"').split(',"overlap_iterations"')[0]
                          + ',"median_us":10.0,"ci_low_us":9.0,"ci_high_us":11.0,"samples_us":[10.0]}')
    assert isinstance(latency, PointReply) and latency.nb == "latency" and latency.overlap_pct is None


def test_a_sweep_asks_overlap_for_nonblocking_points_only() -> None:
    from tunempi.bench import sweep as sweep_module

    sent: list[PointRequest] = []

    class Session:
        def measure(self, request: PointRequest) -> PointOutcome:
            sent.append(request)
            return PointOutcome(request=request, status="failed", reason="not run")

    adapter = FakeAdapter(LIBRARY, {"iallreduce": [Algorithm("ring", 1)], "allreduce": [Algorithm("ring", 1)]})
    for collective in ("iallreduce", "allreduce"):
        point = BenchPoint(collective, "ring", 64)
        sweep = Sweep(LIBRARY, adapter, Layout(2), overlap=True)
        sweep._measure(Session(), point, selection_for(adapter, point, "mpit"))  # type: ignore[arg-type]
    assert [(r.collective, r.nb) for r in sent] == [("iallreduce", "overlap"), ("allreduce", "")]
    assert sweep_module.NB_OVERLAP == "overlap"


def test_tune_distributions_name_vector_collectives_and_leave_out_uniform() -> None:
    from tunempi.collectives import check_distributions, parse_distributions

    assert parse_distributions("alltoallv=skewed, GATHERV=sparse,allgatherv=uniform") == {
        "alltoallv": "skewed", "gatherv": "sparse"}
    assert parse_distributions("") == {}
    assert parse_distributions("alltoallv=skewed,alltoallv=uniform") == {}  # the last word wins
    with pytest.raises(UsageError, match="vector collectives"):
        parse_distributions("allreduce=skewed")
    with pytest.raises(UsageError, match="unknown count distribution 'lumpy'"):
        parse_distributions("alltoallv=lumpy")
    with pytest.raises(UsageError, match="COLLECTIVE=DISTRIBUTION"):
        parse_distributions("alltoallv")
    assert check_distributions({"scatterv": "uniform", "alltoallv": "sparse"}) == {"alltoallv": "sparse"}


def test_every_engine_is_bound_to_cores_where_its_ranks_fit_them_unless_told_otherwise() -> None:
    """tune, verify and bench start engines alike: bound where the ranks fit this node's cores (unbound, the
    scheduler's placement moved whole launches 3-8x: docs/bench.md "Binding"); left to the launcher where
    they outnumber the cores or span nodes; an explicit choice kept."""
    from tunempi.bench.engine import EngineSession
    from tunempi.launch import NodeAllocation, OpenMPILauncher, local_cores

    library = MPILibrary(vendor="openmpi", version="5.0.11", version_string="fake", device="", prefix=Path("/x"),
                         mpicc=Path("/x/bin/mpicc"), mpiexec=Path("/x/bin/mpiexec"))
    cores = local_cores()
    launcher = OpenMPILauncher("mpirun", as_root=False, cores=cores)

    def argv(layout: Layout, **kwargs: object) -> tuple[str, ...]:
        return EngineSession(library, layout, executable=Path("/e"), launcher=launcher, **kwargs).launch_argv  # type: ignore[arg-type]

    assert argv(Layout(cores)) == ("mpirun", "-n", str(cores), "--bind-to", "core", "/e")
    assert argv(Layout(2 * cores)) == ("mpirun", "-n", str(2 * cores), "--oversubscribe", "/e")
    assert argv(Layout(2 * cores), bind="core")[-3:] == ("--bind-to", "core:overload-allowed", "/e")
    hosts = NodeAllocation(("n01", "n02"), (cores, cores), "test")
    assert "--bind-to" not in argv(Layout(2, nodes=2, ppn=1), allocation=hosts)
