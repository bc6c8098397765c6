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

A rule acts only where it has evidence (issue 57): a measured communicator size gets its own rules; the
sizes between two measured ones get a rule only where both neighbours measured the same winner for that
message range (interpolated), the library's own choice elsewhere; sizes below the smallest and above the
largest measured one keep the library's own choice (`DEFAULT_ALGORITHM`). `RuleSet.coverage` says, per
range of communicator sizes, which it is, or `extended`: above the largest measured size, an `Extension`'s
rules (issue 57 part 2: tune/files.py derives them by the extension policy, `sim.extend.EXTENSION_POLICY`,
from its measurements; this package holds only their result and the policy's name).

Processes per node: where the table keeps a size's layouts apart (SelectionTable.by_ppn: they measured
different winners, and the library can key on ppn), that size's block holds each layout's own rules
(`CommBlock.by_ppn`) and its `rules` are the library's own choice, for every ppn nobody measured there. Its
neighbours interpolate towards it only where all of its layouts agree.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tunempi.collectives import DEFAULT_ALGORITHM
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
class PpnRules:
    """The rules of one measured layout of a block's size: communicators of `ppn` processes per node."""

    ppn: int
    rules: tuple[MsgRule, ...]


@dataclass(frozen=True)
class CommBlock:
    """Rules for communicator sizes min_ranks..max_ranks inclusive (max_ranks None: no upper bound).

    `measured_ranks` are the table's communicator sizes this block was built from: writers that must
    scale a bound by the communicator size (total-bytes semantics) are exact at these sizes. The block's
    other sizes are interpolated (some rule is not the library's default) or the library's own (all are).

    `by_ppn` (one measured size only): each measured layout's own rules, by processes per node, in increasing
    ppn; `rules` then act at every other ppn (the library's own choice, as build_rule_set makes them).
    """

    min_ranks: int
    max_ranks: int | None
    rules: tuple[MsgRule, ...]
    measured_ranks: tuple[int, ...] = ()
    by_ppn: tuple[PpnRules, ...] = ()
    #: The extension policy that named this block's rules above the largest measured size ("": none).
    extended_by: str = ""

    def rules_at(self, ppn: int | None = None) -> tuple[MsgRule, ...]:
        """The rules a communicator of `ppn` processes per node takes (None: not known, the block's `rules`)."""
        return next((variant.rules for variant in self.by_ppn if variant.ppn == ppn), self.rules)

    def select(self, msg_bytes: int, ppn: int | None = None) -> str:
        return select_rule(self.rules_at(ppn), msg_bytes)

    def all_rules(self) -> tuple[tuple[MsgRule, ...], ...]:
        """The block's rules and each layout's own."""
        return (self.rules, *(variant.rules for variant in self.by_ppn))

    def rules_by_ppn(self) -> list[tuple[int | None, tuple[MsgRule, ...]]]:
        """(ppn, rules) of each measured layout, then (None, the rules at every other ppn); just (None, rules)
        where the block does not key on ppn. For showing a block as the files hold it."""
        return [*((variant.ppn, variant.rules) for variant in self.by_ppn), (None, self.rules)]

    def library_only(self) -> bool:
        """True where every rule leaves the choice to the library."""
        return all(rule.algorithm == DEFAULT_ALGORITHM for rules in self.all_rules() for rule in rules)

    def coverage(self) -> list[Coverage]:
        """This block's sizes as ranges, each measured, interpolated or the library's own."""
        other = LIBRARY if self.library_only() else EXTENDED if self.extended_by else INTERPOLATED
        policy = self.extended_by if other == EXTENDED else ""
        ranges: list[Coverage] = []
        start = self.min_ranks
        for ranks in sorted(set(self.measured_ranks)):
            if ranks > start:
                ranges.append(Coverage(start, ranks - 1, other, policy))
            ranges.append(Coverage(ranks, ranks, MEASURED))
            start = ranks + 1
        if self.max_ranks is None or start <= self.max_ranks:
            ranges.append(Coverage(start, self.max_ranks, other, policy))
        return ranges


