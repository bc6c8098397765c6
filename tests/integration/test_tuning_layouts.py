"""Two layouts of one communicator size, each its own rule, read back by the real MPICH (issue 57, parts 1 and 3).

A tuning measured 2 ranks as 1 node x 2 (recursive doubling won) and as 2 emulated nodes x 1 (ring won). MPICH's
file keys that size on processes per node (`comm_avg_ppn<=N`, writers.selection_json._ppn_subtree), written through
tune's path (tune.files.selection_table with adapter.selects_by_ppn, as `catalog build` writes it). MPICH must run
recursive doubling on the 1x2 world and ring on the 2x1 world; a 1-rank sub-communicator (no evidence) what it runs
without the file. Before, both layouts took the fullest nodes' winner (recursive doubling), so the 2x1 world ran
it, not its own. Which algorithm ran is read from a user-defined reduction (split_allreduce.c: recursive doubling
hands the sum the whole vector, ring half of it at 2 ranks, MPICH's shared-memory release_gather its 2048-int
cells), no timing. Run by the embedded MPICH 5.0.2 and Debian's 4.0.2 (`mpicc.mpich`, group site-mpi). 4.0.2 has
no ring leaf, and every algorithm it runs at 2 ranks hands the sum the whole vector (measured: auto, smp, nb,
recursive_doubling, reduce_scatter_allgather all 5000 ints), except `nb` (the non-blocking allreduce waited on)
with its iallreduce forced to tsp_ring (`MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM`, set with and without the file):
there 1x2 measured `nb` and 2x1 recursive doubling, the library's own choice at 2x1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import emulated_cluster
from test_tuning_bounds import BYTES, COUNT, SOURCE, Traces, trace_lines

from tunempi.launch import LaunchSpec, launcher_for, run_launch
from tunempi.launch.cluster import EmulatedCluster
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.restrictions import CONTIGUOUS_DATATYPES
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.space import Cell
from tunempi.store.results import utc_timestamp
from tunempi.tune.files import rule_sets_for, selection_table, write_tuning_files
from tunempi.tune.job import files_fields
from tunempi.tune.manifest import LibraryRecord, Manifest, SelectionRow

pytestmark = pytest.mark.mpi

SIZES = (4, 1024, BYTES, 65536)
#: library -> (nodes, ppn) -> the algorithm the tuning measured fastest there, its trace at BYTES, and whether the
#: library picks an algorithm of that trace there by itself
WINNERS: dict[str, dict[tuple[int, int], tuple[str, int, bool]]] = {
    "mpich-wheel": {(1, 2): ("recursive_doubling", COUNT, False), (2, 1): ("ring", COUNT // 2, False)},
    "mpich-debian": {(1, 2): ("nb", COUNT // 2, False), (2, 1): ("recursive_doubling", COUNT, True)},
}
#: what makes the winners' traces differ (with and without the file alike)
OBSERVE = {"mpich-wheel": {}, "mpich-debian": {"MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": "tsp_ring"}}
#: what lets the launches end: over the emulated cluster's UCX_TLS=tcp alone, Debian's MPICH 4.0.2 with its UCX
#: 1.13.1 hung in MPI_Finalize after printing its traces in 7 of 30 launches at 1x2 and 6 of 30 at 2x1 (one rank
#: in UCX's tcp progress, the other in the PMI barrier; openucx/ucx#8738), 0 of 30 each with shared memory allowed
#: too. Which algorithm MPICH selects depends on the host names (ppn), not on the transport.
TRANSPORT = {"mpich-wheel": {}, "mpich-debian": {"UCX_TLS": "tcp,sm"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedCluster]:
    yield from emulated_cluster(tmp_path_factory.mktemp("cluster"), nodes=2, slots=2)


def traces(library: MPILibrary, cluster: EmulatedCluster, env: dict[str, str], nodes: int, ppn: int) -> Traces:
    """split_allreduce on `nodes` emulated nodes x `ppn`, each rank its own 1-rank sub-communicator too."""
    program = build_c(library, [SOURCE], "split_allreduce")
    spec = LaunchSpec((str(program), str(BYTES), "1"), nodes * ppn, nodes=nodes, ppn=ppn,
                      allocation=cluster.allocation(), env=env)
    command = launcher_for(library).command(spec)
    done = run_launch(command.argv, command.full_env({**os.environ, **cluster.environment()}), timeout=300)
    assert done.ok, f"{done.reason}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    found = trace_lines(done.stdout)
    assert ("world", nodes * ppn) in found, done.stdout
    return found


@pytest.mark.parametrize("mpi_library", list(WINNERS), indirect=True)
def test_two_layouts_of_two_ranks_each_take_their_own_rule_in_mpich(mpi_library: MPILibrary,
                                                                      cluster: EmulatedCluster,
                                                                      tmp_path: Path,
                                                                      request: pytest.FixtureRequest) -> None:
    library = mpi_library
    winners, observe, transport = (table[request.node.callspec.params["mpi_library"]]
                                   for table in (WINNERS, OBSERVE, TRANSPORT))
    # ring reads each rank's contiguous MPI_INT vector only: the program vouches for it as `tune
    # --assume-contiguous-datatypes` would
    adapter = adapter_for(library).assuming(CONTIGUOUS_DATATYPES)
    assert adapter.selects_by_ppn()
    selection = {Cell("allreduce", 2, nodes, ppn, size): algorithm
                 for (nodes, ppn), (algorithm, _, _) in winners.items() for size in SIZES}
    rule_sets = rule_sets_for(selection_table(selection, by_ppn=adapter.selects_by_ppn()))
    written = adapter.write_tuning_files(rule_sets, tmp_path)
    untuned = {**adapter.launch_env(), **observe, **transport}
    tuned = {**untuned, **written.activation_env(tmp_path)}
    for (nodes, ppn), (algorithm, trace, by_itself) in winners.items():
        without = traces(library, cluster, untuned, nodes, ppn)
        under = traces(library, cluster, tuned, nodes, ppn)
        where = f"{library.name}: {algorithm} measured at {nodes}x{ppn}"
        # the layout's own winner (the two layouts' winners leave different traces: another layout's would show)
        assert under[("world", 2)] == trace, (where, under, without)
        assert (without[("world", 2)] == trace) == by_itself, (where, under, without)
        # the 1-rank sub-communicators: no evidence, what the library does without the file
        assert {k: v for k, v in under.items() if k[0] != "world"} == \
            {k: v for k, v in without.items() if k[0] != "world"}, where


def layout_tuning(directory: Path, nodes: int, ppn: int, algorithm: str) -> Path:
    """A tuning directory as `tune` leaves one at `nodes` x `ppn` (the adapter's files through tune/files.py, a
    manifest with selection rows) whose every size measured `algorithm` fastest."""
    library = resolve_library("mpich")
    ranks = nodes * ppn
    rule_sets = build_rule_sets(SelectionTable.from_items(("allreduce", ranks, size, algorithm) for size in SIZES))
    written = write_tuning_files(directory, library, adapter_for(library), rule_sets, smoke=False)
    Manifest(directory=directory, library=LibraryRecord.of(library), created=utc_timestamp(),
             collectives=("allreduce",), scales=((ranks, nodes, ppn),), sizes=SIZES,
             selection=tuple(SelectionRow(Cell("allreduce", ranks, nodes, ppn, size), algorithm, 1.0, 2.0)
                             for size in SIZES),
             **files_fields(written, rule_sets)).save()
    return directory


def test_catalog_build_of_two_layouts_of_two_ranks_gives_each_its_rule_in_mpich(cluster: EmulatedCluster,
                                                                                tmp_path: Path) -> None:
    """`catalog add` of a 1x2 tuning (recursive doubling) and a 2x1 one (`nb`, the non-blocking allreduce: with its
    iallreduce forced to tsp_ring, set with and without the files, it hands the sum half the vector), then `catalog
    build`: nothing shadowed, and the embedded MPICH runs each layout's winner on its world. Before, the built
    files held the fullest nodes' winner for both and the 2x1 world ran recursive doubling (the CLI said 'not in
    the files')."""
    catalog, out = tmp_path / "catalog", tmp_path / "built"
    winners = {(1, 2): ("recursive_doubling", COUNT), (2, 1): ("nb", COUNT // 2)}
    for (nodes, ppn), (algorithm, _) in winners.items():
        tuning = layout_tuning(tmp_path / f"t{nodes}x{ppn}", nodes, ppn, algorithm)
        added = subprocess.run([sys.executable, "-m", "tunempi", "catalog", "add", str(tuning), "--catalog",
                                str(catalog)], capture_output=True, text=True, check=False)
        assert added.returncode == 0, added.stderr
    built = subprocess.run([sys.executable, "-m", "tunempi", "catalog", "build", "--out", str(out), "--catalog",
                            str(catalog)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    assert "not in the files" not in built.stdout, built.stdout
    manifest = Manifest.load(out)
    assert manifest.strategy_params["shadowed"] == [] and all(s.ok for s in manifest.smoke)
    rule_set = manifest.rule_sets["allreduce"]
    assert [rule_set.select(2, BYTES, ppn) for ppn in (2, 1)] == [a for a, _ in winners.values()]

    library = resolve_library("mpich")
    untuned = {**adapter_for(library).launch_env(), "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": "tsp_ring"}
    tuned = {**untuned, **manifest.activation_env()}
    for (nodes, ppn), (algorithm, trace) in winners.items():
        without = traces(library, cluster, untuned, nodes, ppn)
        under = traces(library, cluster, tuned, nodes, ppn)
        assert under[("world", 2)] == trace != without[("world", 2)], (algorithm, nodes, ppn, under, without)
