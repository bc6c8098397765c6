"""The selection table: which algorithm won at each measured point.

A table maps (collective, ranks, msg_bytes) to the library's own algorithm name. Message sizes follow
OSU's conventions (the shared dataset format): the per-rank buffer for allreduce/bcast/reduce, the
per-destination block for allgather/alltoall/gather/scatter. Converting them to what a library compares
against is the writers' job, never the table's.

Tuning libraries key their rules on the communicator size only, so measurements at several layouts of
the same size (2 nodes x 4 ppn and 4 nodes x 2 ppn are both 8 ranks) must agree on one choice:
`SelectionTable.from_scaled` decides, and says how.
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
    """(collective, ranks, msg_bytes) -> algorithm, for the measured points only."""

    choices: Mapping[tuple[str, int, int], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for (collective, ranks, msg_bytes), algorithm in self.choices.items():
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
        cls, choices: Iterable[ScaledChoice], *, preferred_ppn: int | None = None
    ) -> SelectionTable:
        """Collapse layouts to communicator sizes.

        When layouts of the same size disagree, the one measured at `preferred_ppn` wins (the tuner
        passes the allocation's ppn: that is how applications on it will be laid out); otherwise the
        one with the most processes per node, i.e. the fullest nodes, which is how jobs usually run.
        """
        best: dict[tuple[str, int, int], ScaledChoice] = {}

        def rank_of(choice: ScaledChoice) -> tuple[int, int]:
            return (choice.ppn == preferred_ppn, choice.ppn)

        for choice in choices:
            key = (check_collective(choice.collective), choice.ranks, choice.msg_bytes)
            if key not in best or rank_of(choice) > rank_of(best[key]):
                best[key] = choice
        return cls({key: choice.algorithm for key, choice in best.items()})

    def __len__(self) -> int:
        return len(self.choices)

    def __iter__(self) -> Iterator[tuple[str, int, int, str]]:
        for (collective, ranks, msg_bytes), algorithm in sorted(self.choices.items()):
            yield collective, ranks, msg_bytes, algorithm

    def collectives(self) -> list[str]:
        return sorted({collective for collective, _, _ in self.choices})

    def comm_sizes(self, collective: str) -> list[int]:
        return sorted({ranks for coll, ranks, _ in self.choices if coll == collective})

    def row(self, collective: str, ranks: int) -> list[tuple[int, str]]:
        """(msg_bytes, algorithm) at one communicator size, in increasing numeric size order."""
        return sorted(
            (msg, algorithm) for (coll, size, msg), algorithm in self.choices.items()
            if coll == collective and size == ranks
        )

    def algorithms(self, collective: str) -> list[str]:
        return sorted({alg for (coll, _, _), alg in self.choices.items() if coll == collective})
