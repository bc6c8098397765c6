"""Rules above a tuning's largest measured communicator size follow the extension policy (issue 57 part 2).

The adapter here is a stand-in for what tune/files.py asks of a library's files (a unit test of the layer
above mpi/); the rules, the table and the policy are the real ones.
"""

from __future__ import annotations

from pathlib import Path

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.rules.ruleset import EXTENDED, LIBRARY
from tunempi.sim.extend import EXTENSION_POLICY
from tunempi.space import Cell
from tunempi.tune.files import extensions_for, rule_sets_for, selection_table


class Files:
    """What extensions_for asks of a library's files: here, files that bound themselves (MPICH, Open MPI)."""

    def __init__(self, keeps_library_choice: bool = True) -> None:
        self.keeps_library_choice = keeps_library_choice

    def files_keep_library_choice_elsewhere(self) -> bool:
        return self.keeps_library_choice

    def selects_by_size(self, collective: str) -> bool:
        return collective != "alltoallv"

    def selects_by_communicator_size(self, collective: str) -> bool:
        return True


def tuned(collective: str, layouts: list[tuple[int, int]], us: dict[tuple[int, int], tuple[float, float]],
          algorithm: str = "binomial") -> tuple[dict[Cell, str], dict[tuple[Cell, str], float | None]]:
    """A tune's selection and medians: at each (nodes, ppn) layout and message size of `us`, `algorithm`
    selected, with (its median, the default's) from `us[(nodes, msg_bytes)]`."""
    selection: dict[Cell, str] = {}
    medians: dict[tuple[Cell, str], float | None] = {}
    for nodes, ppn in layouts:
        for msg_bytes in sorted({size for n, size in us if n == nodes}):
            cell = Cell(collective, nodes * ppn, nodes, ppn, msg_bytes)
            selection[cell] = algorithm
            medians[cell, algorithm], medians[cell, DEFAULT_ALGORITHM] = us[nodes, msg_bytes]
    return selection, medians


#: (nodes, size) -> (binomial's median, the default's) at 2 and 4 nodes: binomial's gain grows from 1.5x to 2x
#: at 8 and 16 B and shrinks from 2x to 1.2x at 1 and 2 KiB.
GROWS_THEN_SHRINKS = {(nodes, size): ({2: (10.0, 15.0), 4: (10.0, 20.0)} if size < 1024 else
                                      {2: (10.0, 20.0), 4: (10.0, 12.0)})[nodes]
                      for nodes in (2, 4) for size in (8, 16, 1024, 2048)}


def test_measured_at_two_node_counts_the_sizes_above_follow_the_policy_and_say_so() -> None:
    """binomial beats the default by 1.5x then 2x at 8 and 16 B (kept above 8 ranks: its gain grew, and at
    its neighbouring sizes too), by 2x then 1.2x at 1 and 2 KiB (its gain shrinks: the library's own above).
    Before, every size above 8 ranks was the library's."""
    selection, medians = tuned("bcast", [(2, 2), (4, 2)], GROWS_THEN_SHRINKS)
    extensions = extensions_for(selection, medians, Files())  # type: ignore[arg-type]
    assert extensions["bcast"].policy == EXTENSION_POLICY
    rule_set = rule_sets_for(selection_table(selection), extensions)["bcast"]
    for ranks in (9, 16, 512):
        assert [rule_set.select(ranks, size) for size in (8, 16, 1024, 2048)] == ["binomial"] * 2 + [DEFAULT_ALGORITHM] * 2
    assert rule_set.select(8, 1024) == "binomial"  # the measured size keeps what it measured
    above = rule_set.coverage()[-1]
    assert (above.min_ranks, above.max_ranks, above.basis, above.policy) == (9, None, EXTENDED, EXTENSION_POLICY)


def test_measured_on_one_node_every_larger_communicator_keeps_the_library_choice() -> None:
    """Issue 57 part 1 holds with the policy on: several sizes on one node are one node count, so the policy
    extends nothing, however large the gains measured there."""
    selection, medians = tuned("bcast", [(1, 2), (1, 4)], {
        (1, 8): (10.0, 40.0), (1, 1024): (10.0, 40.0)})
    rule_set = rule_sets_for(selection_table(selection),
                             extensions_for(selection, medians, Files()))["bcast"]  # type: ignore[arg-type]
    assert rule_set.select(5, 8) == rule_set.select(64, 1024) == DEFAULT_ALGORITHM
    assert rule_set.coverage()[-1].basis == LIBRARY


def test_where_the_files_cannot_hold_it_nothing_is_extended() -> None:
    """A collective chosen per communicator size only (alltoallv), and a library whose files replace its own
    choice at every size (Intel MPI), keep the library's choice above what they measured."""
    us = {(2, 8): (10.0, 15.0), (4, 8): (10.0, 20.0), (2, 1024): (10.0, 15.0), (4, 1024): (10.0, 20.0)}
    selection, medians = tuned("alltoallv", [(2, 2), (4, 2)], us, algorithm="pairwise")
    assert extensions_for(selection, medians, Files()) == {}  # type: ignore[arg-type]
    selection, medians = tuned("bcast", [(2, 2), (4, 2)], us)
    assert extensions_for(selection, medians, Files(keeps_library_choice=False)) == {}  # type: ignore[arg-type]
    assert set(extensions_for(selection, medians, Files())) == {"bcast"}  # type: ignore[arg-type]


