"""Rule sets -> an Open MPI coll/tuned dynamic rules file (classic format), and a strict reader.

Pure syntax: the algorithm ids come from Open MPI's vendor adapter (in mpi/), which also holds the
evaluator that looks a call up in a parsed file as Open MPI does.

Format (ompi/mca/coll/tuned/coll_tuned_dynamic_file.c, Open MPI 5.0.x): whitespace-separated integers,
`#` comments; number of collectives; per collective: its id, the number of communicator-size sections;
per section: the communicator size, the number of message rules; per rule: message size, algorithm id,
fan-in/out, segment size (a 5th column, max requests, only after a `rule-file-version-2` first line).
The first message size of a section must be 0. Lookup (coll_tuned_dynamic_rules.c, 5.0.x): walk the
sections in file order and stop at the first one whose size is > the communicator size, keeping the one
before (the first section when none is <=); then the same walk over that section's message rules.
Unsorted keys therefore silently pick the wrong rule: the writer emits increasing numeric order and the
reader refuses anything else. Algorithm 0 means "use the fixed decision". Errors anywhere make Open MPI ignore
the whole file SILENTLY (its messages are compiled out of release builds), so `read_dynamic_rules`
mirrors the reader strictly and the writer only emits what it accepts.

Open MPI 5.0.11 also accepts `rule-file-version-2` (adds max_requests); the JSON rules format of
Open MPI's main branch is NOT in 5.0.x. tunempi writes version 1: it is read by 4.1.x and 5.0.x alike and
tunempi tunes no max_requests.

Message size per collective (coll_tuned_decision_dynamic.c): allreduce, bcast, reduce: type size x count
(= OSU bytes); alltoall, allgather, gather, scatter: type size x count x comm size (= OSU bytes x comm
size); reduce_scatter: type size x sum(recvcounts), reduce_scatter_block: type size x recvcount x comm
size (= OSU bytes, the per-rank send buffer); allgatherv: total / comm size (= OSU bytes); barrier and
alltoallv: always 0 (only the first rule of a section is ever used).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tunempi.errors import UsageError
from tunempi.rules.ruleset import DEFAULT_ALGORITHM, CommBlock, MsgRule, RuleSet

#: Open MPI's COLLTYPE enum (ompi/mca/coll/base/coll_base_functions.h).
COLLECTIVE_IDS: dict[str, int] = {
    "allgather": 0, "allgatherv": 1, "allreduce": 2, "alltoall": 3, "alltoallv": 4, "alltoallw": 5,
    "barrier": 6, "bcast": 7, "exscan": 8, "gather": 9, "gatherv": 10, "reduce": 11,
    "reduce_scatter": 12, "reduce_scatter_block": 13, "scan": 14, "scatter": 15, "scatterv": 16,
}
COLLECTIVE_COUNT = 22  # COLLCOUNT: ids must be below it

#: How Open MPI's message size relates to tunempi's OSU bytes: "same", "x_comm_size" or "zero".
MSG_SEMANTICS: dict[str, str] = {
    "allreduce": "same", "bcast": "same", "reduce": "same", "reduce_scatter": "same",
    "reduce_scatter_block": "same", "allgatherv": "same",
    "alltoall": "x_comm_size", "allgather": "x_comm_size", "gather": "x_comm_size", "scatter": "x_comm_size",
    "barrier": "zero", "alltoallv": "zero",
}


def library_msg_size(collective: str, osu_bytes: int, ranks: int) -> int:
    """tunempi's (OSU) bytes -> the message size Open MPI computes for the same call."""
    kind = MSG_SEMANTICS.get(collective)
    if kind is None:
        raise UsageError(f"no Open MPI message-size rule for {collective}; tunable: {sorted(MSG_SEMANTICS)}")
    return {"same": osu_bytes, "x_comm_size": osu_bytes * ranks, "zero": 0}[kind]


@dataclass(frozen=True)
class MsgSizeRule:
    msg_size: int
    algorithm: int
    faninout: int = 0
    segsize: int = 0


@dataclass(frozen=True)
class CommSizeSection:
    comm_size: int
    rules: tuple[MsgSizeRule, ...]


def _section_rules(collective: str, rules: tuple[MsgRule, ...], ranks: int,
                   ids: Mapping[str, int]) -> tuple[MsgSizeRule, ...]:
    def algorithm_id(name: str) -> int:
        if name == DEFAULT_ALGORITHM:
            return 0  # Open MPI: no algorithm from the file, use the fixed decision
        if name not in ids:
            raise UsageError(f"no Open MPI algorithm id for {collective} {name!r}; known: {', '.join(sorted(ids))}")
        return ids[name]

    if MSG_SEMANTICS[collective] == "zero":
        # The library always asks for size 0: only the first rule can apply, so rules that depend on
        # size cannot be expressed.
        if len({rule.algorithm for rule in rules}) > 1:
            raise UsageError(f"Open MPI selects {collective} without a message size; one algorithm per "
                             f"communicator size is all a rules file can say")
        return (MsgSizeRule(0, algorithm_id(rules[0].algorithm)),)
    out = [MsgSizeRule(0, algorithm_id(rules[0].algorithm))]
    for previous, rule in zip(rules, rules[1:], strict=False):
        assert previous.max_bytes is not None
        out.append(MsgSizeRule(library_msg_size(collective, previous.max_bytes, ranks) + 1,
                               algorithm_id(rule.algorithm)))
    return tuple(out)


