"""Fortran applications under the interposer, on the site's own libraries (the wheels have no Fortran).

fortran_apps/known_calls.F90 is built three times per library, once per Fortran binding (`use mpi_f08`,
`use mpi`, `include 'mpif.h'`); its profile must match the calls it makes exactly, whichever way the
library's Fortran layer reaches MPI (Open MPI: PMPI_ directly, so the interposer's Fortran entry points
record; MPICH: through the C MPI_ functions, and mpi_f08's buffer-less routines through PMPI_: no call may
be counted twice). The online mode switches the algorithms of the same program's calls, whose results
the program checks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import MPI_LIBRARIES, SITE_LIBRARIES, library_for
from profile_support import rank_env_argv, run

from tunempi.mpi.fortran import fortran_bindings
from tunempi.mpi.library import MPILibrary
from tunempi.online.run import open_state, run_online
from tunempi.online.state import OnlineConfig, read_records
from tunempi.profile.build import build_interposer, generate_wrappers

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "fortran_apps" / "known_calls.F90"
BINDINGS = {"f08": ["-DUSE_F08"], "use-mpi": [], "mpif.h": ["-DUSE_MPIFH", "-fallow-argument-mismatch"]}
RANKS = 4


def build_fortran(library: MPILibrary, binding: str, out_dir: Path) -> Path:
    compiler = fortran_bindings(library).compiler
    assert compiler is not None, f"{library.name} has no Fortran compiler"
    exe = out_dir / f"known_calls-{library.vendor}-{binding}"
    if not exe.exists():
        result = subprocess.run([str(compiler), *BINDINGS[binding], "-O1", "-o", str(exe), str(SOURCE)],
                                capture_output=True, text=True, cwd=out_dir,
                                env={**os.environ, **library.wrapper_env})  # Intel's wrappers need I_MPI_ROOT
        assert result.returncode == 0, result.stderr
    return exe


def expected_collectives(ranks: int) -> dict[tuple, dict]:
    """(collective, comm_size, exact size) -> calls and ranks, summed over the ranks: known_calls.F90 restated."""
    half = ranks // 2
    per_rank = {
        ("allreduce", ranks, 8): 10, ("allreduce", ranks, 4000): 3,  # the second in place
        ("bcast", ranks, 100): 5,
        ("alltoall", ranks, 8): 2, ("allgather", ranks, 4): 4,      # both in place: sizes from the receive side
        ("alltoallw", ranks, 8): 2,                                 # a datatype per peer (issue 40)
        ("reduce", half, 128): 7, ("bcast", half, 4): 3,            # on the split halves
        ("barrier", ranks, 0): 2,                                   # one on a duplicate, one on world
        ("iallreduce", ranks, 8): 2,
    }
    return {key: {"calls": calls * ranks, "ranks": ranks} for key, calls in per_rank.items()}


@pytest.fixture(scope="module")
def fortran_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fortran")


#: (library, binding) pairs: every binding of the site libraries; Intel MPI's wheel only through mpif.h, as its
#: Fortran modules (mpi.mod, mpi_f08.mod) are built for Intel's compiler and gfortran 12 cannot read them
#: ("Reading module mpi.mod ... Unexpected EOF").
FORTRAN_CASES = [(library_id, binding) for library_id in SITE_LIBRARIES for binding in BINDINGS] + [
    ("impi-wheel", "mpif.h")]


@pytest.mark.parametrize(("mpi_library", "binding"), FORTRAN_CASES, indirect=["mpi_library"])
def test_fortran_profile_matches_the_known_calls(mpi_library: MPILibrary, binding: str, fortran_dir: Path,
                                                 tmp_path: Path) -> None:
    exe = build_fortran(mpi_library, binding, fortran_dir)
    out = tmp_path / "profile.json"
    env = {"LD_PRELOAD": str(build_interposer(mpi_library, werror=True)), "TUNEMPI_PROFILE_OUT": str(out)}
    result = run(rank_env_argv(mpi_library, RANKS, [str(exe)], env), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all results correct" in result.stdout
    data = json.loads(out.read_text())
    got: dict[tuple, dict] = {}
    for row in data["collectives"]:
        assert len(row["exact_sizes"]) == 1, row
        size = int(next(iter(row["exact_sizes"])))
        key = (row["collective"], row["comm_size"], size)
        assert key not in got, f"duplicate record {key}"
        got[key] = {"calls": row["calls"], "ranks": row["ranks"]}
    assert got == expected_collectives(RANKS)
    senders = RANKS // 2  # even ranks send three 400 B messages; every rank sends one 4 B token
    assert data["p2p_histogram"]["calls"] == [3 * senders + RANKS, 0, 0, 0, 0, 0, 0]
    assert data["p2p_histogram"]["bytes"] == [1200 * senders + 4 * RANKS, 0, 0, 0, 0, 0, 0]
    assert [r["send_calls"] for r in data["ranks"]] == [4 if r % 2 == 0 else 1 for r in range(RANKS)]
    assert all(r["collective_calls"] == 40 for r in data["ranks"])
    assert data["header"]["started"] == "init"  # the Fortran MPI_Init was seen, whichever binding


@pytest.mark.parametrize("mpi_library", SITE_LIBRARIES, indirect=True)
def test_online_mode_switches_fortran_calls_and_results_stay_correct(mpi_library: MPILibrary, fortran_dir: Path,
                                                                     tmp_path: Path, capfd) -> None:
    exe = build_fortran(mpi_library, "use-mpi", fortran_dir)
    collectives = ["allreduce", "bcast", "alltoall", "allgather", "reduce"]
    state = open_state(tmp_path / "state", mpi_library,
                       OnlineConfig(collectives=collectives, record_ranks="all", max_records=200000))
    launcher = "mpiexec" if mpi_library.vendor == "mpich" else "mpirun"
    result = run_online(state, mpi_library, [launcher, "-n", "2", str(exe), "30"], timeout=180)
    out, err = capfd.readouterr()
    assert result.returncode == 0, out + err
    assert "known_calls: all results correct" in out  # the program checks every result
    records = read_records(result.records).records
    used: dict[str, set[str]] = defaultdict(set)
    for r in records:
        used[r.collective].add(r.algorithm)
    # every switched Fortran call was seen (30 repetitions, 2 ranks), and the draws really varied
    calls = defaultdict(int)
    for r in records:
        calls[r.collective] += 1
    assert calls["allreduce"] == 2 * 30 * 13 and calls["bcast"] == 2 * 30 * 8, dict(calls)
    assert all(len(used[c]) >= 2 for c in ("allreduce", "bcast", "alltoall")), dict(used)


@pytest.mark.parametrize("library_id", list(MPI_LIBRARIES))
def test_fortran_entry_points_only_where_the_fortran_layer_bypasses_the_c_one(library_id: str) -> None:
    library = library_for(library_id)
    text = generate_wrappers(library)
    bindings = fortran_bindings(library)
    if library.embedded and library.vendor != "impi":  # the MPICH and Open MPI wheels have no Fortran bindings
        assert bindings.compiler is None and "mpi_allreduce_" not in text
    elif library.vendor == "openmpi":  # every Fortran binding calls PMPI_ directly
        for symbol in ("mpi_allreduce_(", "MPI_ALLREDUCE(", "mpi_allreduce_f08_(", "mpi_init_(", "mpi_finalize_f08_("):
            assert symbol in text
    else:  # MPICH (and Intel MPI, whose Fortran layer is MPICH's): mpif.h/use mpi and mpi_f08's buffer routines go
        # through MPI_; defining them would double count
        assert "mpi_allreduce_(" not in text and "mpi_barrier_(" not in text
        assert "mpi_init_f08_(" in text and "mpi_barrier_f08_(" in text
    assert re.search(r"\bvoid MPI_Allreduce\(", text) is None
