"""`tune --from-profile` on the profile a user's first run may well give (issue 40): an alltoallv-bound
program with one 4-byte allreduce and alltoall, every call of one size, at one layout (the embedded MPICH,
2 ranks). Each collective's space is one cell, where no model feature varies: tune finishes, writes its
files and names what it tuned; advise names what it cannot tune. Never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from profile_support import QUICK_TUNE, tunempi

from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library
from tunempi.profile.reader import load_profile

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "c" / "alltoallv_app.c"


def test_tune_from_a_profile_with_one_size_per_collective_at_one_layout(tmp_path: Path) -> None:
    library = resolve_library("mpich")
    program = build_c(library, [SOURCE], "alltoallv_app", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program), "200", "4", "0"), 2)).argv
    profiled = tunempi("profile", "--mpi", "mpich", "-o", "a.json", "--", *line, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    profile = load_profile(tmp_path / "a.json")
    sizes = {(row.collective, row.comm_size, row.msg_size) for row in profile.usage()}
    assert sizes == {("alltoallv", 2, 4), ("allreduce", 2, 4), ("alltoall", 2, 4)}

    tuned = tunempi("tune", "--from-profile", "a.json", "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    assert "Traceback" not in tuned.stderr
    scope = next(line for line in tuned.stdout.splitlines() if line.startswith("from a.json: "))
    assert scope.startswith("from a.json: alltoallv,") and " at 2 ranks, 4..4 bytes" in scope  # most time first
    assert set(scope.split()[2].split(",")) == {"alltoallv", "allreduce", "alltoall"}
    # its counts are equal on every rank: the profile says so, and tune says what it measures
    assert "count distributions from the profile (the shape most calls' counts had): alltoallv uniform" in tuned.stdout
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert {row["collective"] for row in manifest["selection"]} == {"alltoallv", "allreduce", "alltoall"}
    # its reductions pass MPI_SUM and MPI_MAX, every call predefined datatypes: the profile vouches for both
    assert manifest["assumes"] == ["commutative", "contiguous", "same-counts", "true-lb-zero"], tuned.stdout
    said = " ".join(tuned.stdout.split())
    # each flag taken on its own with the calls that vouch for it (issue 58)
    assert ("tuning as with --assume-commutative-ops: every reduction the profile recorded passed a commutative "
            "operation (") in said
    for flag in ("--assume-contiguous-datatypes", "--assume-same-counts"):
        assert (f"tuning as with {flag}: every collective call the profile recorded passed predefined datatypes "
                "(") in said

    advice = tunempi("advise", "--profile", "a.json", cwd=tmp_path)
    assert advice.returncode == 0, advice.stdout + advice.stderr
    assert "not tunable" not in advice.stdout  # every collective it uses is one tune takes


def test_tune_refuses_a_profile_without_a_collective_it_takes_with_a_message(tmp_path: Path) -> None:
    """A profile whose collectives are all ones tune cannot take: a usage error naming them, exit 2."""
    data = {"schema": "tunempi-profile", "schema_version": 1, "header": {"ranks": 2, "library": "MPICH Version: 5.0.2"},
            "ranks": [{"rank": r, "host": "h", "wall_ns": 10_000_000, "mpi_ns": 9_000_000, "collective_ns": 9_000_000,
                       "p2p_ns": 0, "collective_calls": 10, "send_calls": 0} for r in range(2)],
            "collectives": [{"collective": "neighbor_alltoall", "blocking": True, "comm_size": 2, "nodes": 1, "ppn": 2,
                             "size_lo": 3, "size_hi": 4, "ranks": 2, "calls": 20, "bytes": 80, "time_ns": 18_000_000,
                             "time_min_ns": 1, "time_max_ns": 2, "exact_sizes": {"4": 20}}],
            "p2p_histogram": {"upper_bounds": [2048, 4096, 8192, 16384, 32768, 65536, None], "calls": [0] * 7,
                              "bytes": [0] * 7}}
    (tmp_path / "a.json").write_text(json.dumps(data))
    refused = tunempi("tune", "--from-profile", "a.json", "--mpi", "mpich", "--out", "tuned", cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert "neighbor_alltoall" in refused.stdout + refused.stderr


@pytest.mark.parametrize("mpi", ["mpich", "openmpi", "impi"])
def test_tune_takes_the_vector_collectives_and_writes_each_library_s_files(mpi: str, tmp_path: Path) -> None:
    """alltoallv and allgatherv through tune into MPICH's JSON, Open MPI's rules file and Intel MPI's selection
    strings (smoke-checked in the library); alltoallv with one algorithm per layout (its counts differ
    between ranks: no file chooses it by size)."""
    tuned = tunempi("tune", "--mpi", mpi, "--ranks", "2", "--collectives", "alltoallv,allgatherv", "--max-msg", "1KiB",
                    "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    rows = manifest["selection"]
    assert {row["collective"] for row in rows} == {"alltoallv", "allgatherv"}
    assert len({row["algorithm"] for row in rows if row["collective"] == "alltoallv"}) == 1
    assert {"mpich": "mpich-mpir", "openmpi": "openmpi-rules", "impi": "impi-adjust"}[mpi] in manifest["files"]


def rooted_vector_profile() -> dict:
    """A profile whose MPI time is gatherv's and scatterv's (one block size each per rank, 2 ranks)."""
    return {"schema": "tunempi-profile", "schema_version": 1,
            "header": {"ranks": 2, "library": "MPICH Version: 5.0.2"},
            "ranks": [{"rank": r, "host": "h", "wall_ns": 10_000_000, "mpi_ns": 9_000_000, "collective_ns": 9_000_000,
                       "p2p_ns": 0, "collective_calls": 40, "send_calls": 0} for r in range(2)],
            "collectives": [{"collective": name, "blocking": True, "comm_size": 2, "nodes": 1, "ppn": 2,
                             "size_lo": 513, "size_hi": 1024, "ranks": 2, "calls": 40, "bytes": 40 * 1024,
                             "time_ns": 9_000_000, "time_min_ns": 1, "time_max_ns": 2, "exact_sizes": {"1024": 40}}
                            for name in ("gatherv", "scatterv")],
            "p2p_histogram": {"upper_bounds": [2048, 4096, 8192, 16384, 32768, 65536, None], "calls": [0] * 7,
                              "bytes": [0] * 7}}


def test_tune_from_profile_takes_gatherv_and_scatterv_into_mpich_s_file(tmp_path: Path) -> None:
    """Issue 40: a gatherv/scatterv-bound profile is tuned (MPICH: linear or nb, one per communicator size in
    its JSON file, smoke-checked), and advise names nothing it cannot tune."""
    (tmp_path / "a.json").write_text(json.dumps(rooted_vector_profile()))
    tuned = tunempi("tune", "--from-profile", "a.json", "--mpi", "mpich", "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    rows = manifest["selection"]
    assert {row["collective"] for row in rows} == {"gatherv", "scatterv"}
    assert "mpich-mpir" in manifest["files"]
    tree = json.loads((tmp_path / "tuned" / manifest["files"]["mpich-mpir"]).read_text())
    assert list(tree["collective=gatherv"])[0] in ("comm_type=intra", "algorithm=MPIR_Gatherv_allcomm_linear")
    advice = tunempi("advise", "--profile", "a.json", "--mpi", "mpich", cwd=tmp_path)
    assert advice.returncode == 0, advice.stdout + advice.stderr
    assert "not tunable" not in advice.stdout


def test_tune_from_profile_leaves_what_open_mpi_cannot_select_with_the_reason(tmp_path: Path) -> None:
    """Open MPI's coll/tuned has no gatherv/scatterv algorithm: tune --from-profile refuses with that reason
    (exit 2), never measuring first and failing at the file."""
    data = rooted_vector_profile()
    data["header"]["library"] = "Open MPI v5.0.11"
    (tmp_path / "a.json").write_text(json.dumps(data))
    refused = tunempi("tune", "--from-profile", "a.json", "--mpi", "openmpi", "--out", "tuned", cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    assert "offers no algorithms to choose from" in refused.stdout + refused.stderr


@pytest.mark.parametrize("mpi", [pytest.param("impi", marks=pytest.mark.full), "openmpi"])
def test_tune_on_gatherv_and_scatterv_with_intel_presets_or_open_mpi_s_nothing(mpi: str, tmp_path: Path) -> None:
    """Intel MPI: its presets, one per communicator size in the selection strings (smoke-checked). Open MPI:
    coll/tuned has no algorithm for them, and tune refuses them at once, saying so."""
    tuned = tunempi("tune", "--mpi", mpi, "--ranks", "2", "--collectives", "gatherv,scatterv", "--max-msg", "1KiB",
                    "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    if mpi == "openmpi":  # refused before measuring anything
        assert "Traceback" not in tuned.stderr
        assert tuned.returncode == 2, tuned.stdout + tuned.stderr
        assert "offers no algorithms to choose from for gatherv, scatterv" in tuned.stdout + tuned.stderr
        assert "runs measured" not in tuned.stdout
        return
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    for collective in ("gatherv", "scatterv"):
        assert len({row["algorithm"] for row in manifest["selection"] if row["collective"] == collective}) == 1
