"""`tunempi bench` end to end on the embedded MPICH: store, resume, --force, the summary table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunempi.bench.session import BenchOptions, run_bench
from tunempi.errors import UsageError
from tunempi.store.results import ResultStore

pytestmark = pytest.mark.mpi

QUICK = ["--time-cap", "50ms", "--min-iters", "5", "--max-iters", "20", "--warmup", "1"]


def bench(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunempi", "bench", "--mpi", "mpich", "--ranks", "2", "--db", str(db), *QUICK,
         *args],
        capture_output=True, text=True, timeout=120,
    )


def test_a_resumed_bench_skips_measured_points_unless_forced(tmp_path: Path) -> None:
    db = tmp_path / "results.sqlite"
    first = bench(db, "--collectives", "allreduce", "--algorithms", "default,recursive_doubling", "--sizes", "8")
    assert first.returncode == 0, first.stderr
    assert "2 points, 0 already" in first.stdout
    with ResultStore(db) as store:
        before = {m.key: m.timestamp for m in store.query()}
    assert len(before) == 2

    second = bench(db, "--collectives", "allreduce", "--algorithms", "default,recursive_doubling", "--sizes", "8,64")
    assert second.returncode == 0, second.stderr
    assert "4 points, 2 already" in second.stdout
    assert "this run: 2 measured" in second.stdout
    # The summary covers every point of the sweep, measured now or before, default alongside.
    assert "allreduce" in second.stdout and "64B" in second.stdout and "8B" in second.stdout
    with ResultStore(db) as store:
        after = store.query()
        assert len(after) == 4 and all(m.ok and m.errors == 0 for m in after)
        assert {m.key: m.timestamp for m in after if m.key in before} == before  # untouched

    forced = bench(db, "--collectives", "allreduce", "--algorithms", "default,recursive_doubling", "--sizes", "8",
                   "--force")
    assert forced.returncode == 0, forced.stderr
    assert "this run: 2 measured" in forced.stdout


def test_env_mode_and_barrier_through_the_cli(tmp_path: Path) -> None:
    result = bench(tmp_path / "r.sqlite", "--collectives", "barrier,bcast", "--algorithms", "default",
                   "--sizes", "8", "--mode", "env")
    assert result.returncode == 0, result.stderr
    assert "engine launches: 1" in result.stdout  # one environment (the default) -> one launch
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert sorted((m.collective, m.msg_bytes) for m in store.query()) == [("barrier", 0), ("bcast", 8)]


def test_unknown_algorithm_is_refused_naming_the_valid_ones(tmp_path: Path) -> None:
    options = BenchOptions(mpi="mpich", algorithms="recursive_doubling,rign", db=str(tmp_path / "r.sqlite"))
    with pytest.raises(UsageError, match="rign.*valid: .*recursive_doubling"):
        run_bench(options)
    assert not (tmp_path / "r.sqlite").exists()  # refused before anything was stored
