"""Non-blocking collectives through profile -> tune --from-profile -> compare (issue 41 step 4).

`profile_apps/nbc_solver.c` is a pipelined-CG-style loop: an MPI_Iallreduce of its dot products and a halo
exchange in flight while it computes a stencil's interior, completed by one MPI_Waitall; every 4th iteration
an MPI_Ibcast polled with MPI_Test, an MPI_Ialltoall completed by MPI_Wait and an MPI_Iallgather by MPI_Testall.
Every result is checked by the program. The profile must count every start and completion exactly, at the
sizes the program uses, with the time waited; tune --from-profile takes the four collectives at those sizes
(where the library can select an algorithm for them); compare runs the program under the files, results
unchanged. The embedded MPICH in `make test`; Open MPI and Intel MPI under `full`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from profile_support import QUICK_TUNE, tunempi

from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library
from tunempi.profile.advise import WORTH_SHARE
from tunempi.profile.reader import load_profile

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "profile_apps" / "nbc_solver.c"
ITERS, NDOTS, BLOCK = 20, 4, 8  # 32-byte messages; every 4th iteration: ibcast, ialltoall, iallgather


@pytest.mark.parametrize("mpi", [
    "mpich",
    pytest.param("openmpi", marks=pytest.mark.full),
    pytest.param("impi", marks=pytest.mark.full),
])
def test_a_solver_s_non_blocking_collectives_profiled_tuned_and_compared(mpi: str, tmp_path: Path) -> None:
    library = resolve_library(mpi)
    program = build_c(library, [SOURCE], "nbc_solver", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program), str(ITERS), str(NDOTS), str(BLOCK)), 2)).argv
    profiled = tunempi("profile", "--mpi", mpi, "-o", "a.json", "--", *line, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    assert "start to completion" in profiled.stdout  # show's non-blocking table
    profile = load_profile(tmp_path / "a.json")
    rows = {r.collective: r for r in profile.collectives}
    started = {"iallreduce": (ITERS, 8 * NDOTS), "ibcast": (ITERS // 4, 8 * NDOTS),
               "ialltoall": (ITERS // 4, 4 * BLOCK), "iallgather": (ITERS // 4, 4 * BLOCK)}
    assert set(rows) == {*started, "reduce"}
    for name, (calls, size) in started.items():
        row = rows[name]
        assert not row.blocking and row.comm_size == 2 and row.ranks == 2
        assert row.calls == row.completed == 2 * calls, name  # every start seen completed by its wait or test
        assert row.exact_sizes == {size: 2 * calls}, name
        assert row.completion_ns > row.time_ns > 0, name  # completion includes the start
        assert row.wait_ns > 0, name  # the application waited (or tested) for it
        assert row.time_s == pytest.approx((row.time_ns + row.wait_ns) * 1e-9)
    assert sum(b.calls for b in profile.p2p) == 2 * 2 * ITERS  # the halo's isends, counted apart

    tuned = tunempi("tune", "--from-profile", "a.json", "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    scope = next(text for text in tuned.stdout.splitlines() if text.startswith("from a.json: "))
    taken = set(scope.split()[2].split(","))
    assert " at 2 ranks, 8..32 bytes" in scope  # the blocking reduce of 8 B too
    assert taken <= {*started, "reduce"} and "iallreduce" in taken
    # Open MPI: ialltoall has no libnbc algorithm to choose; named with the reason when it has a share of MPI
    # time worth naming (a busy machine can push a 32-byte ialltoall below it)
    share = {name: time_s / profile.mpi_s for name, _, time_s in profile.time_by_collective()}
    left = {name for name in {*started} - taken if share[name] >= WORTH_SHARE}
    assert all(name in scope for name in left)
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert {row["collective"] for row in manifest["selection"]} >= taken - {"reduce"}

    command = ["mpiexec" if mpi != "openmpi" else "mpirun", *line[1:]]  # a bare launcher: the tuned library's
    compared = tunempi("compare", "--variant", "tuned", "--result", r"checksum: (\S+) stencil: (\S+)",
                       "--min-runs", "3", "--max-runs", "3", "--format", "json", "--no-record", "--",
                       *command, cwd=tmp_path)
    assert compared.returncode == 0, compared.stdout[-3000:] + compared.stderr[-3000:]
    verdict = json.loads(compared.stdout[compared.stdout.index("{"):])["variants"][0]
    assert verdict["results"] == "unchanged", verdict