def _block_sections(collective: str, block: CommBlock, ids: Mapping[str, int]) -> list[CommSizeSection]:
    measured = block.measured_ranks or (block.min_ranks,)
    if MSG_SEMANTICS[collective] != "x_comm_size" or len(block.rules) == 1 or len(measured) == 1:
        return [CommSizeSection(block.min_ranks, _section_rules(collective, block.rules, measured[-1], ids))]
    # Bounds scale with the communicator size: one section per measured size, exact at each; sizes
    # between two measured ones use the next measured size's scaling (same choice as the MPICH writer).
    sections, start = [], block.min_ranks
    for ranks in measured:
        sections.append(CommSizeSection(start, _section_rules(collective, block.rules, ranks, ids)))
        start = ranks + 1
    return sections


def rule_sections(rule_set: RuleSet, algorithm_ids: Mapping[str, int]) -> list[CommSizeSection]:
    """The communicator-size sections for one collective, in increasing numeric order."""
    if rule_set.collective not in COLLECTIVE_IDS or rule_set.collective not in MSG_SEMANTICS:
        raise UsageError(f"Open MPI rules files cannot tune {rule_set.collective}")
    if rule_set.keys_on_ppn():
        raise UsageError(f"{rule_set.collective}: Open MPI rules files key on communicator size only, not on "
                         "processes per node; give layouts of one size one rule")
    sections: list[CommSizeSection] = []
    for block in rule_set.blocks:
        sections.extend(_block_sections(rule_set.collective, block, algorithm_ids))
    merged: list[CommSizeSection] = []
    for section in sections:  # a section equal to the previous one adds nothing
        if not merged or merged[-1].rules != section.rules:
            merged.append(section)
    return merged


def write_dynamic_rules(rule_sets: Mapping[str, RuleSet] | list[RuleSet],
                        algorithm_ids: Mapping[str, Mapping[str, int]]) -> str:
    """The text of a dynamic rules file.

    `algorithm_ids[collective][name]` is the library's int for an algorithm (from the vendor adapter,
    which reads them from the library: they change between versions).
    """
    sets = sorted(rule_sets.values() if isinstance(rule_sets, Mapping) else rule_sets,
                  key=lambda rs: COLLECTIVE_IDS.get(rs.collective, -1))
    lines = ["# Open MPI coll/tuned dynamic rules, written by tunempi",
             "# use: OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_dynamic_rules_filename=<this file>",
             f"{len(sets)}  # number of collectives"]
    for rule_set in sets:
        ids = algorithm_ids.get(rule_set.collective)
        if ids is None:
            raise UsageError(f"no algorithm ids given for {rule_set.collective}")
        sections = rule_sections(rule_set, ids)
        lines.append(f"{COLLECTIVE_IDS[rule_set.collective]}  # collective id: {rule_set.collective}")
        lines.append(f"{len(sections)}  # number of communicator sizes")
        for section in sections:
            lines.append(f"{section.comm_size}  # communicator size")
            lines.append(f"{len(section.rules)}  # number of message sizes")
            for rule in section.rules:
                lines.append(f"{rule.msg_size} {rule.algorithm} {rule.faninout} {rule.segsize}"
                             "  # message size, algorithm, fan-in/out, segment size")
    return "\n".join(lines) + "\n"


_VERSION = re.compile(r"^rule-file-version-(\d+)")


def read_dynamic_rules(text: str) -> dict[int, list[CommSizeSection]]:
    """Parse a rules file as strictly as Open MPI does; UsageError where Open MPI would drop the file."""
    match = _VERSION.match(text)
    if match:
        if int(match.group(1)) != 1:
            raise UsageError(f"rules file version {match.group(1)}: tunempi reads version 1 (the classic format)")
        text = text[match.end():]
    # Open MPI's getnext skips everything that is not a digit (comments up to end of line included).
    body = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    tokens = body.split()
    position = 0

    def take(what: str) -> int:
        nonlocal position
        if position >= len(tokens):
            raise UsageError(f"rules file ends early: expected {what}")
        token = tokens[position]
        position += 1
        if not token.isdigit():
            raise UsageError(f"rules file: {what} must be a non-negative integer, got {token!r}")
        return int(token)

    result: dict[int, list[CommSizeSection]] = {}
    for _ in range(take("number of collectives")):
        collective_id = take("collective id")
        if collective_id >= COLLECTIVE_COUNT:
            raise UsageError(f"rules file: collective id {collective_id} >= {COLLECTIVE_COUNT}")
        sections: list[CommSizeSection] = []
        for _ in range(take("number of communicator sizes")):
            comm_size = take("communicator size")
            rules: list[MsgSizeRule] = []
            for index in range(take("number of message sizes")):
                msg_size, algorithm = take("message size"), take("algorithm")
                faninout, segsize = take("fan-in/out"), take("segment size")
                if index == 0 and msg_size != 0:
                    raise UsageError(f"rules file: first message size of a section must be 0, got {msg_size}")
                if rules and msg_size <= rules[-1].msg_size:
                    raise UsageError(f"rules file: message sizes must increase, got {msg_size} after "
                                     f"{rules[-1].msg_size} (communicator size {comm_size})")
                rules.append(MsgSizeRule(msg_size, algorithm, faninout, segsize))
            if sections and comm_size <= sections[-1].comm_size:
                raise UsageError(f"rules file: communicator sizes must increase, got {comm_size} after "
                                 f"{sections[-1].comm_size}")
            sections.append(CommSizeSection(comm_size, tuple(rules)))
        result[collective_id] = sections
    if position != len(tokens):
        raise UsageError(f"rules file has {len(tokens) - position} unread value(s) after the last collective")
    return result