#: How a range of communicator sizes got its rules (`RuleSet.coverage`).
MEASURED, INTERPOLATED, LIBRARY = "measured", "interpolated", "library"
EXTENDED = "extended"


@dataclass(frozen=True)
class Coverage:
    """Communicator sizes min_ranks..max_ranks (None: unbounded) and how their rules were made: `measured`
    there, `interpolated` between two measured sizes whose winners agree, `extended` above the largest
    measured size by the extension `policy`, or left to the `library`."""

    min_ranks: int
    max_ranks: int | None
    basis: str
    policy: str = ""

    def contains(self, ranks: int) -> bool:
        return self.min_ranks <= ranks and (self.max_ranks is None or ranks <= self.max_ranks)

    def text(self) -> str:
        if self.max_ranks is None:
            return f"{self.min_ranks}+"
        return str(self.min_ranks) if self.min_ranks == self.max_ranks else f"{self.min_ranks}..{self.max_ranks}"


def ranges_text(ranges: Iterable[Coverage]) -> str:
    """'2..4, 8' for the given ranges, neighbours joined whatever their basis."""
    spans: list[list[int | None]] = []
    for item in ranges:
        if spans and spans[-1][1] is not None and spans[-1][1] + 1 == item.min_ranks:
            spans[-1][1] = item.max_ranks
        else:
            spans.append([item.min_ranks, item.max_ranks])
    return ", ".join(Coverage(int(low or 0), high, "").text() for low, high in spans)


def select_rule(rules: tuple[MsgRule, ...], msg_bytes: int) -> str:
    """The algorithm of the first rule whose bound holds `msg_bytes` (the last rule is unbounded)."""
    for rule in rules:
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
            if block.by_ppn:
                ppns = [variant.ppn for variant in block.by_ppn]
                if block.max_ranks != block.min_ranks or ppns != sorted(set(ppns)) or any(
                        ppn < 1 or block.min_ranks % ppn for ppn in ppns):
                    raise UsageError(f"{where}: rules by processes per node {ppns} need one communicator size they "
                                     f"divide, in increasing order, not {block.min_ranks}..{block.max_ranks}")
            for rules in block.all_rules():
                if not rules or rules[-1].max_bytes is not None:
                    raise UsageError(f"{where}: block from {block.min_ranks} ranks must end with an unbounded rule")
                bounds = [rule.max_bytes for rule in rules[:-1]]
                numeric = [bound for bound in bounds if bound is not None and bound >= 0]
                if len(numeric) != len(bounds) or numeric != sorted(set(numeric)):
                    raise UsageError(f"{where}: message bounds must increase strictly: {bounds}")

    def block_for(self, ranks: int) -> CommBlock:
        for block in self.blocks:
            if block.max_ranks is None or ranks <= block.max_ranks:
                return block
        raise AssertionError("unreachable: the last block is unbounded")

    def select(self, ranks: int, msg_bytes: int, ppn: int | None = None) -> str:
        """The algorithm the rule set picks (OSU-convention bytes) on a communicator of `ranks` ranks, `ppn` of
        them per node (None: not known; a size keyed on ppn then gives the rules of a ppn nobody measured)."""
        return self.block_for(ranks).select(msg_bytes, ppn)

    def algorithms(self) -> list[str]:
        return sorted({rule.algorithm for block in self.blocks for rules in block.all_rules() for rule in rules})

    def keys_on_ppn(self) -> bool:
        """Whether some size's layouts keep their own rules (a file must then key on processes per node)."""
        return any(block.by_ppn for block in self.blocks)

    def measured_ppns(self, ranks: int) -> tuple[int, ...]:
        """The processes per node whose own rules act at `ranks` (empty: its rules act at every ppn)."""
        return tuple(variant.ppn for variant in self.block_for(ranks).by_ppn)

    def coverage(self) -> list[Coverage]:
        """Every communicator size from 1 up, as ranges: measured, interpolated or the library's own."""
        merged: list[Coverage] = []
        for item in (c for block in self.blocks for c in block.coverage()):
            last = merged[-1] if merged else None
            if last is not None and last.basis == item.basis and item.basis != MEASURED:
                merged[-1] = Coverage(last.min_ranks, item.max_ranks, item.basis, item.policy)
            else:
                merged.append(item)
        return merged

    def measured_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({ranks for block in self.blocks for ranks in block.measured_ranks}))

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
                    # derived, for a reader of the manifest (from_dict ignores it)
                    "coverage": [[c.min_ranks, c.max_ranks, c.basis] for c in block.coverage()],
                    # only where a policy extended the block: other manifests stay as they were
                    **({"extended_by": block.extended_by} if block.extended_by else {}),
                    "rules": _rules_dict(block.rules),
                    # only where layouts of the size are kept apart: other manifests stay as they were
                    **({"by_ppn": [{"ppn": v.ppn, "rules": _rules_dict(v.rules)} for v in block.by_ppn]}
                       if block.by_ppn else {}),
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
                    extended_by=str(block.get("extended_by", "")),
                    rules=_rules_from(block["rules"]),
                    by_ppn=tuple(PpnRules(int(v["ppn"]), _rules_from(v["rules"])) for v in block.get("by_ppn", ())),
                )
                for block in data["blocks"]
            ),
        )


