"""Selection table -> minimal, complete, numerically ordered rule set, and the check that they agree.

A `RuleSet` covers one collective for EVERY communicator size (1 and up) and EVERY message size (0 and
up): contiguous communicator-size blocks, each with message-size rules whose inclusive upper bounds
increase numerically and end with an unbounded rule. That shape is what both libraries can express
exactly: MPICH tries sibling keys in file order (`comm_size<=N`, `avg_msg_size<=N`, then `=any`), Open MPI
takes the largest key <= the actual value (communicator-size sections starting at each block's lower
bound, message rules starting at 0 and at each previous bound + 1). ACCLAiM's published code sorted the
keys as strings (`comm_size<=16` before `comm_size<=4`), so MPICH took the wrong branch; here every
bound is an int and blocks and rules are kept in numeric order by construction and validated.

Minimal: adjacent message sizes with the same winner share one rule, adjacent measured communicator
sizes with identical rules share one block.

Where a bound goes between two measured sizes (`boundary`): the table says nothing about sizes between
two neighbouring measured points `below < above` whose winners differ, so any bound in
[below, above) reproduces the table. tunempi follows ACCLAiM and measures non-power-of-two sizes
between the powers of two; when one of the two neighbours is such an in-between point, the bound is put
AT it (the in-between point is the evidence closest to the crossover). When both are on the power-of-two
grid, the bound is the midpoint in log space, floor(sqrt(below*above)) (1448 between 1024 and 2048):
latency curves are close to straight lines in log-log space, so a crossover is equally likely anywhere
on the log axis, and the log midpoint halves the worst-case ratio between the bound and the true
crossover (at most sqrt(2) on a power-of-two grid, against 2 for either end).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tunempi.collectives import DEFAULT_ALGORITHM  # noqa: F401 (part of the rule-set vocabulary)
from tunempi.errors import UsageError
from tunempi.rules.table import SelectionTable

# DEFAULT_ALGORITHM in a rule means "whatever the library selects by itself"; writers express it as the
# library's own default (MPICH: its default subtree; Open MPI: algorithm 0).


def is_grid_size(size: int) -> bool:
    """True for 0 and powers of two: the regular grid; anything else is an in-between point."""
    return size == 0 or (size > 0 and size & (size - 1) == 0)


def boundary(below: int, above: int) -> int:
    """The largest size that keeps the choice measured at `below`; `above` already takes the next one.

    Always in [below, above - 1], so both measured points keep their own winner.
    """
    if not below < above:
        raise ValueError(f"boundary needs below < above, got {below}, {above}")
    below_on_grid, above_on_grid = is_grid_size(below), is_grid_size(above)
    if not below_on_grid and above_on_grid:
        return below
    if below_on_grid and not above_on_grid:
        return above - 1
    return min(max(math.isqrt(below * above), below), above - 1)


@dataclass(frozen=True)
class MsgRule:
    """Use `algorithm` for messages up to and including `max_bytes` bytes (None: no upper bound).

    Bytes in OSU's convention (see rules.table); writers convert to the library's own measure.
    """

    max_bytes: int | None
    algorithm: str


@dataclass(frozen=True)
class CommBlock:
    """Rules for communicator sizes min_ranks..max_ranks inclusive (max_ranks None: no upper bound).

    `measured_ranks` are the table's communicator sizes this block was built from: writers that must
    scale a bound by the communicator size (total-bytes semantics) are exact at these sizes.
    """

    min_ranks: int
    max_ranks: int | None
    rules: tuple[MsgRule, ...]
    measured_ranks: tuple[int, ...] = ()

    def select(self, msg_bytes: int) -> str:
        for rule in self.rules:
            if rule.max_bytes is None or msg_bytes <= rule.max_bytes:
                return rule.algorithm
        raise AssertionError("unreachable: the last rule is unbounded")  # guaranteed by RuleSet


@dataclass(frozen=True)
class RuleSet:
    """A complete rule set for one collective. Construction validates completeness and ordering."""

    collective: str
    blocks: tuple[CommBlock, ...]

    def __post_init__(self) -> None:
        where = f"rule set for {self.collective}"
        if not self.blocks:
            raise UsageError(f"{where}: no communicator-size blocks")
        if self.blocks[0].min_ranks != 1:
            raise UsageError(f"{where}: first block must start at 1 rank, not {self.blocks[0].min_ranks}")
        if self.blocks[-1].max_ranks is not None:
            raise UsageError(f"{where}: last block must be unbounded")
        for previous, block in zip(self.blocks, self.blocks[1:], strict=False):
            if previous.max_ranks is None or block.min_ranks != previous.max_ranks + 1:
                raise UsageError(f"{where}: blocks not contiguous at {previous.max_ranks} -> {block.min_ranks}")
        for block in self.blocks:
            if block.max_ranks is not None and block.max_ranks < block.min_ranks:
                raise UsageError(f"{where}: empty block {block.min_ranks}..{block.max_ranks}")
            if not block.rules or block.rules[-1].max_bytes is not None:
                raise UsageError(f"{where}: block from {block.min_ranks} ranks must end with an unbounded rule")
            bounds = [rule.max_bytes for rule in block.rules[:-1]]
            numeric = [bound for bound in bounds if bound is not None and bound >= 0]
            if len(numeric) != len(bounds) or numeric != sorted(set(numeric)):
                raise UsageError(f"{where}: message bounds must increase strictly: {bounds}")

    def block_for(self, ranks: int) -> CommBlock:
        for block in self.blocks:
            if block.max_ranks is None or ranks <= block.max_ranks:
                return block
        raise AssertionError("unreachable: the last block is unbounded")

    def select(self, ranks: int, msg_bytes: int) -> str:
        """The algorithm the rule set picks (OSU-convention bytes)."""
        return self.block_for(ranks).select(msg_bytes)

    def algorithms(self) -> list[str]:
        return sorted({rule.algorithm for block in self.blocks for rule in block.rules})

    def single_algorithm(self) -> str | None:
        """The one algorithm used everywhere, or None when the choice depends on size."""
        names = self.algorithms()
        return names[0] if len(names) == 1 else None

    def to_dict(self) -> dict:
        return {
            "collective": self.collective,
            "blocks": [
                {
                    "min_ranks": block.min_ranks,
                    "max_ranks": block.max_ranks,
                    "measured_ranks": list(block.measured_ranks),
                    "rules": [{"max_bytes": r.max_bytes, "algorithm": r.algorithm} for r in block.rules],
                }
                for block in self.blocks
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> RuleSet:
        return cls(
            collective=data["collective"],
            blocks=tuple(
                CommBlock(
                    min_ranks=int(block["min_ranks"]),
                    max_ranks=None if block["max_ranks"] is None else int(block["max_ranks"]),
                    measured_ranks=tuple(int(r) for r in block.get("measured_ranks", ())),
                    rules=tuple(
                        MsgRule(None if r["max_bytes"] is None else int(r["max_bytes"]), r["algorithm"])
                        for r in block["rules"]
                    ),
                )
                for block in data["blocks"]
            ),
        )


def compress_row(row: Iterable[tuple[int, str]]) -> tuple[MsgRule, ...]:
    """Measured (msg_bytes, algorithm) pairs at one communicator size -> minimal message rules."""
    points = sorted(row)
    if not points:
        raise UsageError("no measured message sizes")
    rules: list[MsgRule] = []
    for (size, algorithm), (next_size, next_algorithm) in zip(points, points[1:], strict=False):
        if next_algorithm != algorithm:
            rules.append(MsgRule(boundary(size, next_size), algorithm))
    rules.append(MsgRule(None, points[-1][1]))
    return tuple(rules)


def build_rule_set(table: SelectionTable, collective: str) -> RuleSet:
    """The minimal complete rule set that reproduces `table` for one collective at every measured point."""
    sizes = table.comm_sizes(collective)
    if not sizes:
        raise UsageError(f"the selection table has no points for {collective}; it has {table.collectives()}")
    groups: list[tuple[list[int], tuple[MsgRule, ...]]] = []
    for ranks in sizes:
        rules = compress_row(table.row(collective, ranks))
        if groups and groups[-1][1] == rules:
            groups[-1][0].append(ranks)
        else:
            groups.append(([ranks], rules))
    blocks: list[CommBlock] = []
    min_ranks = 1
    for index, (members, rules) in enumerate(groups):
        if index + 1 < len(groups):
            max_ranks: int | None = boundary(members[-1], groups[index + 1][0][0])
        else:
            max_ranks = None
        blocks.append(CommBlock(min_ranks, max_ranks, rules, tuple(members)))
        if max_ranks is not None:
            min_ranks = max_ranks + 1
    return RuleSet(collective, tuple(blocks))


def build_rule_sets(table: SelectionTable) -> dict[str, RuleSet]:
    """One rule set per collective in the table."""
    return {collective: build_rule_set(table, collective) for collective in table.collectives()}


@dataclass(frozen=True)
class Mismatch:
    collective: str
    ranks: int
    msg_bytes: int
    table_choice: str
    rule_choice: str | None


def find_mismatches(table: SelectionTable, rule_sets: Mapping[str, RuleSet]) -> list[Mismatch]:
    """Every table point where the rule sets pick something else than the table (empty: equivalent)."""
    mismatches = []
    for collective, ranks, msg_bytes, algorithm in table:
        rule_set = rule_sets.get(collective)
        chosen = rule_set.select(ranks, msg_bytes) if rule_set is not None else None
        if chosen != algorithm:
            mismatches.append(Mismatch(collective, ranks, msg_bytes, algorithm, chosen))
    return mismatches


def check_equivalent(table: SelectionTable, rule_sets: Mapping[str, RuleSet]) -> None:
    """Raise UsageError naming the first disagreements when the rule sets do not reproduce the table."""
    mismatches = find_mismatches(table, rule_sets)
    if mismatches:
        shown = "; ".join(
            f"{m.collective} {m.ranks} ranks {m.msg_bytes} B: table {m.table_choice}, rules {m.rule_choice}"
            for m in mismatches[:5]
        )
        raise UsageError(f"rule set disagrees with the table at {len(mismatches)} point(s): {shown}")
