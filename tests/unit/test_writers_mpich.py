from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.mpi.mpich import LEAF_RESTRICTIONS
from tunempi.mpi.mpich_selection import MpichCall, classify_tree, scan_trees, select_mpich
from tunempi.rules import CommBlock, MsgRule, RuleSet, SelectionTable, build_rule_sets
from tunempi.writers.selection_json import (
    MSG_SEMANTICS,
    LeafParams,
    build_posix_tree,
    build_selection_tree,
    leaf_function,
    write_posix_json,
    write_selection_json,
)

GOLDEN = Path(__file__).parents[1] / "golden"
DEFAULT_MPIR = json.loads((GOLDEN / "mpich-5.0.2" / "default-mpir.json").read_text())
DEFAULT_POSIX = json.loads((GOLDEN / "mpich-5.0.2" / "default-posix.json").read_text())
TYPE_SIZE = {"allreduce": 4, "reduce": 4, "bcast": 1, "allgather": 1, "alltoall": 1}


def check_golden(name: str, text: str) -> None:
    """Compare with tests/golden/<name>; TUNEMPI_UPDATE_GOLDEN=1 rewrites it (review the diff)."""
    path = GOLDEN / name
    if os.environ.get("TUNEMPI_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with TUNEMPI_UPDATE_GOLDEN=1 once"
    assert text == path.read_text()


def example_table() -> SelectionTable:
    items = []
    for ranks in (2, 4, 8, 16):
        for size in (4, 64, 1024, 1536, 2048, 16384, 24576, 32768, 262144, 1048576):
            items.append(("allreduce", ranks, size, "recursive_doubling" if size <= 16384 else "reduce_scatter_allgather"))
            items.append(("allgather", ranks, size, "brucks" if size * ranks <= 8192 else "ring"))
            items.append(("bcast", ranks, size, "binomial" if size < 2048 or ranks < 8 else "scatter_ring_allgather"))
        for size in (1, 64, 256, 4096, 65536):
            items.append(("alltoall", ranks, size, "brucks" if size <= 256 else "pairwise"))
    return SelectionTable.from_items(items)


def build_tree(default: dict, rule_sets: dict[str, RuleSet], params: LeafParams | None = None,
               known_leaves: frozenset[str] | None = None) -> dict:
    """The MPIR tree with MPICH's leaf restrictions, as the adapter writes it."""
    return build_selection_tree(default, rule_sets, restrictions=LEAF_RESTRICTIONS, params=params,
                                known_leaves=known_leaves)


def write_json(default: dict, rule_sets: dict[str, RuleSet]) -> str:
    return write_selection_json(default, rule_sets, restrictions=LEAF_RESTRICTIONS)


def osu_call(collective: str, msg_bytes: int, ranks: int, **flags: bool) -> MpichCall:
    return MpichCall.from_osu(collective, msg_bytes, ranks, TYPE_SIZE[collective], **flags)


def test_golden_mpich_file() -> None:
    rule_sets = build_rule_sets(example_table())
    check_golden("mpich_example.json", write_json(DEFAULT_MPIR, rule_sets))
    check_golden("mpich_example_posix.json", write_posix_json(DEFAULT_POSIX, rule_sets))


def test_file_is_complete_and_keeps_defaults_elsewhere() -> None:
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(example_table()))
    assert list(tree) == list(DEFAULT_MPIR)  # every collective, in the library's order
    for key, subtree in DEFAULT_MPIR.items():
        if key not in {"collective=allreduce", "collective=allgather", "collective=bcast", "collective=alltoall"}:
            assert tree[key] == subtree
        else:
            assert tree[key]["comm_type=inter"] == subtree["comm_type=inter"]


def test_file_selects_the_table_choice_at_every_point() -> None:
    table = example_table()
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(table))
    for collective, ranks, msg_bytes, algorithm in table:
        expected = leaf_function(collective, algorithm)
        if algorithm == "reduce_scatter_allgather" and msg_bytes // 4 < 1 << (ranks.bit_length() - 1):
            expected = leaf_function(collective, "recursive_doubling")  # the count<pow2 guard
        assert select_mpich(tree, osu_call(collective, msg_bytes, ranks)) == expected, (collective, ranks, msg_bytes)