def _rules_dict(rules: tuple[MsgRule, ...]) -> list[dict]:
    return [{"max_bytes": r.max_bytes, "algorithm": r.algorithm} for r in rules]


def _rules_from(data: Iterable[Mapping]) -> tuple[MsgRule, ...]:
    return tuple(MsgRule(None if r["max_bytes"] is None else int(r["max_bytes"]), r["algorithm"]) for r in data)


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


LIBRARY_RULES: tuple[MsgRule, ...] = (MsgRule(None, DEFAULT_ALGORITHM),)


def between_rows(lower: tuple[MsgRule, ...], upper: tuple[MsgRule, ...]) -> tuple[MsgRule, ...]:
    """Message rules for the communicator sizes between two measured ones: the winner where both measured
    the same one for a message range, the library's own choice where they differ."""
    bounds = sorted({rule.max_bytes for rule in (*lower, *upper) if rule.max_bytes is not None})
    rules: list[MsgRule] = []
    for bound in [*bounds, None]:
        at = bound if bound is not None else (bounds[-1] + 1 if bounds else 0)
        low, high = select_rule(lower, at), select_rule(upper, at)
        algorithm = low if low == high else DEFAULT_ALGORITHM
        if rules and rules[-1].algorithm == algorithm:
            rules[-1] = MsgRule(bound, algorithm)
        else:
            rules.append(MsgRule(bound, algorithm))
    return tuple(rules)


@dataclass(frozen=True)
class Extension:
    """What an extension policy names above the largest measured communicator size of one collective:
    (msg_bytes, algorithm) at the message sizes measured there, `DEFAULT_ALGORITHM` where it leaves the
    library's choice. tune/files.py derives it; this package knows no policy."""

    policy: str
    row: tuple[tuple[int, str], ...]

    def acts(self) -> bool:
        """True where it names some algorithm (else the sizes above stay the library's own)."""
        return any(algorithm != DEFAULT_ALGORITHM for _, algorithm in self.row)


