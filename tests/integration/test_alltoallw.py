"""MPI_Alltoallw end to end on the embedded MPICH at 2 ranks (issue 40): `bench` measures the library's default
and a forced algorithm with checked results for each count distribution; the profiler counts and sizes an
alltoallw program's calls (a datatype per peer: each block's bytes are its count x its own type's size) and
records their count shapes; advise takes it as tunable where the library selects an algorithm for it (MPICH)
and names it with the reason where it cannot (Open MPI, under `full`). Nothing here asserts a time."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from profile_support import tunempi

from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.session import BenchOptions, run_bench
from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.profile.reader import load_profile
from tunempi.store.results import ResultStore

pytestmark = pytest.mark.mpi

QUICK = MeasureSettings(warmup=1, min_iters=5, max_iters=20, rel_ci=0.05, time_cap_s=0.05)
SOURCE = Path(__file__).parent / "profile_apps" / "alltoallw_app.c"
REPS, COUNT, RANKS = 4, 16, 2


def test_bench_measures_alltoallw_default_and_scattered_with_checked_results(tmp_path: Path) -> None:
    adapter = adapter_for(resolve_library("mpich"))
    assert {a.name for a in adapter.algorithms("alltoallw")} == {"nb", "pairwise_sendrecv_replace", "scattered"}
    db = tmp_path / "r.sqlite"
    report = run_bench(BenchOptions(mpi="mpich", collectives="alltoallw", algorithms="default,scattered",
                                    sizes="8,4KiB", ranks=RANKS, db=str(db), distributions="uniform,skewed,sparse",
                                    settings=QUICK))
    assert not report.interrupted
    with ResultStore(db) as store:
        rows = [m for m in store.query() if m.collective == "alltoallw"]
    assert {(m.algorithm, m.distribution, m.msg_bytes) for m in rows} == {
        (a, d, s) for a in ("default", "scattered") for d in ("uniform", "skewed", "sparse") for s in (8, 4096)}
    assert all(m.ok and m.errors == 0 for m in rows), [(m.algorithm, m.reason) for m in rows if not m.ok]
    assert {row.collective for row in report.rows} == {"alltoallw", "alltoallw (skewed)", "alltoallw (sparse)"}


@pytest.mark.parametrize("mpi", ["mpich", pytest.param("openmpi", marks=pytest.mark.full)])
def test_alltoallw_is_profiled_by_its_count_shapes_and_advised_for_the_library(mpi: str, tmp_path: Path) -> None:
    library = resolve_library(mpi)
    program = build_c(library, [SOURCE], "alltoallw_app", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program), str(REPS), str(COUNT)), RANKS)).argv
    profiled = tunempi("profile", "--mpi", mpi, "-o", "a.json", "--", *line, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    assert "checksum: " in profiled.stdout
    profile = load_profile(tmp_path / "a.json")
    calls = {name: n for name, n, _ in profile.time_by_collective()}
    per = RANKS * REPS  # per repetition and rank: 3 uniform calls, 1 sparse
    assert calls == {"alltoallw": 4 * per}
    assert profile.count_shapes() == {"alltoallw": {"uniform": 3 * per, "skewed": 0, "sparse": per}}
    sizes: dict[int, int] = {}
    for entry in (c for c in profile.collectives if c.collective == "alltoallw"):
        for size, n in (entry.exact_sizes or {}).items():
            sizes[int(size)] = sizes.get(int(size), 0) + n
    # uniform: the mean of a double block to itself and an int block to the other rank, 16 x (8 + 4) / 2;
    # sparse: 2 x 16 ints to the next rank, none to itself, over 2 peers
    assert sizes == {6 * COUNT: 3 * per, 4 * COUNT: per}

    advice = tunempi("advise", "--profile", "a.json", "--mpi", mpi, cwd=tmp_path)
    assert advice.returncode == 0, advice.stdout + advice.stderr
    if mpi == "mpich":  # MPIR_CVAR_ALLTOALLW_INTRA_ALGORITHM and its JSON subtree
        assert "not tunable" not in advice.stdout and "tune --from-profile a.json" in advice.stdout
    else:  # coll/tuned has no alltoallw algorithm
        assert "not tunable: alltoallw" in advice.stdout and "offers no algorithms" in advice.stdout


def test_mpich_reads_alltoallw_from_the_json_file_and_the_in_place_guard_keeps_it_valid(tmp_path: Path) -> None:
    """The files tunempi writes select MPICH's alltoallw algorithm (csel.c's alltoallw subtree): a file choosing
    pairwise_sendrecv_replace (in place only) guards it with is_sendbuf_inplace=yes, so the program's separate
    buffers keep the library's choice and its results stay right; the same leaf without the guard makes MPICH
    run it anyway and abort, which shows the file is read for alltoallw at all."""
    from tunempi.rules import ScaledChoice, SelectionTable, build_rule_sets
    from tunempi.tune.files import write_tuning_files

    library = resolve_library("mpich")
    adapter = adapter_for(library)
    program = build_c(library, [SOURCE], "alltoallw_app", werror=True)
    argv = launcher_for(library).command(LaunchSpec((str(program), "2", str(COUNT)), RANKS)).argv
    rule_sets = build_rule_sets(SelectionTable.from_scaled(
        [ScaledChoice("alltoallw", 1, RANKS, size, "pairwise_sendrecv_replace") for size in (8, 65536)]))
    written = write_tuning_files(tmp_path / "tuned", library, adapter, rule_sets, smoke_ranks=(RANKS,))
    env = written.activation_env(tmp_path / "tuned")
    tree_file = next(Path(v) for k, v in env.items() if k == "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE")
    tree = json.loads(tree_file.read_text())
    text = json.dumps(tree["collective=alltoallw"])
    assert "is_sendbuf_inplace=yes" in text and "MPIR_Alltoallw_intra_pairwise_sendrecv_replace" in text

    def run(variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env={**os.environ, **adapter.launch_env(), **variables}, capture_output=True,
                              text=True, timeout=120)

    guarded = run(env)
    assert guarded.returncode == 0 and "checksum: " in guarded.stdout, guarded.stdout + guarded.stderr
    tree["collective=alltoallw"]["comm_type=intra"] = {"algorithm=MPIR_Alltoallw_intra_pairwise_sendrecv_replace": {}}
    (tmp_path / "unguarded.json").write_text(json.dumps(tree))
    unguarded = run({**env, "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(tmp_path / "unguarded.json")})
    assert unguarded.returncode != 0 and "sendbuf == MPI_IN_PLACE" in unguarded.stdout + unguarded.stderr


@pytest.mark.full
@pytest.mark.parametrize("mpi", ["mpich", "impi"])
def test_tune_from_an_alltoallw_profile_writes_one_choice_per_layout_and_verify_takes_it(mpi: str,
                                                                                       tmp_path: Path) -> None:
    """The libraries that select for alltoallw: tune --from-profile measures it with the profile's count shape,
    writes one algorithm per communicator size (no file chooses it by a size every rank agrees on),
    smoke-checked; verify measures the files against the library on its own."""
    from profile_support import QUICK_TUNE

    library = resolve_library(mpi)
    program = build_c(library, [SOURCE], "alltoallw_app", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program), str(REPS), str(COUNT)), RANKS)).argv
    profiled = tunempi("profile", "--mpi", mpi, "-o", "a.json", "--", *line, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    tuned = tunempi("tune", "--from-profile", "a.json", "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    assert "count distributions from the profile (the shape most calls' counts had): alltoallw uniform" in tuned.stdout
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    rows = [row for row in manifest["selection"] if row["collective"] == "alltoallw"]
    assert rows and len({row["algorithm"] for row in rows}) == 1
    verified = tunempi("verify", "--tuning", "tuned", "--repeats", "2", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
