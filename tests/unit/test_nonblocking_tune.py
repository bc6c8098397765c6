"""tune, verify and tuning files for the non-blocking collectives (issue 41, step 3): the objective, the
decisions the files can hold, and each library's files for them (pure parts; the real libraries in
tests/integration/test_tune_nonblocking.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunempi.collectives import DEFAULT_ALGORITHM, check_objective, parse_collectives
from tunempi.errors import TuningFileError, UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.mpich import LEAF_RESTRICTIONS, file_expressible
from tunempi.mpi.openmpi import NONBLOCKING_FILE, OpenMPIAdapter
from tunempi.mpi.vendor import Algorithm
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.rules.ruleset import CommBlock, MsgRule, RuleSet
from tunempi.space import Cell
from tunempi.tune.files import one_choice_per_scale
from tunempi.tune.manifest import LibraryRecord, Manifest
from tunempi.writers import selection_json


def _openmpi() -> OpenMPIAdapter:
    prefix = Path("/nonexistent/openmpi")
    library = MPILibrary(vendor="openmpi", version="5.0.11", version_string="", device="", prefix=prefix,
                         mpicc=prefix / "bin/mpicc", mpiexec=prefix / "bin/mpiexec")
    catalog = {"iallreduce": [Algorithm("recursive_doubling", 1), Algorithm("binomial", 2)],  # not ring: it needs a commutative op (restrictions), which no libnbc value can state
               "ibcast": [Algorithm("linear", 1), Algorithm("binomial", 2)],
               "allreduce": [Algorithm("basic_linear", 1), Algorithm("recursive_doubling", 3)]}
    return OpenMPIAdapter(library, catalog, {c: Algorithm("ignore", 0) for c in catalog},
                          ["coll_tuned_dynamic_rules_filename"])


def _single(collective: str, *rules: tuple[int | None, str]) -> RuleSet:
    return RuleSet(collective, (CommBlock(1, None, tuple(MsgRule(b, a) for b, a in rules), (2,)),))


def test_every_objective_is_taken_and_overlap_needs_a_nonblocking_collective() -> None:
    assert check_objective("latency") == "latency" == check_objective(" Latency ")
    assert check_objective("time", ["allreduce"]) == "time"  # the default: blocking collectives ignore it
    assert check_objective("overlap", ["allreduce", "iallreduce"]) == "overlap"
    with pytest.raises(UsageError, match="overlap applies to the non-blocking collectives"):
        check_objective("overlap", ["allreduce", "bcast"])
    with pytest.raises(UsageError, match="unknown --objective"):
        check_objective("throughput")
    assert parse_collectives("iallreduce,ibcast", nonblocking=True) == ["iallreduce", "ibcast"]


def test_the_manifest_records_the_objective_and_an_older_one_reads_as_latency(tmp_path: Path) -> None:
    record = LibraryRecord("mpich-5.0.2", "mpich", "5.0.2", "fp", "/x", "/x/bin/mpicc")
    saved = Manifest(directory=tmp_path, library=record, objective="latency")
    saved.save()
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["objective"] == "latency"
    del data["objective"]
    assert Manifest.from_dict(tmp_path, data).objective == "latency"


def test_open_mpi_s_libnbc_takes_the_best_single_algorithm_over_every_cell() -> None:
    """No rules file reaches libnbc: one value per collective, for all sizes and communicator sizes, the one no
    slower than the default anywhere with the lowest geometric mean; the blocking collective keeps its cells."""
    adapter = _openmpi()
    assert not adapter.selects_by_size("iallreduce") and not adapter.selects_by_communicator_size("iallreduce")
    assert adapter.selects_by_size("allreduce") and adapter.selects_by_communicator_size("allreduce")
    cells = [Cell("iallreduce", ranks, 1, ranks, size) for ranks in (2, 4) for size in (8, 1024)]
    selection = dict(zip(cells, ["recursive_doubling", "binomial", "recursive_doubling", DEFAULT_ALGORITHM], strict=True))
    medians: dict[tuple[Cell, str], float | None] = {}
    for cell in cells:
        medians[(cell, DEFAULT_ALGORITHM)] = 10.0
        medians[(cell, "recursive_doubling")] = 8.0 if cell.msg_bytes == 8 else 9.5
        medians[(cell, "binomial")] = 5.0 if cell.ranks == 2 else 11.0  # faster at 2 ranks, slower at 4
    blocking = [Cell("allreduce", 2, 1, 2, 8), Cell("allreduce", 4, 1, 4, 8)]
    fixed = one_choice_per_scale({**selection, blocking[0]: "ring", blocking[1]: "basic_linear"}, adapter, medians)
    assert {fixed[cell] for cell in cells} == {"recursive_doubling"}
    assert [fixed[cell] for cell in blocking] == ["ring", "basic_linear"]
    unmeasured = one_choice_per_scale(selection, adapter)  # nothing measured: the library's default
    assert {unmeasured[cell] for cell in cells} == {DEFAULT_ALGORITHM}


def test_open_mpi_writes_libnbc_values_as_environment_and_refuses_a_choice_by_size(tmp_path: Path) -> None:
    adapter = _openmpi()
    written = adapter.write_tuning_files({"iallreduce": _single("iallreduce", (None, "binomial")),
                                          "ibcast": _single("ibcast", (None, DEFAULT_ALGORITHM))}, tmp_path)
    assert dict(written.files) == {"openmpi-libnbc": NONBLOCKING_FILE} and not written.env_files
    assert dict(written.env) == {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "2"}  # ibcast keeps the default
    adapter.read_back_tuning_file(tmp_path / NONBLOCKING_FILE)
    both = adapter.write_tuning_files({"iallreduce": _single("iallreduce", (None, "recursive_doubling")),
                                       "allreduce": _single("allreduce", (64, "recursive_doubling"), (None, DEFAULT_ALGORITHM))},
                                      tmp_path)
    assert set(both.files) == {"openmpi-rules", "openmpi-libnbc"}
    assert both.env["OMPI_MCA_coll_libnbc_iallreduce_algorithm"] == "1"
    assert both.env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"
    with pytest.raises(TuningFileError, match="one iallreduce algorithm for every call"):
        adapter.write_tuning_files({"iallreduce": _single("iallreduce", (64, "recursive_doubling"), (None, "binomial"))}, tmp_path)
    # tune's rule sets stop where the evidence does (issue 57); libnbc's one value cannot: it acts everywhere
    bounded = build_rule_sets(SelectionTable.from_items([("iallreduce", 2, 8, "binomial"),
                                                         ("iallreduce", 2, 65536, "binomial")]))
    assert adapter.write_tuning_files(bounded, tmp_path).env == {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "2"}
    (tmp_path / NONBLOCKING_FILE).write_text("export OMPI_MCA_coll_libnbc_iallreduce_algorithm=7\n")
    with pytest.raises(UsageError, match="not an algorithm id"):
        adapter.read_back_tuning_file(tmp_path / NONBLOCKING_FILE)


def test_mpich_json_selects_non_blocking_algorithms_by_their_own_keys_behind_their_guards() -> None:
    """csel.c: avg_msg_size for iallreduce/ibcast/ialltoall, total_msg_size (x comm size) for iallgather;
    coll_algorithms.txt's restrictions become guards whose other branch is the library's default."""
    default = {"algorithm=MPIR_X_default": {}}
    rs = RuleSet("iallgather", (CommBlock(1, None, (MsgRule(1024, "sched_brucks"), MsgRule(None, "sched_ring")),
                                          (4,)),))
    tree = selection_json.tuned_intra_subtree(rs, default, restrictions=LEAF_RESTRICTIONS)
    assert list(tree) == ["total_msg_size<=4096", "total_msg_size=any"]
    ialltoall = selection_json.tuned_intra_subtree(
        _single("ialltoall", (256, "sched_pairwise"), (None, DEFAULT_ALGORITHM)), default,
        restrictions=LEAF_RESTRICTIONS)
    assert ialltoall["avg_msg_size<=256"] == {"is_sendbuf_inplace=yes": default, "is_sendbuf_inplace=no": {
        "algorithm=MPIR_Ialltoall_intra_sched_pairwise": {}}}
    assert "inplace" in file_expressible("ialltoall") and "inplace" not in file_expressible("iallreduce")
    iallreduce = selection_json.tuned_intra_subtree(
        _single("iallreduce", (None, "sched_reduce_scatter_allgather")), default, restrictions=LEAF_RESTRICTIONS)
    assert iallreduce["count<pow2"] == default
    assert "algorithm=MPIR_Iallreduce_intra_sched_reduce_scatter_allgather" in str(iallreduce["count=any"])
    recexch = selection_json.tuned_intra_subtree(_single("iallreduce", (None, "tsp_recexch_single_buffer")),
                                                 default, restrictions=LEAF_RESTRICTIONS,
                                                 params={("iallreduce", "tsp_recexch_single_buffer"): {"k": 2}})
    assert recexch == {"algorithm=MPIR_Iallreduce_intra_tsp_recexch_single_buffer": {"k=2": {}}}
    with pytest.raises(UsageError, match="needs parameters k"):
        selection_json.tuned_intra_subtree(_single("iallreduce", (None, "tsp_recexch_single_buffer")), default,
                                           restrictions=LEAF_RESTRICTIONS)


def test_the_manifest_and_report_say_where_the_files_hold_one_algorithm_for_every_call(tmp_path: Path) -> None:
    from tunempi.report.tuning import summary_lines
    from tunempi.tune.job import one_choice

    choice = one_choice(_openmpi(), ["iallreduce", "allreduce", "ibcast"])
    assert choice == {"iallreduce": "for every call", "ibcast": "for every call"}
    record = LibraryRecord("openmpi-5.0.11", "openmpi", "5.0.11", "fp", "/x", "/x/bin/mpicc")
    manifest = Manifest(directory=tmp_path, library=record, collectives=("allreduce", "iallreduce", "ibcast"),
                        one_choice=choice, objective="latency")
    manifest.save()
    lines = summary_lines(Manifest.load(tmp_path))
    assert "iallreduce: one algorithm for every call (the library's files cannot choose it by message size)" in lines
    assert "iallreduce, ibcast: tuned for their latency (--objective; latency: start + MPI_Wait)" in lines
