"""`tunempi bench` refuses bad input before any MPI library is probed or launched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunempi.bench.session import BenchOptions, run_bench
from tunempi.errors import UsageError


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (BenchOptions(collectives="allreduce,alltoal"), "valid: .*alltoall"),
        (BenchOptions(collectives="allreduce", overlap=True), "non-blocking collectives only"),
        (BenchOptions(mode="osu"), "valid: mpit, env"),
        (BenchOptions(bind="socket"), "valid: auto, core, none"),
        (BenchOptions(sizes="1:1KiB"), "multiples of 4"),  # allreduce cannot take 1 and 2 bytes
        (BenchOptions(sizes="8,1KiX"), "not a size"),
        (BenchOptions(ranks=0), "at least 1"),
        (BenchOptions(ranks=8, nodes=2, ppn=2), "do not fit"),
        (BenchOptions(repeat=0), "at least 1"),
        (BenchOptions(nodes=2, ppn=1), "needs a host list"),
    ],
)
def test_usage_errors_name_the_problem(options: BenchOptions, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_probe(spec: str | None) -> None:
        raise AssertionError("the library must not be probed for a usage error")

    monkeypatch.setattr("tunempi.bench.session.resolve_library", no_probe)
    for batch_variable in ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "PBS_NODEFILE"):
        monkeypatch.delenv(batch_variable, raising=False)
    with pytest.raises(UsageError, match=message):
        run_bench(options)


def test_usage_error_exits_with_status_2_naming_the_valid_choices() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tunempi", "bench", "--collectives", "allreduse"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "allreduse" in result.stderr and "allreduce" in result.stderr


def test_more_nodes_than_the_hostfile_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tunempi.bench.session.resolve_library", lambda spec: pytest.fail("probed"))
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=4\n")
    with pytest.raises(UsageError, match="allocation has 1 node"):
        run_bench(BenchOptions(nodes=2, ppn=2, hostfile=str(hostfile)))
