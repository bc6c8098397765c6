"""Rules keyed by communicator size and processes per node (issue 57, parts 1 and 3).

Two layouts of one size (2 ranks as 1 node x 2 and as 2 nodes x 1) that measured different winners keep their own
rules where the library can key on ppn (MPICH's `comm_avg_ppn<=N`), and a ppn nobody measured at that size keeps
the library's own choice; one layout per size, or layouts that agree, write what they wrote before (no ppn level).
The MPICH file is walked with the evaluator of csel.c's keys (mpi.mpich_selection.select_mpich); Open MPI's and
Intel MPI's writers refuse a rule set they cannot state. The real MPICH reads it in
tests/integration/test_tuning_layouts.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunempi.catalog.build import acting_entries
from tunempi.catalog.coverage import DEFAULT, MEASURED_LAYOUT, OTHER_PPN, JobLayout, classify
from tunempi.catalog.store import Entry
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.errors import TuningFileError, UsageError
from tunempi.mpi.mpich import LEAF_RESTRICTIONS
from tunempi.mpi.mpich_selection import MpichCall, select_mpich
from tunempi.mpi.vendor import VendorAdapter
from tunempi.rules import INTERPOLATED, MEASURED, RuleSet, ScaledChoice, SelectionTable, build_rule_sets
from tunempi.space import Cell
from tunempi.tune.files import rule_sets_for, selection_table
from tunempi.writers.dynamic_rules import write_dynamic_rules
from tunempi.writers.impi_adjust import write_adjust_value
from tunempi.writers.selection_json import build_posix_tree, build_selection_tree

GOLDEN = Path(__file__).parents[1] / "golden"
DEFAULT_MPIR = json.loads((GOLDEN / "mpich-5.0.2" / "default-mpir.json").read_text())
DEFAULT_POSIX = json.loads((GOLDEN / "mpich-5.0.2" / "default-posix.json").read_text())
SIZES = (4, 1024, 20000, 65536)
RD, RING, RSA = "recursive_doubling", "ring", "reduce_scatter_allgather"


def layouts(*measured: tuple[int, int, str], sizes: tuple[int, ...] = SIZES) -> list[ScaledChoice]:
    """(nodes, ppn, algorithm) -> allreduce choices at every size."""
    return [ScaledChoice("allreduce", nodes, ppn, size, algorithm) for nodes, ppn, algorithm in measured
            for size in sizes]


def leaf(tree: dict, ranks: int, nodes: int, msg_bytes: int = 20000, **flags: bool) -> str | None:
    """The MPIR leaf MPICH reaches for an allreduce of `msg_bytes` on `ranks` ranks over `nodes` nodes (0: a
    communicator without node information, MPICH's internal node sub-communicators)."""
    call = MpichCall.from_osu("allreduce", msg_bytes, ranks, type_size=4, hierarchical=nodes > 1, nodes=nodes,
                              **flags)
    return select_mpich(tree, call)


def default_leaf(ranks: int, nodes: int, msg_bytes: int = 20000) -> str | None:
    return leaf(DEFAULT_MPIR, ranks, nodes, msg_bytes)


def test_layouts_of_one_size_with_different_winners_keep_their_own_rules_where_the_library_keys_on_ppn() -> None:
    choices = layouts((1, 2, RD), (2, 1, RING))
    table = SelectionTable.from_scaled(choices, by_ppn=True)
    rule_set = rule_sets_for(table)["allreduce"]  # check_equivalent: each layout's point by its ppn
    assert [rule_set.select(2, 20000, ppn) for ppn in (2, 1, None)] == [RD, RING, DEFAULT_ALGORITHM]
    assert rule_set.measured_ppns(2) == (1, 2) and rule_set.keys_on_ppn()
    assert [(c.min_ranks, c.max_ranks, c.basis) for c in rule_set.coverage()][1] == (2, 2, MEASURED)
    assert rule_set.select(3, 20000, 1) == DEFAULT_ALGORITHM  # the neighbours keep the library's choice
    assert RuleSet.from_dict(json.loads(json.dumps(rule_set.to_dict()))) == rule_set
    # Without the library's ppn keys: as before, one rule for both, the fullest nodes' winner.
    collapsed = build_rule_sets(SelectionTable.from_scaled(choices))["allreduce"]
    assert [collapsed.select(2, 20000, ppn) for ppn in (2, 1)] == [RD, RD] and not collapsed.keys_on_ppn()


def test_one_layout_per_size_or_layouts_that_agree_write_what_they_wrote_before() -> None:
    one = layouts((1, 2, RD)) + [ScaledChoice("allreduce", 1, 4, size, RD) for size in SIZES]
    agree = one + layouts((2, 1, RD))
    before = build_rule_sets(SelectionTable.from_scaled(one))
    for choices in (one, agree):
        table = SelectionTable.from_scaled(choices, by_ppn=True)
        assert not table.by_ppn and build_rule_sets(table) == before
        tree = build_selection_tree(DEFAULT_MPIR, build_rule_sets(table), restrictions=LEAF_RESTRICTIONS)
        assert "comm_avg_ppn" not in json.dumps(tree)
        assert all("by_ppn" not in block for block in build_rule_sets(table)["allreduce"].to_dict()["blocks"])


def test_the_mpich_file_gives_each_layout_its_rules_and_every_other_ppn_the_librarys_choice() -> None:
    """Measured at 2 ranks as 1x2 (recursive doubling) and 2x1 (ring), at 4 ranks as 1x4 and 4x1 (reduce-scatter-
    allgather and recursive doubling): a 2x2 communicator of 4 ranks (ppn 2, not measured) and a communicator
    without node information reach exactly the library's own leaf."""
    choices = layouts((1, 2, RD), (2, 1, RING), (1, 4, RSA), (4, 1, RD))
    rule_sets = build_rule_sets(SelectionTable.from_scaled(choices, by_ppn=True))
    tree = build_selection_tree(DEFAULT_MPIR, rule_sets, restrictions=LEAF_RESTRICTIONS)
    intra = tree["collective=allreduce"]["comm_type=intra"]
    assert list(intra) == ["comm_size<=1", "comm_size<=2", "comm_size<=3", "comm_size<=4", "comm_size=any"]
    # closed by `comm_size=any`: MPICH 4.x's parser asserts on `comm_avg_ppn=any`
    assert list(intra["comm_size<=2"]) == ["comm_avg_ppn<=1", "comm_avg_ppn<=2", "comm_size=any"]
    assert list(intra["comm_size<=4"]) == ["comm_avg_ppn<=1", "comm_avg_ppn<=3", "comm_avg_ppn<=4", "comm_size=any"]
    assert leaf(tree, 2, nodes=1) == "MPIR_Allreduce_intra_recursive_doubling"
    assert leaf(tree, 2, nodes=2) == "MPIR_Allreduce_intra_ring"
    assert leaf(tree, 4, nodes=1) == "MPIR_Allreduce_intra_reduce_scatter_allgather"
    assert leaf(tree, 4, nodes=4) == "MPIR_Allreduce_intra_recursive_doubling"
    for ranks, nodes in ((4, 2), (2, 0), (4, 0), (3, 1), (3, 3)):  # unmeasured ppn, no node info, size 3
        assert leaf(tree, ranks, nodes) == default_leaf(ranks, nodes), (ranks, nodes)
    # The guards still hold inside a layout's rules: a user-defined op never reaches reduce_scatter_allgather.
    assert leaf(tree, 4, 1, is_op_built_in=False) == leaf(DEFAULT_MPIR, 4, 1, is_op_built_in=False)


def test_the_posix_level_hands_each_measured_layout_to_the_mpir_tree_and_keeps_release_gather_elsewhere() -> None:
    rule_sets = build_rule_sets(SelectionTable.from_scaled(layouts((1, 2, RD), (2, 1, RING)), by_ppn=True))
    posix = build_posix_tree(DEFAULT_POSIX, rule_sets)
    release = select_mpich(DEFAULT_POSIX, MpichCall.from_osu("allreduce", 20000, 4, type_size=4))
    assert release is not None and "release_gather" in release
    for ranks, nodes, reaches in ((2, 1, None), (2, 2, None), (2, 0, release), (4, 1, release)):
        call = MpichCall.from_osu("allreduce", 20000, ranks, type_size=4, nodes=nodes)
        assert select_mpich(posix, call) == reaches, (ranks, nodes)


def test_a_neighbour_interpolates_only_what_every_layout_of_the_split_size_agrees_on() -> None:
    small = [ScaledChoice("allreduce", n, p, size, RD if size <= 1024 else alg)
             for n, p, alg in ((1, 2, RSA), (2, 1, RING)) for size in SIZES]
    table = SelectionTable.from_scaled(small + [ScaledChoice("allreduce", 1, 4, size, RD) for size in SIZES],
                                       by_ppn=True)
    rule_set = build_rule_sets(table)["allreduce"]
    assert [rule_set.select(3, size) for size in SIZES] == [RD, RD, DEFAULT_ALGORITHM, DEFAULT_ALGORITHM]
    assert INTERPOLATED in {c.basis for c in rule_set.coverage() if c.contains(3)}


def test_open_mpi_and_intel_mpi_writers_refuse_rules_they_cannot_key_on_ppn() -> None:
    rule_set = build_rule_sets(SelectionTable.from_scaled(layouts((1, 2, RD), (2, 1, RING)), by_ppn=True))
    with pytest.raises(UsageError, match="processes per node"):
        write_dynamic_rules(rule_set, {"allreduce": {RD: 3, RING: 4, DEFAULT_ALGORITHM: 0}})
    with pytest.raises(TuningFileError, match="processes per node"):
        write_adjust_value(rule_set["allreduce"], {RD: 1, RING: 4})


def test_a_table_keyed_on_ppn_refuses_a_ppn_that_does_not_divide_its_size() -> None:
    with pytest.raises(UsageError, match="3 per node"):
        SelectionTable(by_ppn={("allreduce", 4, 3, 8): RD})


def test_the_catalog_keeps_both_layouts_where_the_files_key_on_ppn() -> None:
    """catalog build: MPICH's files (adapter.selects_by_ppn) take every layout, none shadowed, each its rules;
    before, the 2x1 layout was shadowed by the fullest nodes' winner."""
    entries = tuple(Entry(Cell("allreduce", 2, nodes, ppn, size), algorithm, f"t{nodes}x{ppn}", "2026-12-05")
                    for nodes, ppn, algorithm in ((1, 2, RD), (2, 1, RING)) for size in SIZES)
    acting, shadowed = acting_entries(entries, by_ppn=True)
    assert len(acting) == len(entries) and shadowed == []
    rule_set = rule_sets_for(selection_table({e.cell: e.algorithm for e in acting}, by_ppn=True))["allreduce"]
    assert [rule_set.select(2, 20000, ppn) for ppn in (1, 2)] == [RING, RD]
    assert len(acting_entries(entries)[1]) == len(SIZES)  # Open MPI, Intel MPI: as before


def test_coverage_counts_an_unmeasured_ppn_of_a_size_keyed_on_ppn_as_the_librarys_default() -> None:
    """4 ranks measured as 1x4 and 4x1 with different winners: in MPICH's files a 2x2 job takes the library's own
    choice (before: 'measured at another ppn', as if the files acted there); without ppn keys it still does."""
    choices = layouts((1, 4, RSA), (4, 1, RD))
    measured = [(4, 1, 4), (4, 4, 1)]
    keyed = build_rule_sets(SelectionTable.from_scaled(choices, by_ppn=True))
    assert classify(JobLayout(2, 2, 1.0), measured, keyed) == DEFAULT
    assert classify(JobLayout(4, 1, 1.0), measured, keyed) == MEASURED_LAYOUT
    assert classify(JobLayout(2, 2, 1.0), measured, build_rule_sets(SelectionTable.from_scaled(choices))) == OTHER_PPN


def stub(kind: type[VendorAdapter]) -> VendorAdapter:
    """An adapter of `kind` over a library that is not installed (its rule-set capabilities only)."""
    from tunempi.mpi.library import MPILibrary
    from tunempi.mpi.vendor import Algorithm

    prefix = Path("/nonexistent")
    library = MPILibrary(vendor="x", version="1", version_string="", device="", prefix=prefix,
                         mpicc=prefix / "bin/mpicc", mpiexec=prefix / "bin/mpiexec")
    catalog = {"allreduce": [Algorithm(RD, 1), Algorithm(RING, 2)]}
    return kind(library, catalog, {"allreduce": Algorithm(DEFAULT_ALGORITHM, 0)}, [])


def test_tune_verify_and_catalog_write_the_same_rule_sets_keyed_on_ppn_where_the_library_can() -> None:
    """files_rule_sets (tune's write_result, verify's rewrite, catalog build): a 2x2 allocation's sub-scales 1x2
    and 2x1 with different winners keep their own rules for MPICH (before, tune kept the allocation's ppn's only:
    2x1 ran 1x2's winner), collapsed to the allocation's ppn for Open MPI as before."""
    from tunempi.mpi.mpich import MpichAdapter
    from tunempi.mpi.openmpi import OpenMPIAdapter
    from tunempi.tune.files import files_rule_sets

    selection = {Cell("allreduce", 2, nodes, ppn, size): algorithm
                 for nodes, ppn, algorithm in ((1, 2, RD), (2, 1, RING)) for size in SIZES}
    medians = {(cell, algorithm): 1.0 for cell, algorithm in selection.items()}
    mpich = files_rule_sets(selection, stub(MpichAdapter), medians, preferred_ppn=2)["allreduce"]
    assert [mpich.select(2, 20000, ppn) for ppn in (1, 2, None)] == [RING, RD, DEFAULT_ALGORITHM]
    openmpi = files_rule_sets(selection, stub(OpenMPIAdapter), medians, preferred_ppn=2)["allreduce"]
    assert [openmpi.select(2, 20000, ppn) for ppn in (1, 2)] == [RD, RD] and not openmpi.keys_on_ppn()