@pytest.mark.parametrize("seed", range(15))
def test_random_tables_round_trip_through_the_file(seed: int) -> None:
    rng = random.Random(seed)
    names = {"allgather": ["brucks", "ring", "k_brucks"], "alltoall": ["brucks", "pairwise", "scattered"],
             "bcast": ["binomial", "scatter_ring_allgather", "smp"]}
    items = []
    for collective, algorithms in names.items():
        for ranks in sorted(rng.sample([2, 3, 4, 6, 8, 12, 16, 32], 4)):
            choice = rng.choice(algorithms)
            sizes = sorted({1 << e for e in range(18)} | {3 << e for e in range(17)})
            for size in sizes:
                if rng.random() < 0.25:
                    choice = rng.choice(algorithms)
                items.append((collective, ranks, size, choice))
    table = SelectionTable.from_items(items)
    params = {("allgather", "k_brucks"): {"k": 2}}
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(table), params=params)
    for collective, ranks, msg_bytes, algorithm in table:
        call = osu_call(collective, msg_bytes, ranks, hierarchical=True)
        assert select_mpich(tree, call) == leaf_function(collective, algorithm), (collective, ranks, msg_bytes)


def test_threshold_lands_on_the_right_side_in_mpich_terms() -> None:
    """A rule's bound, converted to MPICH's own measure: the size at it and one element above it."""
    table = example_table()
    rule_sets = build_rule_sets(table)
    tree = build_tree(DEFAULT_MPIR, rule_sets)
    for collective, rule_set in rule_sets.items():
        element = TYPE_SIZE[collective]
        for block in rule_set.blocks:
            for ranks in block.measured_ranks:
                for rule, following in zip(block.rules, block.rules[1:], strict=False):
                    at = rule.max_bytes - rule.max_bytes % element
                    above = at + element
                    # reduce_scatter_allgather needs count >= pof2: compare with the guard taken into account
                    got_at = select_mpich(tree, osu_call(collective, at, ranks))
                    got_above = select_mpich(tree, osu_call(collective, above, ranks))
                    assert got_at == leaf_function(collective, rule.algorithm), (collective, ranks, at)
                    assert got_above == leaf_function(collective, following.algorithm), (collective, ranks, above)


def test_message_keys_follow_mpich_semantics() -> None:
    text = write_json(DEFAULT_MPIR, build_rule_sets(example_table()))
    tree = json.loads(text)
    allgather = json.dumps(tree["collective=allgather"]["comm_type=intra"])
    allreduce = json.dumps(tree["collective=allreduce"]["comm_type=intra"])
    assert "avg_msg_size" not in allgather and "total_msg_size<=" in allgather  # MPICH asserts on avg here
    assert "avg_msg_size<=16384" not in allreduce and "avg_msg_size<=24575" in allreduce
    # allgather, 2 and 4 ranks share one block (brucks up to 2048 B per rank, ring from 16384 B): the OSU
    # bound is the log midpoint 5792 B, and MPICH compares the total, so it is written per measured size;
    # 1 rank is left to the library (nothing measured there)
    assert '"comm_size<=4": {"comm_size<=2": {"total_msg_size<=11584"' in allgather
    assert '"comm_size<=1": ' + json.dumps(DEFAULT_MPIR["collective=allgather"]["comm_type=intra"]) in allgather
    assert '"comm_size=any": {"total_msg_size<=23168"' in allgather
    assert MSG_SEMANTICS["alltoall"] == ("avg_msg_size", False)


def test_guards_keep_preconditions() -> None:
    table = SelectionTable.from_items([("allreduce", 8, s, "reduce_scatter_allgather") for s in (4, 1 << 20)])
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(table))
    rsa = "MPIR_Allreduce_intra_reduce_scatter_allgather"
    assert select_mpich(tree, MpichCall("allreduce", 8, 1024, 4)) == rsa
    # count 4 < pof2 8 and user-defined ops fall back to the library's own choice
    assert select_mpich(tree, MpichCall("allreduce", 8, 4, 4)) == "MPIR_Allreduce_intra_recursive_doubling"
    assert select_mpich(tree, MpichCall("allreduce", 8, 1024, 4, is_op_built_in=False)) == (
        "MPIR_Allreduce_intra_recursive_doubling")
    alltoall = build_tree(DEFAULT_MPIR, build_rule_sets(
        SelectionTable.from_items([("alltoall", 4, 64, "brucks")])))
    assert select_mpich(alltoall, MpichCall("alltoall", 4, 64, sendbuf_inplace=True)) == (
        "MPIR_Alltoall_intra_pairwise_sendrecv_replace")


