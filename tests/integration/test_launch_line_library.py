"""The same launch line means the same library in every command that takes one (issue 58, part 3).

The situation as a user met it: another MPI's `mpiexec` and `mpicc` first on PATH (Debian's Open MPI from
`make system`; here the embedded Open MPI's bin/, so the test needs no system package), and a line with a bare
`mpiexec` and an option only Hydra takes (`-launcher fork`). README: "a bare `mpiexec` is the tuned library's
own": profile, autotune's steps, compare and search all run it under the embedded MPICH. Before, autotune
and compare took the library of the mpicc beside PATH's mpiexec, whose mpirun refused `-launcher`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tunempi.autotune.pipeline import AutotuneListener, AutotuneRequest, Context
from tunempi.autotune.steps import LibrarySteps
from tunempi.cli.main import app
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import launch_line_library, resolve_library
from tunempi.search.session import resolve_target
from tunempi.store.comparisons import list_comparisons
from tunempi.store.results import ResultStore

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "c" / "allreduce_loop.c"


def test_a_bare_mpiexec_is_the_same_library_in_profile_autotune_compare_and_search(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    mpich, openmpi = resolve_library("mpich"), resolve_library("openmpi")
    program = build_c(mpich, [SOURCE], "allreduce_loop", werror=True)
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("TUNEMPI_")]:
        monkeypatch.delenv(name)
    # another library's launcher first on PATH, its mpicc beside it
    monkeypatch.setenv("PATH", f"{openmpi.prefix / 'bin'}{os.pathsep}{os.environ['PATH']}")
    line = ["mpiexec", "-launcher", "fork", "-n", "2", str(program)]
    runner = CliRunner()

    profiled = runner.invoke(app, ["profile", "-o", "p.json", "--", *line])
    assert profiled.exit_code == 0, profiled.output[-3000:]
    assert "MPICH" in json.loads((tmp_path / "p.json").read_text())["header"]["library"]

    request = AutotuneRequest(command=line, out=tmp_path / "work", min_runs=3, max_runs=3)
    ctx = Context(request, request.out, {}, None, AutotuneListener())
    step = LibrarySteps().profile(ctx)  # the autotune step, for real
    assert step["library"] == mpich.spec and step["library_name"] == mpich.name

    (tmp_path / "v.env").write_text("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=recursive_doubling\n")
    compared = runner.invoke(app, ["compare", "--variant", "v.env", "--min-runs", "3", "--max-runs", "3",
                                   "--db", "c.sqlite", "--format", "json", "--", *line])
    assert compared.exit_code == 0, compared.output[-3000:]
    [(_, header, runs)] = list_comparisons(ResultStore(tmp_path / "c.sqlite"))
    assert header["library"] == mpich.fingerprint and runs == 6
    # every run ok: Open MPI's mpirun refuses `-launcher`
    statuses = ResultStore(tmp_path / "c.sqlite").fetch_all("SELECT DISTINCT status FROM comparison_runs")
    assert [tuple(row) for row in statuses] == [("ok",)]

    assert resolve_target(None, line).library == mpich  # search's
    assert launch_line_library(None, line) == mpich
    # a launcher the line names by its path is that library's, in every command alike
    assert launch_line_library(None, [str(openmpi.mpiexec), "-n", "2", "./app"]) == openmpi


def test_a_launcher_named_by_its_path_is_that_library_s_in_profile_and_online(tmp_path: Path, monkeypatch) -> None:
    """No --mpi, the embedded Open MPI's mpirun by its path: profile and online run build their interposer for
    Open MPI (before, for the default MPICH, whose interposer the Open MPI ranks could not run)."""
    openmpi = resolve_library("openmpi")
    program = build_c(openmpi, [SOURCE], "allreduce_loop", werror=True)
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("TUNEMPI_")]:
        monkeypatch.delenv(name)
    line = [str(openmpi.mpiexec), "-n", "2", str(program)]
    runner = CliRunner()

    profiled = runner.invoke(app, ["profile", "-o", "p.json", "--", *line])
    assert profiled.exit_code == 0, profiled.output[-3000:]
    assert "Open MPI" in json.loads((tmp_path / "p.json").read_text())["header"]["library"]

    online = runner.invoke(app, ["online", "run", "--state", "state", "--collectives", "allreduce", "--", *line])
    assert online.exit_code == 0, online.output[-3000:]
    [record] = (tmp_path / "state" / "runs").glob("batch-*/run-*.json")
    assert openmpi.version in record.read_text()
