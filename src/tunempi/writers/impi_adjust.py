"""Rule sets -> Intel MPI's selection strings, and back (pure syntax).

`I_MPI_ADJUST_<COLL>="<presetid>:<l>-<m>@<p>-<q>[;<presetid>:<l>-<m>@<p>-<q>...]"` (Intel MPI developer
reference, I_MPI_ADJUST family): message sizes l..m bytes and communicator sizes p..q, both inclusive.
The first matching condition wins; ranges a rule set leaves to the library's default are not written. A
call no condition matches does NOT keep the library's own selection on 2021.19: it takes the nearest
condition's preset (measured, issue 57, docs/tuning-files.md "Where a rule acts"); `select_preset` still
answers None there. An unbounded upper end is
written as UNBOUNDED (Intel rejects an open range `3:0-`, measured on 2021.19.0).

Message sizes: a rule set's bounds are in OSU's convention (rules.table); Intel's measure per
collective is passed in as a scale (`size_scale`: 1 where Intel counts the same bytes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tunempi.errors import TuningFileError
from tunempi.rules.ruleset import DEFAULT_ALGORITHM, RuleSet

#: The largest value a condition's bound takes (a C int): stands for "no upper bound".
UNBOUNDED = 2**31 - 1

_CONDITION = re.compile(r"^(\d+)(?::(\d+)(?:-(\d+))?(?:@(\d+)(?:-(\d+))?)?)?$")


@dataclass(frozen=True)
class Condition:
    """Preset `preset` for messages min_bytes..max_bytes and communicators min_ranks..max_ranks."""

    preset: int
    min_bytes: int
    max_bytes: int
    min_ranks: int
    max_ranks: int

    def matches(self, ranks: int, msg_bytes: int) -> bool:
        return self.min_bytes <= msg_bytes <= self.max_bytes and self.min_ranks <= ranks <= self.max_ranks

    def text(self) -> str:
        return f"{self.preset}:{self.min_bytes}-{self.max_bytes}@{self.min_ranks}-{self.max_ranks}"


def conditions_for(rule_set: RuleSet, presets: Mapping[str, int]) -> list[Condition]:
    """The conditions that select what `rule_set` selects, the library's default left unwritten.

    presets: algorithm name -> Intel's preset id (TuningFileError for a name it lacks).
    """
    if rule_set.keys_on_ppn():
        raise TuningFileError(f"{rule_set.collective}: I_MPI_ADJUST_<COLL> strings key on communicator size only, "
                              "not on processes per node; give layouts of one size one rule")
    conditions: list[Condition] = []
    for block in rule_set.blocks:
        max_ranks = UNBOUNDED if block.max_ranks is None else block.max_ranks
        low = 0
        for rule in block.rules:
            high = UNBOUNDED if rule.max_bytes is None else rule.max_bytes
            if rule.algorithm != DEFAULT_ALGORITHM:
                if rule.algorithm not in presets:
                    raise TuningFileError(f"{rule_set.collective}: no Intel MPI preset for {rule.algorithm!r}")
                conditions.append(Condition(presets[rule.algorithm], low, high, block.min_ranks, max_ranks))
            low = high + 1
    return conditions


def write_adjust_value(rule_set: RuleSet, presets: Mapping[str, int]) -> str | None:
    """The variable's value, or None where the rule set keeps the library's default everywhere."""
    conditions = conditions_for(rule_set, presets)
    return ";".join(c.text() for c in conditions) if conditions else None


def read_adjust_value(text: str) -> list[Condition]:
    """Parse a value as strictly as tunempi writes it (TuningFileError on anything else); a bare preset
    id holds everywhere."""
    conditions = []
    for part in text.split(";"):
        match = _CONDITION.match(part.strip())
        if match is None:
            raise TuningFileError(f"not an Intel MPI selection condition: {part!r} in {text!r}")
        preset, low, high, min_ranks, max_ranks = match.groups()
        low_bytes = int(low) if low is not None else 0
        high_bytes = int(high) if high is not None else (low_bytes if low is not None else UNBOUNDED)
        first_rank = int(min_ranks) if min_ranks is not None else 1
        last_rank = int(max_ranks) if max_ranks is not None else (first_rank if min_ranks is not None else UNBOUNDED)
        if high_bytes < low_bytes or last_rank < first_rank:
            raise TuningFileError(f"empty range in Intel MPI selection condition {part!r}")
        conditions.append(Condition(int(preset), low_bytes, high_bytes, first_rank, last_rank))
    return conditions


def select_preset(conditions: list[Condition], ranks: int, msg_bytes: int) -> int | None:
    """The preset Intel runs for a call (first match), None for the library's own selection."""
    return next((c.preset for c in conditions if c.matches(ranks, msg_bytes)), None)