def test_string_sorted_keys_pick_wrong_branches() -> None:
    """What ACCLAiM's published code did: sorting `comm_size<=N` keys as strings."""
    items = [("bcast", ranks, 64, alg) for ranks, alg in ((4, "scatter_ring_allgather"), (16, "binomial"),
                                                          (64, "smp"))]
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(SelectionTable.from_items(items)))
    intra = tree["collective=bcast"]["comm_type=intra"]
    bounds = [int(key.split("<=")[1]) for key in intra if key.startswith("comm_size<=")]
    # each measured size its own, the sizes around them the library's (issue 57)
    assert bounds == sorted(bounds) == [3, 4, 15, 16, 63, 64]
    string_sorted = dict(sorted(intra.items()))  # "comm_size<=15" < ... < "comm_size<=3" < "comm_size<=4"
    bad = json.loads(json.dumps(tree))
    bad["collective=bcast"]["comm_type=intra"] = string_sorted
    call = MpichCall("bcast", 4, 64, hierarchical=True)
    assert select_mpich(tree, call) == "MPIR_Bcast_intra_scatter_ring_allgather"
    # "comm_size<=15" comes first: the library's block for 5..15 ranks takes a 4-rank call
    assert select_mpich(bad, call) == select_mpich(DEFAULT_MPIR, call) == "MPIR_Bcast_intra_binomial"


def test_leaf_validation_and_parameters() -> None:
    table = SelectionTable.from_items([("allreduce", 4, 64, "recursive_multiplying")])
    with pytest.raises(UsageError, match="needs parameters k"):
        build_tree(DEFAULT_MPIR, build_rule_sets(table))
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(table),
                            params={("allreduce", "recursive_multiplying"): {"k": 4}})
    leaf = tree["collective=allreduce"]["comm_type=intra"]["comm_size<=4"]["is_commutative=yes"]
    assert leaf == {"algorithm=MPIR_Allreduce_intra_recursive_multiplying": {"k=4": {}}}
    known = frozenset({"algorithm=MPIR_Allreduce_intra_ring", "algorithm=MPIR_Allreduce_intra_tree"})
    bogus = SelectionTable.from_items([("allreduce", 4, 64, "rng")])
    with pytest.raises(UsageError, match="offers: ring, tree"):
        build_tree(DEFAULT_MPIR, build_rule_sets(bogus), known_leaves=known)
    with pytest.raises(UsageError, match="without a message size"):
        build_tree(DEFAULT_MPIR, build_rule_sets(SelectionTable.from_items(
            [("barrier", 4, 0, "smp"), ("barrier", 4, 8, "dissemination")])))


def test_barrier_rules_by_communicator_size() -> None:
    table = SelectionTable.from_items([("barrier", 2, 0, "smp"), ("barrier", 16, 0, "k_dissemination")])
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(table), params={("barrier", "k_dissemination"): {"k": 4}})
    assert select_mpich(tree, MpichCall("barrier", 2, 0, hierarchical=True)) == "MPIR_Barrier_intra_smp"
    # smp needs a communicator spanning nodes: elsewhere the library's default (k_dissemination, k=2)
    assert select_mpich(tree, MpichCall("barrier", 2, 0)) == "MPIR_Barrier_intra_k_dissemination"
    assert tree["collective=barrier"]["comm_type=intra"]["comm_size<=2"]["comm_hierarchy=any"] == (
        DEFAULT_MPIR["collective=barrier"]["comm_type=intra"])
    assert select_mpich(tree, MpichCall("barrier", 16, 0)) == "MPIR_Barrier_intra_k_dissemination"


