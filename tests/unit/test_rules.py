from __future__ import annotations

import random

import pytest

from tunempi.errors import UsageError
from tunempi.rules import (
    DEFAULT_ALGORITHM,
    INTERPOLATED,
    LIBRARY,
    MEASURED,
    CommBlock,
    MsgRule,
    RuleSet,
    ScaledChoice,
    SelectionTable,
    between_rows,
    boundary,
    build_rule_set,
    build_rule_sets,
    check_equivalent,
    find_mismatches,
)

ALGORITHMS = ("recursive_doubling", "ring", "reduce_scatter_allgather", "tree")


@pytest.mark.parametrize(
    ("below", "above", "expected"),
    [
        (1024, 2048, 1448),  # both on the grid: log midpoint floor(sqrt(1024*2048))
        (1024, 1536, 1535),  # the in-between point takes the new choice from itself on
        (1536, 2048, 1536),  # ... or keeps the old choice up to itself
        (0, 1, 0),
        (8, 9, 8),
        (3072, 6144, 4344),  # two in-between points: log midpoint again
        (4, 8, 5),
        (2, 4, 2),
    ],
)
def test_boundary(below: int, above: int, expected: int) -> None:
    assert boundary(below, above) == expected
    assert below <= boundary(below, above) < above


def test_boundary_rejects_unordered() -> None:
    with pytest.raises(ValueError):
        boundary(8, 8)


def test_adjacent_equal_choices_merge_and_bounds_are_numeric() -> None:
    sizes = [8, 16, 1024, 1536, 2048, 65536, 98304, 131072]
    choices = ["a", "a", "a", "b", "b", "b", "c", "c"]
    table = SelectionTable.from_items(("allreduce", 4, s, c) for s, c in zip(sizes, choices, strict=True))
    rule_set = build_rule_set(table, "allreduce")
    assert rule_set.blocks[1] == CommBlock(4, 4, (MsgRule(1535, "a"), MsgRule(98303, "b"), MsgRule(None, "c")), (4,))


def test_comm_sizes_merge_where_identical_and_stay_in_numeric_order() -> None:
    # 4 and 16 would swap under a string sort ("16" < "4"): the bug in ACCLAiM's published code.
    items = []
    for ranks, algorithm in ((2, "a"), (4, "a"), (12, "b"), (16, "b"), (32, "c"), (64, "c")):
        items += [("bcast", ranks, size, algorithm) for size in (8, 1024)]
    rule_set = build_rule_set(SelectionTable.from_items(items), "bcast")
    assert [(b.min_ranks, b.max_ranks, b.measured_ranks) for b in rule_set.blocks] == [
        (1, 1, ()),  # below the smallest measured size: the library's own choice
        (2, 4, (2, 4)),  # 3 between two sizes that agree: interpolated
        (5, 11, ()),  # between 4 (a) and 12 (b): they disagree, so the library's
        (12, 16, (12, 16)),
        (17, 31, ()),
        (32, 64, (32, 64)),
        (65, None, ()),  # above the largest: the library's
    ]
    assert rule_set.select(4, 8) == "a" and rule_set.select(16, 8) == "b" and rule_set.select(64, 8) == "c"
    assert rule_set.select(1000, 8) == rule_set.select(8, 8) == rule_set.select(1, 8) == DEFAULT_ALGORITHM


def test_a_rule_acts_only_where_it_has_evidence() -> None:
    """Tuned at 2 ranks only (what `make demo` does): every other communicator size keeps the library's
    choice; before issue 57 the 2-rank winner reached a 64- or 512-rank communicator."""
    table = SelectionTable.from_items(("alltoall", 2, size, "pairwise") for size in (8, 1024, 49152))
    rule_set = build_rule_set(table, "alltoall")
    assert rule_set.select(2, 8) == "pairwise"
    for ranks in (1, 3, 5, 64, 512):
        assert rule_set.select(ranks, 8) == DEFAULT_ALGORITHM, ranks
    assert [(c.min_ranks, c.max_ranks, c.basis) for c in rule_set.coverage()] == [
        (1, 1, LIBRARY), (2, 2, MEASURED), (3, None, LIBRARY)]