def test_a_cell_the_tune_left_to_the_default_is_not_extended_whatever_its_medians() -> None:
    """Only the selection is carried beyond the measured sizes: where tune kept the default (no evidence across
    launches), a faster median of another algorithm there extends nothing."""
    selection, medians = tuned("bcast", [(2, 2), (4, 2)], {
        (2, 8): (10.0, 15.0), (4, 8): (10.0, 20.0), (2, 1024): (10.0, 15.0), (4, 1024): (10.0, 20.0)})
    top = Cell("bcast", 8, 4, 2, 8)
    selection[top] = DEFAULT_ALGORITHM  # binomial's median there stays in the medians
    extensions = extensions_for(selection, medians, Files())  # type: ignore[arg-type]
    assert dict(extensions["bcast"].row) == {8: DEFAULT_ALGORITHM, 1024: "binomial"}


def test_the_gain_one_node_count_down_is_read_where_the_winner_was_measured_but_not_selected() -> None:
    """At 2 nodes tune selected knomial, yet measured binomial too: binomial's gain over the default there is
    evidence for carrying 4 nodes' binomial beyond them (it grew from 1.5x to 2x: extended; it shrank from 3x to
    2x: the library's own). Before, only the selection's and the default's medians were read, so a winner not
    selected one node count down was never extended."""
    for below_us, expected in ((10.0, "binomial"), (5.0, DEFAULT_ALGORITHM)):
        selection, medians = tuned("bcast", [(2, 2), (4, 2)], {
            (nodes, size): (10.0, 15.0 if nodes == 2 else 20.0) for nodes in (2, 4) for size in (8, 16)})
        for size in (8, 16):
            below = Cell("bcast", 4, 2, 2, size)
            selection[below] = "knomial"
            medians[below, "knomial"] = 9.0
            medians[below, "binomial"] = below_us  # the default's is 15: a gain of 1.5x, or 3x
        extensions = extensions_for(selection, medians, Files())  # type: ignore[arg-type]
        assert dict(extensions["bcast"].row) == {8: expected, 16: expected}, below_us


def test_report_says_which_policy_extended_a_block() -> None:
    """report's evidence column for the sizes above the largest measured one (it had no word for them)."""
    from tunempi.report.tuning import block_evidence

    selection, medians = tuned("bcast", [(2, 2), (4, 2)], GROWS_THEN_SHRINKS)
    rule_set = rule_sets_for(selection_table(selection),
                             extensions_for(selection, medians, Files()))["bcast"]  # type: ignore[arg-type]
    assert block_evidence(rule_set.blocks[-1]) == f"extended by policy {EXTENSION_POLICY} 9+"


def test_run_warns_that_a_job_above_the_measured_sizes_takes_the_policys_rules(tmp_path: Path) -> None:
    """`tunempi run` for a job above the largest measured size: the extended collectives are named with their
    policy (before, an extended size drew no word: only the library's own sizes were called outside)."""
    from tunempi.launch.layout import JobLayout
    from tunempi.mpi.library import MPILibrary
    from tunempi.mpi.openmpi import OpenMPIAdapter
    from tunempi.mpi.vendor import Algorithm
    from tunempi.tune.apply import layout_notes
    from tunempi.tune.manifest import LibraryRecord, Manifest

    selection, medians = tuned("bcast", [(2, 2), (4, 2)], GROWS_THEN_SHRINKS)
    rule_sets = rule_sets_for(selection_table(selection),
                              extensions_for(selection, medians, Files()))  # type: ignore[arg-type]
    record = LibraryRecord("openmpi-5.0.11", "openmpi", "5.0.11", "fp", "/x", "/x/bin/mpicc")
    manifest = Manifest(directory=tmp_path, library=record, scales=((4, 2, 2), (8, 4, 2)), rule_sets=rule_sets)
    prefix = Path("/nonexistent/openmpi")
    library = MPILibrary(vendor="openmpi", version="1", version_string="", device="", prefix=prefix,
                         mpicc=prefix / "bin/mpicc", mpiexec=prefix / "bin/mpiexec")
    catalog = {"bcast": [Algorithm("linear", 1), Algorithm("binomial", 2)]}
    adapter = OpenMPIAdapter(library, catalog, {"bcast": Algorithm("default", 0)}, [])
    _, warnings = layout_notes(manifest, JobLayout(64, 8, 8, "-n 64"), adapter)
    assert warnings == [
        "64 ranks lies above what the tuning measured (4 ranks on 2 nodes (2 per node); 8 ranks on 4 nodes (2 per "
        "node)): bcast take the "
        f"rules the extension policy {EXTENSION_POLICY} kept from the largest measured sizes, the library's own "
        "choice where it kept none"]
