from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.mpi.openmpi import select_openmpi
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.writers.dynamic_rules import (
    COLLECTIVE_IDS,
    library_msg_size,
    read_dynamic_rules,
    write_dynamic_rules,
)

GOLDEN = Path(__file__).parents[1] / "golden"
# Open MPI 5.0.11 ids (ompi_info --param coll tuned --level 9); in tunempi the vendor adapter supplies them.
IDS = {
    "allreduce": {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4,
                  "segmented_ring": 5, "rabenseifner": 6},
    "allgather": {"linear": 1, "bruck": 2, "recursive_doubling": 3, "ring": 4, "neighbor": 5, "two_proc": 6},
    "alltoall": {"linear": 1, "pairwise": 2, "modified_bruck": 3, "linear_sync": 4, "two_proc": 5},
    "bcast": {"basic_linear": 1, "chain": 2, "pipeline": 3, "split_binary_tree": 4, "binary_tree": 5,
              "binomial": 6, "knomial": 7, "scatter_allgather": 8, "scatter_allgather_ring": 9},
    "barrier": {"linear": 1, "double_ring": 2, "recursive_doubling": 3, "bruck": 4},
}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("TUNEMPI_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def example_table() -> SelectionTable:
    items = []
    for ranks in (2, 4, 8, 12, 16):
        for size in (4, 64, 1024, 1536, 2048, 16384, 24576, 32768, 262144):
            items.append(("allreduce", ranks, size, "recursive_doubling" if size <= 16384 else "ring"))
            items.append(("allgather", ranks, size, "bruck" if size * ranks <= 8192 else "ring"))
            items.append(("alltoall", ranks, size, "modified_bruck" if size <= 256 else "pairwise"))
            items.append(("bcast", ranks, size, "binomial" if ranks < 8 else "knomial"))
    return SelectionTable.from_items(items)


def test_golden_openmpi_file() -> None:
    check_golden("openmpi_example.rules", write_dynamic_rules(build_rule_sets(example_table()), IDS))


def test_file_reads_back_and_selects_the_table_choice_everywhere() -> None:
    table = example_table()
    rules = read_dynamic_rules(write_dynamic_rules(build_rule_sets(table), IDS))
    assert sorted(rules) == sorted(COLLECTIVE_IDS[c] for c in table.collectives())
    for collective, ranks, msg_bytes, algorithm in table:
        size = library_msg_size(collective, msg_bytes, ranks)
        assert select_openmpi(rules, collective, ranks, size) == IDS[collective][algorithm], (collective, ranks, msg_bytes)


@pytest.mark.parametrize("seed", range(15))
def test_random_tables_round_trip(seed: int) -> None:
    rng = random.Random(seed)
    items = []
    for collective in ("allreduce", "allgather", "alltoall"):
        algorithms = sorted(IDS[collective])
        for ranks in sorted(rng.sample([2, 3, 4, 6, 8, 12, 16, 32, 64], 5)):
            choice = rng.choice(algorithms)
            for size in sorted({1 << e for e in range(20)} | {3 << e for e in range(19)}):
                if rng.random() < 0.2:
                    choice = rng.choice(algorithms)
                items.append((collective, ranks, size, choice))
    table = SelectionTable.from_items(items)
    rules = read_dynamic_rules(write_dynamic_rules(build_rule_sets(table), IDS))
    for collective, ranks, msg_bytes, algorithm in table:
        size = library_msg_size(collective, msg_bytes, ranks)
        assert select_openmpi(rules, collective, ranks, size) == IDS[collective][algorithm]


def test_threshold_lands_on_the_right_side_in_open_mpi_terms() -> None:
    rule_sets = build_rule_sets(example_table())
    rules = read_dynamic_rules(write_dynamic_rules(rule_sets, IDS))
    for collective, rule_set in rule_sets.items():
        for block in rule_set.blocks:
            for ranks in block.measured_ranks:
                for rule, following in zip(block.rules, block.rules[1:], strict=False):
                    at = library_msg_size(collective, rule.max_bytes, ranks)
                    assert select_openmpi(rules, collective, ranks, at) == IDS[collective][rule.algorithm]
                    assert select_openmpi(rules, collective, ranks, at + 1) == IDS[collective][following.algorithm]


def test_message_size_semantics() -> None:
    assert library_msg_size("allreduce", 4096, 8) == 4096  # dtype size x count
    assert library_msg_size("alltoall", 4096, 8) == 32768  # dtype size x count x comm size
    assert library_msg_size("allgather", 4096, 8) == 32768
    assert library_msg_size("barrier", 0, 8) == 0


def test_sections_start_at_zero_and_increase() -> None:
    rules = read_dynamic_rules(write_dynamic_rules(build_rule_sets(example_table()), IDS))
    for sections in rules.values():
        sizes = [section.comm_size for section in sections]
        assert sizes[0] == 1 and sizes == sorted(set(sizes))
        for section in sections:
            assert section.rules[0].msg_size == 0
            assert [r.msg_size for r in section.rules] == sorted({r.msg_size for r in section.rules})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\n2\n1\n2\n1\n16 3 0 0\n", "first message size"),
        ("1\n2\n1\n2\n2\n0 3 0 0\n0 4 0 0\n", "must increase"),
        ("1\n2\n2\n8\n1\n0 3 0 0\n4\n1\n0 3 0 0\n", "communicator sizes must increase"),
        ("1\n2\n1\n2\n1\n0 3 0\n", "ends early"),
        ("1\n2\n1\n2\n1\n0 3 0 0\n7\n", "unread"),
        ("1\n22\n0\n", "collective id"),
        ("1\n2\n1\n2\n1\n0 x 0 0\n", "non-negative integer"),
        ("rule-file-version-2\n1\n2\n1\n2\n1\n0 3 0 0 4\n", "version 2"),
    ],
)
def test_reader_refuses_what_open_mpi_would_silently_drop(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        read_dynamic_rules(text)


def test_reader_accepts_comments_and_version_1_header() -> None:
    rules = read_dynamic_rules("rule-file-version-1\n# a comment\n1 # one\n2\n1\n2\n2\n0 3 0 0\n100 4 0 0 # x\n")
    assert select_openmpi(rules, "allreduce", 2, 99) == 3
    assert select_openmpi(rules, "allreduce", 2, 100) == 4
    assert select_openmpi(rules, "allreduce", 1, 100) == 4  # below the first section: Open MPI uses it


def test_size_dependent_rules_are_refused_where_open_mpi_has_no_size() -> None:
    table = SelectionTable.from_items([("barrier", 4, 0, "bruck"), ("barrier", 4, 8, "linear")])
    with pytest.raises(UsageError, match="without a message size"):
        write_dynamic_rules(build_rule_sets(table), IDS)
    single = SelectionTable.from_items([("barrier", 4, 0, "bruck"), ("barrier", 16, 0, "linear")])
    rules = read_dynamic_rules(write_dynamic_rules(build_rule_sets(single), IDS))
    assert select_openmpi(rules, "barrier", 4, 0) == 4 and select_openmpi(rules, "barrier", 16, 0) == 1


def test_unknown_algorithm_names_the_valid_ones() -> None:
    table = SelectionTable.from_items([("allreduce", 4, 8, "rabenseifnr")])
    with pytest.raises(UsageError, match="known: basic_linear"):
        write_dynamic_rules(build_rule_sets(table), IDS)


def test_default_rules_fall_back_to_the_fixed_decision() -> None:
    table = SelectionTable.from_items([("allreduce", 2, 8, "default"), ("allreduce", 2, 65536, "ring")])
    rules = read_dynamic_rules(write_dynamic_rules(build_rule_sets(table), IDS))
    assert select_openmpi(rules, "allreduce", 2, 8) == 0  # 0: Open MPI's own fixed decision
    assert select_openmpi(rules, "allreduce", 2, 65536) == IDS["allreduce"]["ring"]