def test_between_two_measured_sizes_only_their_common_winner_is_interpolated() -> None:
    items = [("allreduce", 2, 8, "a"), ("allreduce", 2, 1024, "b"), ("allreduce", 2, 65536, "c"),
             ("allreduce", 8, 8, "a"), ("allreduce", 8, 1024, "d"), ("allreduce", 8, 65536, "c")]
    rule_set = build_rule_set(SelectionTable.from_items(items), "allreduce")
    assert [rule_set.select(5, size) for size in (8, 1024, 65536)] == ["a", DEFAULT_ALGORITHM, "c"]
    assert [(c.min_ranks, c.max_ranks, c.basis) for c in rule_set.coverage()] == [
        (1, 1, LIBRARY), (2, 2, MEASURED), (3, 7, INTERPOLATED), (8, 8, MEASURED), (9, None, LIBRARY)]
    # The message bounds of the interpolated block are the neighbours' own (either side's crossover).
    assert between_rows((MsgRule(90, "a"), MsgRule(None, "b")), (MsgRule(2000, "a"), MsgRule(None, "b"))) == (
        MsgRule(90, "a"), MsgRule(2000, DEFAULT_ALGORITHM), MsgRule(None, "b"))
    written = rule_set.to_dict()["blocks"][2]
    assert written["coverage"] == [[3, 7, INTERPOLATED]] and RuleSet.from_dict(rule_set.to_dict()) == rule_set



def test_an_extension_acts_above_the_largest_measured_size_and_says_which_policy() -> None:
    """Issue 57 part 2: above the largest measured size the policy's picks (the library's own where it names
    the default), coverage `extended` with the policy's name, kept through the manifest's dict; before, every
    size above was the library's whatever the policy said."""
    from tunempi.rules.ruleset import EXTENDED, Extension

    items = [("bcast", ranks, size, "binomial") for ranks in (64, 128) for size in (8, 1024, 65536)]
    extension = Extension("gaining", ((8, "binomial"), (1024, DEFAULT_ALGORITHM), (65536, "binomial")))
    rule_set = build_rule_set(SelectionTable.from_items(items), "bcast", extension)
    assert [rule_set.select(512, size) for size in (8, 1024, 65536)] == ["binomial", DEFAULT_ALGORITHM, "binomial"]
    assert rule_set.select(128, 1024) == "binomial"  # the measured size keeps its own rules
    assert [(c.min_ranks, c.max_ranks, c.basis, c.policy) for c in rule_set.coverage()] == [
        (1, 63, LIBRARY, ""), (64, 64, MEASURED, ""), (65, 127, INTERPOLATED, ""), (128, 128, MEASURED, ""),
        (129, None, EXTENDED, "gaining")]
    written = rule_set.to_dict()
    assert written["blocks"][-1]["extended_by"] == "gaining" and "extended_by" not in written["blocks"][0]
    assert RuleSet.from_dict(written) == rule_set


def test_an_extension_with_the_rules_of_the_largest_size_still_is_its_own_block() -> None:
    """Extended rules equal to the largest measured size's are not merged into its block (which would read
    as interpolated), and an extension that names only the default leaves the sizes above to the library."""
    from tunempi.rules.ruleset import EXTENDED, Extension

    table = SelectionTable.from_items([("allreduce", 8, 8, "ring"), ("allreduce", 16, 8, "ring")])
    same = build_rule_set(table, "allreduce", Extension("gaining", ((8, "ring"),)))
    assert [(c.min_ranks, c.max_ranks, c.basis) for c in same.coverage()][-1] == (17, None, EXTENDED)
    none = build_rule_set(table, "allreduce", Extension("gaining", ((8, DEFAULT_ALGORITHM),)))
    assert none == build_rule_set(table, "allreduce") and none.select(1000, 8) == DEFAULT_ALGORITHM
    assert [(c.min_ranks, c.max_ranks, c.basis) for c in none.coverage()][-1] == (17, None, LIBRARY)

