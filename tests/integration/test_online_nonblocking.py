"""The online mode switches non-blocking collectives per call (issue 41 step 4): `profile_apps/nbc_solver.c`
(a pipelined-CG-style loop: iallreduce with a halo exchange, completed by MPI_Waitall; ibcast polled by
MPI_Test; ialltoall completed by MPI_Wait; iallgather by MPI_Testall) under random per-call draws among
every algorithm of the four: every result the program checks is right, every rank draws the same algorithm
for every call, several algorithms really run, and each record runs from the start to the wait or test that
completed the call (every start completed: one record per call). The embedded MPICH in `make test`, Open
MPI's coll/libnbc (a write read at every call; no ialltoall choice) under `full`."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library
from tunempi.online.run import open_state, run_online
from tunempi.online.state import OnlineConfig, read_records

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "profile_apps" / "nbc_solver.c"
NONBLOCKING = ["iallreduce", "ibcast", "ialltoall", "iallgather"]
ITERS, EVERY = 120, 2


@pytest.mark.parametrize("vendor", ["mpich", pytest.param("openmpi", marks=pytest.mark.full)])
def test_non_blocking_collectives_are_switched_per_call_and_timed_to_completion(vendor: str, tmp_path: Path,
                                                                                capfd: pytest.CaptureFixture) -> None:
    library = resolve_library(vendor)
    program = build_c(library, [SOURCE], "nbc_solver", werror=True)
    state = open_state(tmp_path / "state", library,
                       OnlineConfig(collectives=NONBLOCKING, record_ranks="all", max_records=100000))
    switched = set(state.switches)
    assert {"iallreduce", "ibcast", "iallgather"} <= switched  # Open MPI's libnbc has no ialltoall choice
    argv = ["mpiexec" if vendor == "mpich" else "mpirun", "-n", "2", str(program), str(ITERS), "4", "8", str(EVERY)]
    run = run_online(state, library, argv, timeout=120)
    out, err = capfd.readouterr()
    assert run.returncode == 0, out + err  # every collective's result checked by the program
    assert re.search(r"^checksum: \d+ stencil: ", out, re.M), out
    records = read_records(run.records).records
    calls = {"iallreduce": ITERS, "ibcast": ITERS // EVERY, "ialltoall": ITERS // EVERY,
             "iallgather": ITERS // EVERY}
    by_rank: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
    used: dict[str, set[str]] = defaultdict(set)
    for r in records:
        assert r.collective in switched and r.end_ns > r.start_ns
        # the start call's time and the waits' and tests' that named it, both inside start to completion
        assert r.call_ns is not None and r.blocked_ns is not None and r.blocked_ns > 0
        assert r.call_ns + r.blocked_ns <= r.end_ns - r.start_ns
        by_rank[(r.collective, r.rank)].append((r.seq, r.algorithm))
        used[r.collective].add(r.algorithm)
    for collective in switched:
        mine = [sorted(by_rank[(collective, rank)]) for rank in (0, 1)]
        assert len(mine[0]) == calls[collective], collective  # every start completed, recorded once
        assert mine[0] == mine[1], collective  # the same draw on both ranks, call by call
    assert len(used["iallreduce"]) >= 3, used  # really switched
    if vendor == "mpich":
        assert all(len(used[c]) >= 2 for c in NONBLOCKING), used


#: (elements on rank 0, elements on rank 1) of a 1024-double user-op iallreduce at 2 ranks, measured with each
#: algorithm forced at launch (force_env; MPICH 5.0.2, Open MPI 5.0.11's libnbc)
PATTERNS = {
    "mpich": {"sched_recursive_doubling": (1024, 1024), "tsp_ring": (512, 512), "sched_naive": (1024, 0)},
    "openmpi": {"recursive_doubling": (1024, 1024), "ring": (512, 512), "binomial": (1024, 0)},
}


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_the_drawn_non_blocking_algorithm_is_the_one_that_runs(vendor: str, tmp_path: Path,
                                                               capfd: pytest.CaptureFixture) -> None:
    """The write before the start selects that call's algorithm: MPICH's cvar, and Open MPI's libnbc variable
    on the application's own communicator (no shadow communicator)."""
    from tunempi.online.cells import SizeRangeCell
    from tunempi.online.state import Probabilities

    library = resolve_library(vendor)
    program = build_c(library, [Path(__file__).parent / "online_apps" / "pattern_check.c"], "pattern_check",
                      werror=True)
    config = OnlineConfig(collectives=["iallreduce"], record_ranks="all", min_probability=0.0)
    state = open_state(tmp_path / "state", library, config)
    patterns = PATTERNS[vendor]
    cell = SizeRangeCell("iallreduce", 2, 1, 2, config.sizes.index(8192))
    names = state.switches["iallreduce"].names
    state.save_probabilities(Probabilities(0, {cell.key: {n: (1 / 3 if n in patterns else 0.0) for n in names}}))
    argv = ["mpiexec" if vendor == "mpich" else "mpirun", "-n", "2", str(program), "24", "nonblocking"]
    run = run_online(state, library, argv, timeout=60)
    out, err = capfd.readouterr()
    assert run.returncode == 0, out + err
    seen = {(int(r), int(c)): int(e) for r, c, e in re.findall(r"^P (\d+) (\d+) (\d+)$", out, re.M)}
    result = read_records(run.records)
    drawn = {r.seq: r.algorithm for r in result.records if r.rank == 0}
    assert len(drawn) == 24 and set(drawn.values()) == set(patterns)  # all three drawn, nothing else
    for call, algorithm in drawn.items():
        assert (seen[(0, call)], seen[(1, call)]) == patterns[algorithm], (call, algorithm)
    assert int(result.header["rank0_shadow_communicators"]) == 0
