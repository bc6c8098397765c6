"""Tuning cells of the online mode: (collective, ranks, nodes, ppn, message-size range).

Message sizes use tunempi's convention (docs/profile.md, the same as the dataset's OSU sizes). The size
ranges are configurable: `bounds` are inclusive upper bounds, range i is (bounds[i-1], bounds[i]] and
the last range, above the last bound, is open-ended. Communicator layouts are exact (ranks, nodes, ppn)
as the interposer sees them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tunempi.errors import UsageError
from tunempi.units import parse_size

#: Default size bounds: powers of 8 from 8 B to 8 MiB (9 ranges), a coarse grid like the paper's.
DEFAULT_BOUNDS: tuple[int, ...] = tuple(8 ** k for k in range(1, 9))


@dataclass(frozen=True, order=True)
class SizeRangeCell:
    """One cell of the online mode: a communicator layout and a message-size range (an index into
    `SizeRanges`); not the exact-size `space.Cell` of collective tuning."""

    collective: str
    ranks: int
    nodes: int
    ppn: int
    size_index: int

    @property
    def key(self) -> str:
        return f"{self.collective}/{self.ranks}/{self.nodes}x{self.ppn}/{self.size_index}"

    @classmethod
    def from_key(cls, key: str) -> SizeRangeCell:
        try:
            collective, ranks, layout, size_index = key.split("/")
            nodes, ppn = layout.split("x")
            return cls(collective, int(ranks), int(nodes), int(ppn), int(size_index))
        except ValueError as exc:
            raise UsageError(f"bad cell key {key!r}; expected collective/ranks/NODESxPPN/size_index") from exc


@dataclass(frozen=True)
class SizeRanges:
    """Message-size ranges from inclusive upper bounds (strictly increasing, > 0)."""

    bounds: tuple[int, ...] = DEFAULT_BOUNDS

    def __post_init__(self) -> None:
        if any(b <= 0 for b in self.bounds) or any(a >= b for a, b in itertools.pairwise(self.bounds)):
            raise UsageError(f"size bounds must be positive and strictly increasing, got {list(self.bounds)}")

    @classmethod
    def parse(cls, text: str) -> SizeRanges:
        """'64,4K,256K' -> bounds (64, 4096, 262144)."""
        parts = [p for p in text.split(",") if p.strip()]
        if not parts:
            raise UsageError(f"no size bounds in {text!r}; give e.g. 64,4K,256K")
        return cls(tuple(parse_size(p.strip()) for p in parts))

    def __len__(self) -> int:
        return len(self.bounds) + 1

    def index(self, msg_bytes: int) -> int:
        for i, bound in enumerate(self.bounds):
            if msg_bytes <= bound:
                return i
        return len(self.bounds)

    def range(self, index: int) -> tuple[int, int | None]:
        """(exclusive lower, inclusive upper or None) of range `index`."""
        lower = 0 if index == 0 else self.bounds[index - 1]
        upper = self.bounds[index] if index < len(self.bounds) else None
        return lower, upper

    def representative(self, index: int) -> int:
        """A size standing for the range: the geometric middle (for the model and the rule sets)."""
        lower, upper = self.range(index)
        if upper is None:
            return 2 * lower
        return max(1, round(math.sqrt(max(lower, 1) * upper)))

    def whole_elements(self, index: int, element: int) -> int:
        """The representative as a whole number of `element`-byte elements inside the range (a reduction's
        buffer: verify measured an online best's allreduce at 92682 bytes, 23170.5 floats, and failed it):
        rounded down, else up, else the representative where the range holds no such size."""
        size = self.representative(index)
        lower, upper = self.range(index)
        down, up = size - size % element, size + (-size % element)
        if down > lower:
            return down
        return up if upper is None or up <= upper else size

    def label(self, index: int) -> str:
        lower, upper = self.range(index)
        return f"> {lower}" if upper is None else f"{lower + 1 if index else 0}-{upper}"


def parse_layouts(texts: Sequence[str]) -> list[tuple[int, int, int]]:
    """'8x1x8' (ranks x nodes x ppn) or '2x4' (nodes x ppn) -> (ranks, nodes, ppn)."""
    layouts = []
    for text in texts:
        parts = text.lower().split("x")
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            numbers = []
        if len(numbers) == 2:
            numbers = [numbers[0] * numbers[1], *numbers]
        if len(numbers) != 3 or min(numbers) < 1:
            raise UsageError(f"bad layout {text!r}; valid forms: RANKSxNODESxPPN (8x2x4) or NODESxPPN (2x4)")
        layouts.append((numbers[0], numbers[1], numbers[2]))
    return layouts