def build_rule_set(table: SelectionTable, collective: str, extension: Extension | None = None) -> RuleSet:
    """The minimal complete rule set that reproduces `table` for one collective at every measured point,
    and acts nowhere else without evidence: interpolated between measured communicator sizes where both
    neighbours agree, the library's own choice below, above and wherever they disagree; above the largest
    measured size, `extension`'s rules where it names some algorithm (coverage `extended`)."""
    sizes = table.comm_sizes(collective)
    if not sizes:
        raise UsageError(f"the selection table has no points for {collective}; it has {table.collectives()}")
    # A size whose layouts are kept apart: each layout's own rules, the library's at every other ppn; towards
    # its neighbours it counts with the rules all of its layouts agree on.
    layouts = {ranks: tuple(PpnRules(ppn, compress_row(table.row(collective, ranks, ppn)))
                            for ppn in table.ppns(collective, ranks)) for ranks in sizes}
    rows = {ranks: compress_row(table.row(collective, ranks)) if not layouts[ranks]
            else functools.reduce(between_rows, (v.rules for v in layouts[ranks])) for ranks in sizes}
    spans: list[CommBlock] = []
    if sizes[0] > 1:
        spans.append(CommBlock(1, sizes[0] - 1, LIBRARY_RULES))
    for ranks, following in zip(sizes, [*sizes[1:], None], strict=True):
        if layouts[ranks]:
            spans.append(CommBlock(ranks, ranks, LIBRARY_RULES, (ranks,), by_ppn=layouts[ranks]))
        else:
            spans.append(CommBlock(ranks, ranks, rows[ranks], (ranks,)))
        if following is None and extension is not None and extension.acts():
            spans.append(CommBlock(ranks + 1, None, compress_row(extension.row), extended_by=extension.policy))
        elif following is None:
            spans.append(CommBlock(ranks + 1, None, LIBRARY_RULES))
        elif following > ranks + 1:
            spans.append(CommBlock(ranks + 1, following - 1, between_rows(rows[ranks], rows[following])))
    blocks: list[CommBlock] = []
    for span in spans:  # minimal: neighbours with the same rules share one block (a block keyed on ppn: none)
        if blocks and blocks[-1].rules == span.rules and not span.extended_by and not blocks[-1].by_ppn and not span.by_ppn:
            last = blocks[-1]
            blocks[-1] = CommBlock(last.min_ranks, span.max_ranks, last.rules,
                                   last.measured_ranks + span.measured_ranks)
        else:
            blocks.append(span)
    return RuleSet(collective, tuple(blocks))


def build_rule_sets(table: SelectionTable, extensions: Mapping[str, Extension] | None = None) -> dict[str, RuleSet]:
    """One rule set per collective in the table; `extensions`: per collective, its rules above the largest
    measured size."""
    return {collective: build_rule_set(table, collective, (extensions or {}).get(collective))
            for collective in table.collectives()}


@dataclass(frozen=True)
class Mismatch:
    collective: str
    ranks: int
    msg_bytes: int
    table_choice: str
    rule_choice: str | None
    ppn: int | None = None  # a layout's own point (SelectionTable.by_ppn)


def find_mismatches(table: SelectionTable, rule_sets: Mapping[str, RuleSet]) -> list[Mismatch]:
    """Every table point where the rule sets pick something else than the table (empty: equivalent)."""
    mismatches = []
    points = [(c, r, None, m, a) for c, r, m, a in table]
    for collective, ranks, ppn, msg_bytes, algorithm in [*points, *table.layout_points()]:
        rule_set = rule_sets.get(collective)
        chosen = rule_set.select(ranks, msg_bytes, ppn) if rule_set is not None else None
        if chosen != algorithm:
            mismatches.append(Mismatch(collective, ranks, msg_bytes, algorithm, chosen, ppn))
    return mismatches


def check_equivalent(table: SelectionTable, rule_sets: Mapping[str, RuleSet]) -> None:
    """Raise UsageError naming the first disagreements when the rule sets do not reproduce the table."""
    mismatches = find_mismatches(table, rule_sets)
    if mismatches:
        shown = "; ".join(
            f"{m.collective} {m.ranks} ranks{'' if m.ppn is None else f' ({m.ppn} per node)'} {m.msg_bytes} B: "
            f"table {m.table_choice}, rules {m.rule_choice}"
            for m in mismatches[:5]
        )
        raise UsageError(f"rule set disagrees with the table at {len(mismatches)} point(s): {shown}")
