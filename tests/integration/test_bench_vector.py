"""The vector collectives (allgatherv, alltoallv, gatherv, scatterv, alltoallw) in the benchmark engine on the embedded MPICH, Open MPI and
Intel MPI at 2 ranks (issue 40): every distribution of counts gives checked results, the check sees a spoiled
block, and `bench` measures every algorithm each library has for them. Nothing here asserts a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.bench.engine import EngineSession, Layout, build_engine
from tunempi.bench.protocol import MeasureSettings, PointRequest
from tunempi.bench.session import BenchOptions, run_bench
from tunempi.collectives import DISTRIBUTIONS
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.store.results import ResultStore

pytestmark = pytest.mark.mpi

QUICK = MeasureSettings(warmup=1, min_iters=5, max_iters=20, rel_ci=0.05, time_cap_s=0.05)


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_every_distribution_is_checked_and_a_spoiled_block_is_counted(vendor: str) -> None:
    library = resolve_library(vendor)
    adapter = adapter_for(library)
    session = EngineSession(library, Layout(2), env=adapter.launch_env(), executable=build_engine(library, werror=True))
    request_id = 0
    with session:
        for collective in ("allgatherv", "alltoallv", "gatherv", "scatterv", "alltoallw"):
            for distribution in DISTRIBUTIONS:
                for size in (0, 1, 1000, 65536 + 3):
                    request_id += 1
                    outcome = session.measure(PointRequest(request_id, collective, size, settings=QUICK,
                                                           distribution=distribution))
                    assert outcome.ok and outcome.reply is not None, (collective, distribution, size, outcome.reason)
                    assert outcome.reply.errors == 0, (collective, distribution, size)
                    if size == 0:
                        continue
                    request_id += 1
                    spoiled = session.measure(PointRequest(request_id, collective, size, settings=QUICK,
                                                           distribution=distribution, spoil_every=3))
                    assert spoiled.ok and spoiled.reply is not None
                    assert spoiled.reply.errors == spoiled.reply.checked // 3 > 0, (collective, distribution, size)
        request_id += 1
        refused = session.measure(PointRequest(request_id, "alltoall", 8, settings=QUICK, distribution="skewed"))
        assert not refused.ok and "distribution" in refused.reason  # an answer, not a crash
        assert session.measure(PointRequest(request_id + 1, "alltoall", 8, settings=QUICK)).ok
    assert session.launches == 1


@pytest.mark.parametrize("vendor", ["mpich", "openmpi", "impi"])
def test_bench_measures_every_algorithm_of_the_vector_collectives_with_checked_results(vendor: str,
                                                                                     tmp_path: Path) -> None:
    library = resolve_library(vendor)
    adapter = adapter_for(library)
    db = tmp_path / "r.sqlite"
    report = run_bench(BenchOptions(mpi=vendor, collectives="alltoallv,allgatherv", sizes="8,4KiB", ranks=2, db=str(db),
                                    distributions="uniform,skewed", settings=QUICK))
    assert not report.interrupted
    with ResultStore(db) as store:
        rows = store.query()
    for collective in ("alltoallv", "allgatherv"):
        names = {"default", *(a.name for a in adapter.algorithms(collective))}
        for distribution in ("uniform", "skewed"):
            mine = [m for m in rows if m.collective == collective and m.distribution == distribution]
            assert {m.algorithm for m in mine} == names and {m.msg_bytes for m in mine} == {8, 4096}
            assert all(m.errors == 0 for m in mine)  # never a wrong result
            assert all(m.ok for m in mine if m.algorithm == "default")
            failed = [m for m in mine if not m.ok]
            assert len(failed) < len(mine) / 2, [(m.algorithm, m.reason) for m in failed]
    assert {row.collective for row in report.rows} >= {"alltoallv", "alltoallv (skewed)", "allgatherv",
                                                       "allgatherv (skewed)"}


@pytest.mark.parametrize("vendor", ["mpich", pytest.param("impi", marks=pytest.mark.full)])
def test_bench_measures_every_algorithm_of_gatherv_and_scatterv_with_checked_results(vendor: str,
                                                                                   tmp_path: Path) -> None:
    """Rooted vector collectives: every algorithm the library has (MPICH: linear, nb; Intel MPI: its presets;
    Open MPI's coll/tuned has none, so it has only its default there) measured with checked results."""
    library = resolve_library(vendor)
    adapter = adapter_for(library)
    db = tmp_path / "r.sqlite"
    report = run_bench(BenchOptions(mpi=vendor, collectives="gatherv,scatterv", sizes="8,4KiB", ranks=2, db=str(db),
                                    distributions="uniform,sparse", settings=QUICK))
    assert not report.interrupted
    with ResultStore(db) as store:
        rows = store.query()
    for collective in ("gatherv", "scatterv"):
        names = {"default", *(a.name for a in adapter.algorithms(collective))}
        assert len(names) > 2
        for distribution in ("uniform", "sparse"):
            mine = [m for m in rows if m.collective == collective and m.distribution == distribution]
            assert {m.algorithm for m in mine} == names and {m.msg_bytes for m in mine} == {8, 4096}
            assert all(m.errors == 0 for m in mine) and all(m.ok for m in mine), [(m.algorithm, m.reason)
                                                                                 for m in mine if not m.ok]
