"""The selection table: which algorithm won at each measured point.

A table maps (collective, ranks, msg_bytes) to the library's own algorithm name. Message sizes follow
OSU's conventions (the shared dataset format): the per-rank buffer for allreduce/bcast/reduce, the
per-destination block for allgather/alltoall/gather/scatter. Converting them to what a library compares
against is the writers' job, never the table's.

Most tuning files key their rules on the communicator size only, so measurements at several layouts of
the same size (2 nodes x 4 ppn and 4 nodes x 2 ppn are both 8 ranks) must agree on one choice:
`SelectionTable.from_scaled` decides, and says how. Where the library can key on processes per node too
(MPICH's `comm_avg_ppn<=N`), `from_scaled(..., by_ppn=True)` keeps each layout's own choices at a size whose
layouts measured different winners (`SelectionTable.by_ppn`); a size with one layout, or whose layouts agree,
stays keyed on its size alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from tunempi.collectives import check_collective
from tunempi.errors import UsageError


@dataclass(frozen=True)
class ScaledChoice:
    """One winner at one measured point, with the layout it was measured at."""

    collective: str
    nodes: int
    ppn: int
    msg_bytes: int
    algorithm: str

    @property
    def ranks(self) -> int:
        return self.nodes * self.ppn


@dataclass(frozen=True)
class SelectionTable:
    """(collective, ranks, msg_bytes) -> algorithm, for the measured points only.

    `by_ppn`: (collective, ranks, ppn, msg_bytes) -> algorithm at the sizes whose layouts measured different
    winners and are kept apart (from_scaled's by_ppn); such a (collective, ranks) has no point in `choices`.
    """

    choices: Mapping[tuple[str, int, int], str] = field(default_factory=dict)
    by_ppn: Mapping[tuple[str, int, int, int], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        split = {(collective, ranks) for collective, ranks, _, _ in self.by_ppn}
        for collective, ranks, ppn, _ in self.by_ppn:
            if ppn < 1 or ranks % ppn:
                raise UsageError(f"{collective}: {ranks} ranks cannot be laid out at {ppn} per node")
        both = sorted(split & {(collective, ranks) for collective, ranks, _ in self.choices})
        if both:
            raise UsageError(f"{both[0][0]} at {both[0][1]} ranks is keyed both with and without processes per node")
        points = [*self.choices.items(), *(((c, r, m), a) for (c, r, _, m), a in self.by_ppn.items())]
        for (collective, ranks, msg_bytes), algorithm in points:
            check_collective(collective)
            if ranks < 1:
                raise UsageError(f"{collective}: communicator size must be >= 1, got {ranks}")
            if msg_bytes < 0:
                raise UsageError(f"{collective}: message size must be >= 0, got {msg_bytes}")
            if not algorithm:
                raise UsageError(f"{collective} at {ranks} ranks, {msg_bytes} B: empty algorithm name")

    @classmethod
    def from_items(cls, items: Iterable[tuple[str, int, int, str]]) -> SelectionTable:
        """From (collective, ranks, msg_bytes, algorithm) tuples; a point given twice must agree."""
        choices: dict[tuple[str, int, int], str] = {}
        for collective, ranks, msg_bytes, algorithm in items:
            key = (check_collective(collective), int(ranks), int(msg_bytes))
            if key in choices and choices[key] != algorithm:
                raise UsageError(f"conflicting choices at {key}: {choices[key]!r} and {algorithm!r}")
            choices[key] = algorithm
        return cls(choices)

    @classmethod
    def from_scaled(
        cls, choices: Iterable[ScaledChoice], *, preferred_ppn: int | None = None, by_ppn: bool = False
    ) -> SelectionTable:
        """Collapse layouts to communicator sizes.

        When layouts of the same size disagree, the one measured at `preferred_ppn` wins (the tuner
        passes the allocation's ppn: that is how applications on it will be laid out); otherwise the
        one with the most processes per node, i.e. the fullest nodes, which is how jobs usually run.
        With `by_ppn` (the library's files can key on processes per node), a size whose layouts measured
        different winners at some message size keeps each layout's choices instead (`by_ppn`).
        """
        choices = list(choices)
        best: dict[tuple[str, int, int], ScaledChoice] = {}
        split: set[tuple[str, int]] = set()
        if by_ppn:
            seen: dict[tuple[str, int, int], str] = {}
            for choice in choices:
                key = (check_collective(choice.collective), choice.ranks, choice.msg_bytes)
                if seen.setdefault(key, choice.algorithm) != choice.algorithm:
                    split.add((key[0], key[1]))
        layouts: dict[tuple[str, int, int, int], str] = {}

        def rank_of(choice: ScaledChoice) -> tuple[int, int]:
            return (choice.ppn == preferred_ppn, choice.ppn)

        for choice in choices:
            collective = check_collective(choice.collective)
            if (collective, choice.ranks) in split:
                key4 = (collective, choice.ranks, choice.ppn, choice.msg_bytes)
                if layouts.setdefault(key4, choice.algorithm) != choice.algorithm:
                    raise UsageError(f"conflicting choices at {key4}: {layouts[key4]!r} and {choice.algorithm!r}")
                continue
            key = (collective, choice.ranks, choice.msg_bytes)
            if key not in best or rank_of(choice) > rank_of(best[key]):
                best[key] = choice
        return cls({key: choice.algorithm for key, choice in best.items()}, layouts)

    def __len__(self) -> int:
        return len(self.choices) + len(self.by_ppn)

    def __iter__(self) -> Iterator[tuple[str, int, int, str]]:
        """The points keyed on communicator size alone (`layout_points`: the ones keyed on ppn too)."""
        for (collective, ranks, msg_bytes), algorithm in sorted(self.choices.items()):
            yield collective, ranks, msg_bytes, algorithm

    def layout_points(self) -> Iterator[tuple[str, int, int, int, str]]:
        """(collective, ranks, ppn, msg_bytes, algorithm) of the sizes kept apart by processes per node."""
        for (collective, ranks, ppn, msg_bytes), algorithm in sorted(self.by_ppn.items()):
            yield collective, ranks, ppn, msg_bytes, algorithm

    def collectives(self) -> list[str]:
        return sorted({collective for collective, _, _ in self.choices} | {c for c, _, _, _ in self.by_ppn})

    def comm_sizes(self, collective: str) -> list[int]:
        return sorted({ranks for coll, ranks, _ in self.choices if coll == collective}
                      | {ranks for coll, ranks, _, _ in self.by_ppn if coll == collective})

    def ppns(self, collective: str, ranks: int) -> list[int]:
        """The processes per node kept apart at this size (empty: keyed on its size alone)."""
        return sorted({ppn for coll, size, ppn, _ in self.by_ppn if coll == collective and size == ranks})

    def row(self, collective: str, ranks: int, ppn: int | None = None) -> list[tuple[int, str]]:
        """(msg_bytes, algorithm) at one communicator size (and ppn, where kept apart), in increasing numeric
        size order."""
        if ppn is not None:
            return sorted((msg, algorithm) for (coll, size, p, msg), algorithm in self.by_ppn.items()
                          if coll == collective and size == ranks and p == ppn)
        return sorted(
            (msg, algorithm) for (coll, size, msg), algorithm in self.choices.items()
            if coll == collective and size == ranks
        )

    def algorithms(self, collective: str) -> list[str]:
        return sorted({alg for (coll, _, _), alg in self.choices.items() if coll == collective}
                      | {alg for (coll, _, _, _), alg in self.by_ppn.items() if coll == collective})
