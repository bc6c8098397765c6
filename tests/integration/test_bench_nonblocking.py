"""The non-blocking collectives (iallreduce, ibcast, ialltoall, iallgather) in the benchmark engine on the
embedded MPICH, Open MPI and Intel MPI at 2 ranks (issue 41): latency (start + MPI_Wait) and OSU's overlap
(start + a calibrated computation + MPI_Wait) give checked results, the check sees a spoiled result in both
phases, and `bench` selects every algorithm each library has for them, read back where the library can.
Nothing here asserts a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.bench.engine import EngineSession, Layout, PointOutcome, build_engine
from tunempi.bench.protocol import NB_OVERLAP, MeasureSettings, PointRequest
from tunempi.bench.session import BenchOptions, run_bench
from tunempi.bench.sweep import BenchPoint, Sweep, plan_points
from tunempi.collectives import NONBLOCKING
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.store.results import ResultStore

pytestmark = pytest.mark.mpi

QUICK = MeasureSettings(warmup=1, min_iters=5, max_iters=20, rel_ci=0.05, time_cap_s=0.05)
SIZES = (8, 4096, 65536 + 4)  # multiples of 4: iallreduce sums floats


@pytest.mark.parametrize("vendor", ["mpich", "openmpi", "impi"])
def test_latency_and_overlap_results_are_checked_and_a_spoiled_result_is_counted(vendor: str) -> None:
    library = resolve_library(vendor)
    adapter = adapter_for(library)
    session = EngineSession(library, Layout(2), env=adapter.launch_env(), executable=build_engine(library, werror=True))
    request_id = 0
    with session:
        for collective in NONBLOCKING:
            for size in SIZES:
                request_id += 1
                latency = session.measure(PointRequest(request_id, collective, size, settings=QUICK))
                reply = latency.reply
                assert latency.ok and reply is not None, (collective, size, latency.reason)
                assert reply.errors == 0 and reply.nb == "latency" and reply.overlap_pct is None
                request_id += 1
                overlap = session.measure(PointRequest(request_id, collective, size, settings=QUICK, nb=NB_OVERLAP))
                reply = overlap.reply
                assert overlap.ok and reply is not None, (collective, size, overlap.reason)
                assert reply.errors == 0 and reply.nb == "overlap"
                assert reply.overlap_iterations == reply.iterations and reply.compute_loops >= 1
                assert reply.checked == reply.warmup + reply.iterations + reply.overlap_iterations
                assert reply.overlap_pct is not None and 0.0 <= reply.overlap_pct <= 100.0
                assert reply.overlapped_us is not None and reply.compute_us is not None
                request_id += 1
                spoiled = session.measure(PointRequest(request_id, collective, size, settings=QUICK, nb=NB_OVERLAP,
                                                       spoil_every=3))
                assert spoiled.ok and spoiled.reply is not None
                # Every third checked iteration spoiled, across warm-up, latency and overlap phases alike.
                assert spoiled.reply.errors == spoiled.reply.checked // 3 > 0, (collective, size)
        request_id += 1
        blocking = session.measure(PointRequest(request_id, "allreduce", 8, settings=QUICK))
        assert blocking.ok and blocking.reply is not None and blocking.reply.nb == ""  # the launch goes on
    assert session.launches == 1


def test_overlap_is_each_rank_s_own_and_the_reply_gives_their_mean() -> None:
    """nb=overlap calibrates each rank's computation to its own pure time (the peers' method) and reports
    every rank's overlap and pure time, overlap_pct being their mean (MPICH, 2 ranks; no time asserted)."""
    library = resolve_library("mpich")
    session = EngineSession(library, Layout(2), env=adapter_for(library).launch_env(),
                            executable=build_engine(library, werror=True))
    with session:
        for request_id, (collective, size) in enumerate((("ibcast", 8), ("iallreduce", 1024)), 1):
            outcome = session.measure(PointRequest(request_id, collective, size, settings=QUICK, nb=NB_OVERLAP))
            reply = outcome.reply
            assert outcome.ok and reply is not None and reply.errors == 0, (collective, outcome.reason)
            assert len(reply.overlap_pct_ranks) == len(reply.pure_us_ranks) == len(reply.overlapped_us_ranks) == 2
            assert all(o > 0.0 for o in reply.overlapped_us_ranks)
            assert all(0.0 <= pct <= 100.0 for pct in reply.overlap_pct_ranks)
            assert reply.overlap_pct == pytest.approx(sum(reply.overlap_pct_ranks) / 2, abs=2e-3)
            # the point's pure time is the median of each iteration's slowest rank: never below a rank's own
            assert reply.median_us is not None and all(0.0 < p <= reply.median_us + 1e-5 for p in reply.pure_us_ranks)
            assert len(reply.unhidden_samples_us) == reply.overlap_iterations == reply.iterations


