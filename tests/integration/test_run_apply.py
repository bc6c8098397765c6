"""`tunempi run`: the tuning reaches the library it was tuned for, or nothing is launched (exit 2).

Real tuning directories (tiny `tune` runs of the embedded MPICH and Open MPI), real launchers; a marker file
the command would create shows whether anything was launched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tunempi.bench.protocol import MeasureSettings
from tunempi.errors import UsageError
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.tune.apply import check_tuning_files, command_for_library, tuning_library
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.manifest import Manifest

pytestmark = pytest.mark.mpi

FAST = MeasureSettings(warmup=1, min_iters=5, max_iters=100, rel_ci=0.2, time_cap_s=0.01)
TUNEMPI = [sys.executable, "-m", "tunempi"]


def tuned(root: Path, mpi: str, collective: str) -> Path:
    options = TuneOptions(out=root / f"tuned-{mpi}", collectives=collective, mpi=mpi, ranks=2, max_msg=8,
                          timeout_s=20.0, db=root / "results.sqlite", settings=FAST, launches=1)
    report = run_tune(options)
    assert report.manifest is not None
    return report.manifest.directory


@pytest.fixture(scope="module")
def directories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("run")
    return {"mpich": tuned(root, "mpich", "allreduce"), "openmpi": tuned(root, "openmpi", "alltoall")}


def tunempi_run(directory: Path, *command: str, mpi: str | None = None,
                path_first: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TUNEMPI_MPI"}
    if path_first is not None:  # another MPI's launcher first in PATH, as on a machine with two MPIs
        env["PATH"] = f"{path_first}:{env['PATH']}"
    option = ["--mpi", mpi] if mpi else []
    return subprocess.run([*TUNEMPI, "run", "--tuning", str(directory), *option, "--", *command],
                          capture_output=True, text=True, env=env, timeout=120)


def launcher_version(output: str) -> str:
    return "hydra" if "HYDRA build details" in output else "openmpi" if "Open MPI" in output else output


@pytest.mark.parametrize(("tuned_for", "other"), [("mpich", "openmpi"), ("openmpi", "mpich")])
def test_a_bare_launcher_is_the_tuned_librarys_even_when_another_comes_first_in_path(
        directories: dict[str, Path], tuned_for: str, other: str, tmp_path: Path) -> None:
    decoy = tmp_path / "other-bin"
    decoy.mkdir()
    (decoy / "mpiexec").symlink_to(resolve_library(other).mpiexec)
    done = tunempi_run(directories[tuned_for], "mpiexec", "--version", path_first=decoy)
    assert done.returncode == 0, done.stderr
    assert launcher_version(done.stdout + done.stderr) == ("hydra" if tuned_for == "mpich" else "openmpi")


@pytest.mark.parametrize(("tuned_for", "other"), [("mpich", "openmpi"), ("openmpi", "mpich")])
def test_another_library_is_refused(directories: dict[str, Path], tuned_for: str, other: str) -> None:
    manifest = Manifest.load(directories[tuned_for])
    with pytest.raises(UsageError, match=f"was tuned for {tuned_for}"):
        tuning_library(manifest, other)
    library = tuning_library(manifest)
    with pytest.raises(UsageError, match="is not the launcher of"):
        command_for_library([str(resolve_library(other).mpiexec), "-n", "1", "./app"], library)


def test_a_rebuilt_library_is_refused(directories: dict[str, Path], tmp_path: Path) -> None:
    copy = shutil.copytree(directories["mpich"], tmp_path / "copy")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["library"]["fingerprint"] = "mpich-5.0.2-000000000000"  # tuned for another build of the library
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match="mpich-5.0.2-000000000000"):
        tuning_library(Manifest.load(copy))


DAMAGE = {
    "cut short": lambda text: text[: len(text) // 2],  # MPICH aborts at MPI_Init with "Internal error"
    "unknown algorithm": lambda text: text.replace("_intra_", "_intra_no_such_", 1),
    "value after the end": lambda text: text.rstrip() + "\n7\n",
}


@pytest.mark.parametrize(("vendor", "damage"), [("mpich", "cut short"), ("mpich", "unknown algorithm"),
                                                ("openmpi", "cut short"), ("openmpi", "value after the end")])
def test_a_corrupt_tuning_file_is_refused(directories: dict[str, Path], tmp_path: Path, vendor: str,
                                          damage: str) -> None:
    copy = shutil.copytree(directories[vendor], tmp_path / "copy")
    manifest = Manifest.load(copy)
    library = tuning_library(manifest)
    check_tuning_files(manifest, library)  # intact
    name = next(n for n in manifest.files.values() if n.endswith((".json", ".rules")))
    (copy / name).write_text(DAMAGE[damage]((copy / name).read_text()))
    with pytest.raises(UsageError, match=f"{name}.*is corrupt"):
        check_tuning_files(manifest, library)


def test_run_refuses_with_exit_2_before_launching(directories: dict[str, Path], tmp_path: Path) -> None:
    """The command line: nothing is launched (the command would create a marker file)."""
    marker = tmp_path / "launched"
    other = tunempi_run(directories["mpich"], "touch", str(marker), mpi="openmpi")
    assert other.returncode == 2 and "was tuned for mpich" in other.stderr
    copy = shutil.copytree(directories["mpich"], tmp_path / "copy")
    (copy / "mpich-mpir.json").write_text((copy / "mpich-mpir.json").read_text()[:100])
    corrupt = tunempi_run(copy, "mpiexec", "-n", "1", "touch", str(marker))
    assert corrupt.returncode == 2 and "mpich-mpir.json" in corrupt.stderr and "is corrupt" in corrupt.stderr
    assert not marker.exists()
    intact = tunempi_run(directories["openmpi"], "mpiexec", "-n", "1", "touch", str(marker))
    assert intact.returncode == 0, intact.stderr
    assert marker.exists()


def known_tuning(directory: Path, tmp_path: Path) -> Path:
    """A copy of a real tuning directory whose files select recursive doubling for allreduce at 2 ranks (the
    adapter's own files; a tiny tune may keep the default everywhere)."""
    copy = tmp_path / "known"
    shutil.copytree(directory, copy)
    manifest = Manifest.load(copy)
    rule_sets = build_rule_sets(SelectionTable.from_items(
        ("allreduce", 2, size, "recursive_doubling") for size in (8, 65536)))
    written = adapter_for(tuning_library(manifest)).write_tuning_files(rule_sets, copy)
    dataclasses.replace(manifest, rule_sets=rule_sets, files=dict(written.files), env_files=dict(written.env_files),
                        env=dict(written.env)).save()
    return copy


def test_run_names_the_jobs_layout_and_warns_outside_what_was_measured(directories: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    """Issue 57: tuned at 2 ranks on one node; a 3-rank job still runs, told that MPI_COMM_WORLD keeps the
    library's choice; a 2-rank job is only named."""
    tuning = known_tuning(directories["mpich"], tmp_path)
    # a job that lives a moment: MPICH's hydra itself dies of SIGPIPE (exit 141) in about 8 of 100 launches of
    # `mpiexec -n 3 true` beside 3 busy loops (0 of 100 quiet, 0 of 100 with `sleep 0.2`)
    inside = tunempi_run(tuning, "mpiexec", "-n", "2", "sleep", "0.2")
    assert inside.returncode == 0, inside.stderr
    assert "tunempi run: the job: 2 ranks on 1 node, 2 per node (-n 2, this machine); the tuning measured 2 ranks " \
           "on 1 node" in inside.stderr
    assert "lies outside" not in inside.stderr
    outside = tunempi_run(tuning, "mpiexec", "-n", "3", "sleep", "0.2")
    assert outside.returncode == 0, outside.stderr
    assert "tunempi run: warning: 3 ranks lies outside what the tuning measured (2 ranks on 1 node): allreduce run " \
           "the library's own choice on MPI_COMM_WORLD" in " ".join(outside.stderr.split())