def test_gatherv_and_scatterv_get_one_allcomm_leaf_per_communicator_size() -> None:
    """Issue 40: MPICH's gatherv/scatterv algorithms are allcomm functions, their default subtree is that one
    leaf with no comm_type key, and csel.c defines no message size for them: the file puts comm_type=intra
    before the library's leaf (intercommunicators keep it) and selects by communicator size only."""
    assert leaf_function("gatherv", "linear") == "MPIR_Gatherv_allcomm_linear"
    assert leaf_function("scatterv", "nb") == "MPIR_Scatterv_allcomm_nb"
    table = SelectionTable.from_items([("gatherv", 2, 8, "nb"), ("gatherv", 2, 65536, "nb"),
                                       ("scatterv", 2, 8, "nb"), ("scatterv", 4, 8, "default")])
    tree = build_tree(DEFAULT_MPIR, build_rule_sets(table))
    library_leaf = DEFAULT_MPIR["collective=gatherv"]
    assert tree["collective=gatherv"] == {
        "comm_type=intra": {"comm_size<=1": library_leaf, "comm_size<=2": {"algorithm=MPIR_Gatherv_allcomm_nb": {}},
                            "comm_size=any": library_leaf},  # measured at 2 ranks only
        "comm_type=inter": library_leaf}
    scatterv = tree["collective=scatterv"]
    assert list(scatterv) == ["comm_type=intra", "comm_type=inter"]
    assert select_mpich(scatterv["comm_type=intra"], MpichCall("scatterv", 2, 8)) == "MPIR_Scatterv_allcomm_nb"
    assert select_mpich(scatterv["comm_type=intra"], MpichCall("scatterv", 4, 8)) == "MPIR_Scatterv_allcomm_linear"
    with pytest.raises(UsageError, match="without a message size"):
        build_tree(DEFAULT_MPIR, build_rule_sets(SelectionTable.from_items(
            [("gatherv", 2, 8, "nb"), ("gatherv", 2, 65536, "linear")])))
    with pytest.raises(UsageError, match="asserts"):
        MpichCall("gatherv", 2, 8).total_msg_size()


def test_default_rules_keep_the_library_choice_at_both_levels() -> None:
    sizes = (8, 1024, 65536, 1 << 20)
    table = SelectionTable.from_items(
        ("allreduce", 2, s, "default" if s <= 1024 else "ring") for s in sizes)
    rule_sets = build_rule_sets(table)
    mpir = build_tree(DEFAULT_MPIR, rule_sets)
    posix = build_posix_tree(DEFAULT_POSIX, rule_sets)
    small, large = MpichCall("allreduce", 2, 2, 4), MpichCall("allreduce", 2, 16384, 4)
    assert select_mpich(mpir, small) == select_mpich(DEFAULT_MPIR, small)
    assert select_mpich(mpir, large) == "MPIR_Allreduce_intra_ring"
    # POSIX keeps release_gather where the rule says default and finds nothing (-> MPIR) elsewhere
    assert select_mpich(posix, small) == "MPIDI_POSIX_mpi_allreduce_release_gather"
    assert select_mpich(posix, large) is None


def test_posix_tree_hands_measured_sizes_to_mpir_and_keeps_release_gather_elsewhere() -> None:
    def rule_sets(*collectives: str) -> dict:
        return build_rule_sets(SelectionTable.from_items((c, 2, 8, "ring") for c in collectives))

    tree = build_posix_tree(DEFAULT_POSIX, rule_sets("allreduce", "allgather"))
    assert "collective=bcast" in tree and tree["collective=bcast"] == DEFAULT_POSIX["collective=bcast"]
    assert select_mpich(tree, MpichCall("allreduce", 2, 2, 4)) is None  # the tuned MPIR tree decides
    for ranks in (3, 4, 64):  # not measured: the shared-memory level keeps its own choice (issue 57)
        assert select_mpich(tree, MpichCall("allreduce", ranks, 2, 4)) == "MPIDI_POSIX_mpi_allreduce_release_gather"
    unbounded = {"barrier": RuleSet("barrier", (CommBlock(1, None, (MsgRule(None, "smp"),)),))}
    assert "collective=barrier" not in build_posix_tree(DEFAULT_POSIX, unbounded)


def test_scan_trees_finds_and_classifies_embedded_trees() -> None:
    blob = (b"\x00junk{\"collective=x\x00" + json.dumps(DEFAULT_POSIX).encode() + b"\x00pad\x00"
            + json.dumps(DEFAULT_MPIR).encode() + b"\x00")
    found = scan_trees(blob)
    assert [tree.level for tree in found] == ["posix", "mpir"]
    assert found[1].tree == DEFAULT_MPIR
    ch4 = json.loads((GOLDEN / "mpich-5.0.2" / "default-ch4.json").read_text())
    assert classify_tree(ch4) == "ch4"
