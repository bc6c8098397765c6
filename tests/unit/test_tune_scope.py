from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.errors import UsageError
from tunempi.space import Cell
from tunempi.tune.files import rule_sets_for, selection_table
from tunempi.tune.scope import Scale, candidate_algorithms, feature_space, message_sizes, sub_scales


def test_single_node_scales_are_powers_of_two_and_the_allocation_itself() -> None:
    assert [s.ranks for s in sub_scales(ranks=4)] == [2, 4]
    assert [s.ranks for s in sub_scales(ranks=2)] == [2]
    assert [s.ranks for s in sub_scales(ranks=12)] == [2, 4, 8, 12]
    assert all(s.nodes == 1 and s.ppn == s.ranks for s in sub_scales(ranks=12))


def test_multi_node_scales_cross_node_counts_and_ppn_including_own_values() -> None:
    scales = sub_scales(nodes=3, ppn=12)
    assert sorted({s.nodes for s in scales}) == [1, 2, 3]
    assert sorted({s.ppn for s in scales}) == [1, 2, 4, 8, 12]
    assert Scale(1, 1) not in scales  # one process: nothing to tune
    assert Scale(3, 12) in scales and Scale(2, 1) in scales


def test_scales_reject_nonsense() -> None:
    with pytest.raises(UsageError):
        sub_scales(ranks=1)
    with pytest.raises(UsageError):
        sub_scales(nodes=2)  # neither ppn nor ranks


def test_message_sizes_have_powers_of_two_and_in_between_points_in_whole_elements() -> None:
    assert message_sizes(1024, min_msg=4) == [4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    assert message_sizes(64, min_msg=4, in_between=False) == [4, 8, 16, 32, 64]
    with pytest.raises(UsageError):
        message_sizes(2, min_msg=1)  # no size is a whole number of 4-byte elements


def test_candidates_put_default_first_and_drop_excluded() -> None:
    assert candidate_algorithms(["ring", "rd", "ring"], exclude=["rd"]) == (DEFAULT_ALGORITHM, "ring")
    assert candidate_algorithms(["ring"], include_default=False) == ("ring",)


def test_feature_space_cells_cover_every_scale_and_size() -> None:
    space = feature_space("allreduce", [Scale(1, 2), Scale(1, 4)], [4, 8, 12], ("default", "ring"))
    assert len(space.cells) == 6
    assert Cell("allreduce", 4, 1, 4, 12) in space


def test_rule_sets_reproduce_a_tuned_selection_at_every_grid_and_in_between_point() -> None:
    sizes = message_sizes(1 << 20)
    algorithms = ["recursive_doubling", DEFAULT_ALGORITHM, "ring", "rabenseifner"]
    selection = {}
    for ranks in (2, 4):
        for i, size in enumerate(sizes):
            selection[Cell("allreduce", ranks, 1, ranks, size)] = algorithms[(i // 5 + ranks) % len(algorithms)]
    rule_sets = rule_sets_for(selection_table(selection))  # also runs check_equivalent
    for cell, algorithm in selection.items():
        assert rule_sets["allreduce"].select(cell.ranks, cell.msg_bytes) == algorithm


def test_a_tune_refuses_a_distribution_for_a_collective_it_does_not_take(tmp_path: Path) -> None:
    """issue 40: --distribution names vector collectives of this tune only (before anything is launched)."""
    from tunempi.tune.job import TuneOptions, TunePlan

    for collectives, distributions, said in (("allreduce", {"allreduce": "skewed"}, "vector collectives"),
                                             ("alltoallv", {"gatherv": "sparse"}, "does not take"),
                                             ("alltoallv", {"alltoallv": "lumpy"}, "unknown count distribution")):
        with pytest.raises(UsageError, match=said):
            TunePlan.of(TuneOptions(out=tmp_path / "tuned", collectives=collectives, ranks=2,
                                    distributions=distributions))