def _every_algorithm(vendor: str) -> str:
    # Intel MPI forces every preset in a launch of its own: two presets and its default keep this test short.
    return "default,preset_1,preset_2" if vendor == "impi" else "all"


@pytest.mark.parametrize("vendor", ["mpich", "openmpi", "impi"])
def test_bench_selects_every_nonblocking_algorithm_with_checked_results_and_overlap(vendor: str,
                                                                                   tmp_path: Path) -> None:
    library = resolve_library(vendor)
    adapter = adapter_for(library)
    db = tmp_path / "r.sqlite"
    collectives = [c for c in NONBLOCKING if c in adapter.collectives()]
    assert collectives == list(NONBLOCKING) if vendor != "openmpi" else ["iallreduce", "ibcast", "iallgather"]
    report = run_bench(BenchOptions(mpi=vendor, collectives=",".join(collectives), algorithms=_every_algorithm(vendor),
                                    sizes="8,4KiB", ranks=2, db=str(db), settings=QUICK, overlap=True))
    assert not report.interrupted
    with ResultStore(db) as store:
        rows = store.query()
    for collective in collectives:
        names = ({"default", "preset_1", "preset_2"} if vendor == "impi"
                 else {"default", *(a.name for a in adapter.algorithms(collective))})
        mine = [m for m in rows if m.collective == collective]
        assert {m.algorithm for m in mine} == names and {m.msg_bytes for m in mine} == {8, 4096}
        assert all(m.errors == 0 for m in mine)  # never a wrong result
        # A stored ok point ran the algorithm asked for: the sweep fails any whose cvar read back otherwise
        # (MPICH, Open MPI); Intel MPI's choice is only read at MPI_Init (forced per launch, nothing to read).
        assert all(m.ok for m in mine if m.algorithm == "default")
        failed = [m for m in mine if not m.ok]
        assert len(failed) < len(mine) / 2, [(m.algorithm, m.reason) for m in failed]
        overlapped = {(r.algorithm, r.msg_bytes) for r in report.overlap if r.collective == collective}
        assert overlapped == {(m.algorithm, m.msg_bytes) for m in mine if m.ok}
    assert all(0.0 <= r.overlap_pct <= 100.0 for r in report.overlap)
    # Every rank's own figure comes with the row, and the row's figure is their mean.
    assert all(len(r.overlap_pct_ranks) == 2 for r in report.overlap)
    assert all(r.overlap_pct == pytest.approx(sum(r.overlap_pct_ranks) / 2, abs=2e-3) for r in report.overlap)
    if vendor == "impi":
        assert report.launches == 1 + 2 * len(collectives)  # the defaults share one launch, each preset its own
    else:
        assert report.launches == 1  # switched through MPI_T, every algorithm in one launch


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_the_int_written_through_mpi_t_is_the_one_the_name_selects_at_launch(vendor: str) -> None:
    """The catalog's ints (MPICH: positions in the description; Open MPI: its enum) read back alike when the
    algorithm is forced by name through the environment at launch and written through MPI_T."""
    library = resolve_library(vendor)
    adapter = adapter_for(library)
    collective = "ibcast"
    algorithms = ["default"] + [a.name for a in adapter.algorithms(collective)][:3]
    points = plan_points({collective: algorithms}, [64], ranks=2)
    selected: dict[str, dict[str, int | str | None]] = {"mpit": {}, "env": {}}
    for mode in selected:
        def remember(point: BenchPoint, outcome: PointOutcome, _: object, mode: str = mode) -> None:
            reply = outcome.reply
            selected[mode][point.algorithm] = reply.cvar_value if outcome.ok and reply else outcome.reason

        Sweep(library, adapter, Layout(2), mode=mode, settings=QUICK,
              executable=build_engine(library, werror=True)).run(points, remember)
    expected = {name: adapter.check_algorithm(collective, name).value for name in algorithms}
    assert selected["env"] == expected
    assert selected["mpit"] == expected
