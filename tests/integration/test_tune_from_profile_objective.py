"""`tune --from-profile` measures a non-blocking collective for what the application does with it (issue 41):
a real profile of `profile_apps/nbc_solver.c` (MPICH, 2 ranks), whose MPI_Iallgather stays in flight while the
program waits for its MPI_Ialltoall (a window of that wait's length before its own MPI_Testall), is tuned for
`time` with that window as every cell's computation, the manifest saying both came from the profile; an
explicit --objective wins over the profile's. The derivation itself: tests/unit/test_profile_nonblocking_objective.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from profile_support import QUICK_TUNE, tunempi

from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library
from tunempi.profile.nonblocking import nonblocking_uses
from tunempi.profile.reader import load_profile

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "profile_apps" / "nbc_solver.c"
ONE_SIZE = ("--collectives", "iallgather", "--min-msg", "32", "--max-msg", "32")  # its 32-byte blocks only


def test_tune_from_profile_takes_the_application_s_objective_and_computation(tmp_path: Path) -> None:
    library = resolve_library("mpich")
    program = build_c(library, [SOURCE], "nbc_solver", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program), "8", "4", "8", "1"), 2)).argv
    profiled = tunempi("profile", "--mpi", "mpich", "-o", "a.json", "--", *line, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    gather = nonblocking_uses(load_profile(tmp_path / "a.json"), ["iallgather"])[0]
    assert gather.completed == gather.calls == 2 * 8
    assert gather.objective == "time" and gather.compute_us is not None and gather.compute_us > 0

    tuned = tunempi("tune", "--from-profile", "a.json", *ONE_SIZE, "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    assert "objective from the profile: time" in tuned.stdout
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert manifest["objective"] == "time" and manifest["objective_from"] == "profile a.json"
    assert [(row["collective"], row["msg_bytes"], row["compute_us"], row["from"]) for row in manifest["compute_us"]] \
        == [("iallgather", 32, gather.compute_us, f"profile a.json: {gather.label}")]

    given = tunempi("tune", "--from-profile", "a.json", *ONE_SIZE, "--objective", "latency", "--out", "latency",
                    *QUICK_TUNE, cwd=tmp_path)
    assert given.returncode == 0, given.stdout[-3000:] + given.stderr[-3000:]
    manifest = json.loads((tmp_path / "latency" / "manifest.json").read_text())
    assert (manifest["objective"], manifest["objective_from"], manifest["compute_us"]) == ("latency", "--objective", [])
