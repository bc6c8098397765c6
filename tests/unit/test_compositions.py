"""The CH4-level composition writer and the choice among measured compositions (pure: no library)."""

from __future__ import annotations

import pytest

from tunempi.errors import UsageError
from tunempi.mpi.mpich import composition_function, composition_name
from tunempi.mpi.mpich_selection import MpichCall, select_mpich
from tunempi.tune.compositions import DEFAULT, CompositionResult, select_composition
from tunempi.writers.selection_json import build_ch4_tree

#: The shape of MPICH 5.0.2's built-in CH4 tree for allreduce (read out of libmpi.so.12), plus bcast.
CH4_TREE = {
    "collective=allreduce": {"comm_type=intra": {
        "comm_size=node_comm_size": {"composition=MPIDI_Allreduce_intra_composition_gamma": {}},
        "comm_size=any": {
            "comm_hierarchy=parent": {
                "is_commutative=yes": {"avg_msg_size=any": {"composition=MPIDI_Allreduce_intra_composition_alpha": {}}},
                "is_commutative=no": {"composition=MPIDI_Allreduce_intra_composition_beta": {}}},
            "comm_hierarchy=any": {"composition=MPIDI_Allreduce_intra_composition_beta": {}}}}},
    "collective=bcast": {"comm_type=intra": {"composition=MPIDI_Bcast_intra_composition_alpha": {}}},
}


def test_names_follow_the_cvar_values() -> None:
    assert [composition_name(v) for v in (1, 2, 3)] == ["alpha", "beta", "gamma"]
    assert composition_function("reduce_scatter_block", "alpha") == "MPIDI_Reduce_scatter_block_intra_composition_alpha"
    with pytest.raises(UsageError):
        composition_name(0)  # 0 is "auto": the tree decides


def test_written_tree_forces_the_composition_across_nodes_only() -> None:
    tree = build_ch4_tree(CH4_TREE, {"allreduce": composition_function("allreduce", "beta")})
    across = MpichCall("allreduce", 4, 256, 4, hierarchical=True)
    one_node = MpichCall("allreduce", 4, 256, 4, hierarchical=False)
    assert select_mpich(CH4_TREE, across) == "MPIDI_Allreduce_intra_composition_alpha"
    assert select_mpich(tree, across) == "MPIDI_Allreduce_intra_composition_beta"
    assert select_mpich(tree, one_node) == select_mpich(CH4_TREE, one_node) == "MPIDI_Allreduce_intra_composition_gamma"
    assert tree["collective=bcast"] == CH4_TREE["collective=bcast"]  # untuned collectives untouched
    assert "comm_hierarchy=parent" not in str(CH4_TREE["collective=bcast"])


def test_unknown_collective_is_refused() -> None:
    with pytest.raises(UsageError, match="no collective=gather"):
        build_ch4_tree(CH4_TREE, {"gather": "MPIDI_Gather_intra_composition_alpha"})


def _result(name: str, size: int, status: str, median: float | None = None) -> CompositionResult:
    return CompositionResult("allreduce", size, name, status, median)


def test_selection_takes_the_fastest_usable_composition_never_the_default() -> None:
    results = [
        _result(DEFAULT, 8, "ok", 1.0), _result(DEFAULT, 64, "ok", 1.0),
        _result("alpha", 8, "ok", 5.0), _result("alpha", 64, "ok", 5.0),
        _result("beta", 8, "ok", 2.0), _result("beta", 64, "ok", 9.0),
        _result("gamma", 8, "unavailable"), _result("gamma", 64, "unavailable"),
        _result("delta", 8, "ok", 0.5), _result("delta", 64, "failed"),  # not usable at every size
    ]
    assert select_composition(results) == "alpha"  # 10 us in all against beta's 11
    assert select_composition([r for r in results if r.name in (DEFAULT, "gamma")]) is None
