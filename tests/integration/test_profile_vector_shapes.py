"""How a vector collective's counts differ between ranks, from the profile to `tune --from-profile` (issue 40).

`profile_apps/vector_shapes.c` makes alltoallv, allgatherv and gatherv calls whose counts are the bench engine's
uniform, skewed and sparse distributions (and one alltoallv in place, whose send counts are not significant).
The profile must count every call by its shape exactly (every rank's view; gatherv at its root only), and
`tune --from-profile` must measure each vector collective with its dominant shape and record it in the manifest.
The embedded MPICH at 2 ranks in `make test`; Open MPI and Intel MPI under `full`.
"""

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

SOURCE = Path(__file__).parent / "profile_apps" / "vector_shapes.c"
REPS, BLOCK, RANKS = 3, 64, 2


@pytest.mark.parametrize("mpi", [
    "mpich",
    pytest.param("openmpi", marks=pytest.mark.full),
    pytest.param("impi", marks=pytest.mark.full),
])
def test_count_shapes_are_profiled_and_tune_from_profile_measures_them(mpi: str, tmp_path: Path) -> None:
    library = resolve_library(mpi)
    program = build_c(library, [SOURCE], "vector_shapes", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program), str(REPS), str(BLOCK)), RANKS)).argv
    profiled = tunempi("profile", "--mpi", mpi, "-o", "a.json", "--", *line, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    assert "checksum: " in profiled.stdout and "Vector collectives" in profiled.stdout
    profile = load_profile(tmp_path / "a.json")
    calls = {name: n for name, n, _ in profile.time_by_collective()}
    # per repetition and rank: alltoallv 2 uniform (one in place), 1 skewed, 3 sparse; allgatherv 1 uniform,
    # 3 skewed, 1 sparse; gatherv 2 sparse, classified at the root only
    per = RANKS * REPS
    assert profile.count_shapes() == {
        "alltoallv": {"uniform": 2 * per, "skewed": per, "sparse": 3 * per},
        "allgatherv": {"uniform": per, "skewed": 3 * per, "sparse": per},
        "gatherv": {"uniform": 0, "skewed": 0, "sparse": 2 * REPS},
    }
    assert calls["alltoallv"] == 6 * per and calls["allgatherv"] == 5 * per and calls["gatherv"] == 2 * per
    assert profile.dominant_shapes() == {"alltoallv": "sparse", "allgatherv": "skewed", "gatherv": "sparse"}

    tuned = tunempi("tune", "--from-profile", "a.json", "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    scope = next(text for text in tuned.stdout.splitlines() if text.startswith("from a.json: "))
    taken = set(scope.split()[2].split(","))
    assert {"alltoallv", "allgatherv"} <= taken
    expected = {c: d for c, d in {"alltoallv": "sparse", "allgatherv": "skewed", "gatherv": "sparse"}.items()
                if c in taken}  # Open MPI: no gatherv algorithm to choose (left out, named)
    said = next(text for text in tuned.stdout.splitlines() if "count distributions from the profile" in text)
    assert all(f"{c} {d}" in said for c, d in expected.items()), said
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert manifest["distributions"] == expected