def random_table(rng: random.Random) -> SelectionTable:
    """Power-of-two and in-between sizes, several layouts, choices with runs (so merging matters)."""
    items = []
    collectives = rng.sample(["allreduce", "bcast", "allgather", "alltoall"], rng.randint(1, 3))
    layouts = {(nodes, ppn) for nodes in (1, 2, 4, 8) for ppn in (1, 2, 4, 12) if rng.random() < 0.5}
    layouts.add((1, 2))
    for collective in collectives:
        for nodes, ppn in sorted(layouts):
            algorithm = rng.choice(ALGORITHMS)
            size = 1
            while size <= 1 << 20:
                for point in (size, size + size // 2) if size >= 4 else (size,):
                    if rng.random() < 0.3:
                        algorithm = rng.choice(ALGORITHMS)
                    items.append(ScaledChoice(collective, nodes, ppn, point, algorithm))
                size *= 2
            if rng.random() < 0.3:
                items.append(ScaledChoice(collective, nodes, ppn, 0, rng.choice(ALGORITHMS)))
    return SelectionTable.from_scaled(items, preferred_ppn=rng.choice([None, 2, 4]))


@pytest.mark.parametrize("seed", range(60))
def test_rule_set_reproduces_random_tables_at_every_point(seed: int) -> None:
    rng = random.Random(seed)
    table = random_table(rng)
    rule_sets = build_rule_sets(table)
    assert find_mismatches(table, rule_sets) == []
    check_equivalent(table, rule_sets)
    for rule_set in rule_sets.values():  # minimal: no mergeable neighbours remain
        for block in rule_set.blocks:
            algorithms = [rule.algorithm for rule in block.rules]
            assert all(a != b for a, b in zip(algorithms, algorithms[1:], strict=False))
        assert all(a.rules != b.rules for a, b in zip(rule_set.blocks, rule_set.blocks[1:], strict=False))
        assert RuleSet.from_dict(rule_set.to_dict()) == rule_set


def test_equivalence_check_catches_a_wrong_rule() -> None:
    table = SelectionTable.from_items(
        [("allreduce", 2, 1024, "recursive_doubling"), ("allreduce", 2, 2048, "ring")]
    )
    good = build_rule_sets(table)
    check_equivalent(table, good)
    wrong = {"allreduce": RuleSet("allreduce", (CommBlock(1, None, (MsgRule(4096, "recursive_doubling"),
                                                                    MsgRule(None, "ring"))),))}
    mismatches = find_mismatches(table, wrong)
    assert [(m.msg_bytes, m.table_choice, m.rule_choice) for m in mismatches] == [(2048, "ring", "recursive_doubling")]
    with pytest.raises(UsageError, match="2048 B: table ring, rules recursive_doubling"):
        check_equivalent(table, wrong)


@pytest.mark.parametrize(
    "blocks",
    [
        (CommBlock(2, None, (MsgRule(None, "a"),)),),  # does not start at 1 rank
        (CommBlock(1, 4, (MsgRule(None, "a"),)),),  # bounded last block
        (CommBlock(1, 4, (MsgRule(None, "a"),)), CommBlock(6, None, (MsgRule(None, "a"),))),  # gap
        (CommBlock(1, None, (MsgRule(16, "a"), MsgRule(4, "b"), MsgRule(None, "c"))),),  # unordered
        (CommBlock(1, None, (MsgRule(16, "a"),)),),  # incomplete: no unbounded rule
    ],
)
def test_rule_set_rejects_incomplete_or_unordered(blocks: tuple[CommBlock, ...]) -> None:
    with pytest.raises(UsageError):
        RuleSet("allreduce", blocks)


def test_from_scaled_prefers_the_allocations_ppn_then_fuller_nodes() -> None:
    choices = [
        ScaledChoice("allreduce", 4, 2, 64, "ring"),
        ScaledChoice("allreduce", 2, 4, 64, "recursive_doubling"),
        ScaledChoice("allreduce", 8, 1, 64, "tree"),
    ]
    assert SelectionTable.from_scaled(choices).choices == {("allreduce", 8, 64): "recursive_doubling"}
    assert SelectionTable.from_scaled(choices, preferred_ppn=2).choices == {("allreduce", 8, 64): "ring"}


def test_table_rejects_conflicts_and_unknown_collectives() -> None:
    with pytest.raises(UsageError, match="conflicting"):
        SelectionTable.from_items([("bcast", 2, 8, "binomial"), ("bcast", 2, 8, "smp")])
    with pytest.raises(UsageError, match="valid"):
        SelectionTable.from_items([("allreducex", 2, 8, "ring")])
    with pytest.raises(UsageError, match="no points for bcast"):
        build_rule_set(SelectionTable.from_items([("allreduce", 2, 8, "ring")]), "bcast")
