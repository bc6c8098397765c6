"""The feature space of collective tuning: which (collective, ranks, nodes, ppn, message size) cells exist.

A *cell* is one point where an algorithm choice is made; the tuner picks one algorithm per cell. A
`FeatureSpace` is a finite set of cells of one collective plus the algorithms that are candidates in each
cell (the vendor adapter knows that, e.g., Open MPI's `two_proc` only runs on 2 ranks). Message sizes are
powers of two plus the in-between values real applications use (ACCLAiM: 15.7% of real collective calls
use non-power-of-two sizes). Model features are the base-2 logarithms of ranks, nodes, ppn and message size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tunempi.collectives import check_collective
from tunempi.errors import UsageError

#: Names of the numeric features, in the column order of `FeatureSpace.features`.
FEATURE_NAMES: tuple[str, ...] = ("log2_ranks", "log2_nodes", "log2_ppn", "log2_msg_bytes")
#: With `derived=True`: also log2(bytes per rank). Algorithms switch where the element count crosses
#: the communicator size (e.g. Rabenseifner falls back when count < ranks), a diagonal line in
#: (log ranks, log size) that a model with axis-aligned length scales sees only with this feature.
DERIVED_FEATURE_NAMES: tuple[str, ...] = (*FEATURE_NAMES, "log2_bytes_per_rank")


@dataclass(frozen=True, order=True)
class Cell:
    """One point of the feature space: the algorithm choice is made per cell."""

    collective: str
    ranks: int
    nodes: int
    ppn: int
    msg_bytes: int

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.nodes < 1 or self.ppn < 1 or self.msg_bytes < 0:
            raise UsageError(f"invalid cell {self}: ranks, nodes, ppn must be >= 1 and msg_bytes >= 0")

    def features(self) -> tuple[float, float, float, float]:
        """Base-2 logarithms of ranks, nodes, ppn, message size (size 0 counts as 1 byte)."""
        return (
            math.log2(self.ranks), math.log2(self.nodes), math.log2(self.ppn),
            math.log2(max(self.msg_bytes, 1)),
        )

    @property
    def scale(self) -> tuple[int, int, int]:
        return (self.ranks, self.nodes, self.ppn)

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "ranks": self.ranks, "nodes": self.nodes,
                "ppn": self.ppn, "msg_bytes": self.msg_bytes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cell:
        return cls(str(data["collective"]), int(data["ranks"]), int(data["nodes"]), int(data["ppn"]),
                   int(data["msg_bytes"]))


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def power_of_two_floor(value: int) -> int:
    """The largest power of two <= value (1 for value <= 1)."""
    return 1 << (max(value, 1).bit_length() - 1)


def power_of_two_ceil(value: int) -> int:
    """The smallest power of two >= value (1 for value <= 1)."""
    return 1 << (max(value, 1) - 1).bit_length()


def power_of_two_sizes(lo: int, hi: int) -> list[int]:
    """Powers of two from the smallest >= lo to the largest <= hi."""
    if lo < 1 or hi < lo:
        raise UsageError(f"bad size range {lo}..{hi}: need 1 <= lo <= hi")
    size = power_of_two_ceil(lo)
    sizes = []
    while size <= hi:
        sizes.append(size)
        size *= 2
    return sizes


def in_between_sizes(lo: int, hi: int, *, align: int = 1) -> list[int]:
    """Sizes halfway (geometrically: 1.5x) between consecutive powers of two in [lo, hi], rounded to `align`.

    Real applications call collectives with such sizes (ACCLAiM, SC'22 workshop paper); reductions need
    sizes that are multiples of their element size, hence `align`.
    """
    sizes = set()
    for size in power_of_two_sizes(lo, hi):
        between = (size * 3 // 2) // align * align
        if size < between < 2 * size and lo <= between <= hi:
            sizes.add(between)
    return sorted(sizes)


@dataclass(frozen=True)
class FeatureSpace:
    """A finite set of cells of one collective and the candidate algorithms in each.

    `algorithms` lists every candidate; `unavailable` maps a cell to the candidates that cannot run there.
    Cells are kept sorted (ranks, nodes, ppn, message size) so that indices are stable.
    """

    collective: str
    cells: tuple[Cell, ...]
    algorithms: tuple[str, ...]
    unavailable: Mapping[Cell, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_collective(self.collective)
        if not self.cells:
            raise UsageError(f"empty feature space for {self.collective}")
        if not self.algorithms:
            raise UsageError(f"no candidate algorithms for {self.collective}")
        wrong = {c.collective for c in self.cells} - {self.collective}
        if wrong:
            raise UsageError(f"cells of {sorted(wrong)} in a {self.collective} space")
        object.__setattr__(self, "cells", tuple(sorted(set(self.cells))))
        object.__setattr__(self, "algorithms", tuple(dict.fromkeys(self.algorithms)))
        known = set(self.algorithms)
        clean = {c: frozenset(a) & known for c, a in self.unavailable.items() if c in self._index() and a}
        object.__setattr__(self, "unavailable", clean)

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def grid(
        cls,
        collective: str,
        scales: Iterable[tuple[int, int, int]],
        msg_sizes: Iterable[int],
        algorithms: Sequence[str],
        unavailable: Mapping[Cell, Iterable[str]] | None = None,
    ) -> FeatureSpace:
        """Every (ranks, nodes, ppn) scale crossed with every message size."""
        collective = check_collective(collective)
        cells = [Cell(collective, r, n, p, m) for (r, n, p) in scales for m in msg_sizes]
        return cls(collective, tuple(cells), tuple(algorithms),
                   {c: frozenset(a) for c, a in (unavailable or {}).items()})

    # -- queries --------------------------------------------------------------------------------
    def _index(self) -> dict[Cell, int]:
        cache = self.__dict__.get("_index_cache")
        if cache is None:
            cache = {c: i for i, c in enumerate(self.cells)}
            object.__setattr__(self, "_index_cache", cache)
        return cache

    def __len__(self) -> int:
        return len(self.cells)

    def __contains__(self, cell: object) -> bool:
        return cell in self._index()

    def index(self, cell: Cell) -> int:
        try:
            return self._index()[cell]
        except KeyError:
            raise UsageError(f"{cell} is not in the {self.collective} space") from None

    def candidates(self, cell: Cell) -> tuple[str, ...]:
        """The algorithms that can run in this cell, in the space's algorithm order."""
        blocked = self.unavailable.get(cell, frozenset())
        return tuple(a for a in self.algorithms if a not in blocked)

    @property
    def points(self) -> int:
        """The points an exhaustive sweep measures: cells x their candidate algorithms."""
        return sum(len(self.candidates(cell)) for cell in self.cells)

    def availability(self) -> np.ndarray:
        """Boolean matrix (cells x algorithms): True where the algorithm is a candidate."""
        mask = np.ones((len(self.cells), len(self.algorithms)), dtype=bool)
        col = {a: j for j, a in enumerate(self.algorithms)}
        for cell, blocked in self.unavailable.items():
            for algorithm in blocked:
                mask[self.index(cell), col[algorithm]] = False
        return mask

    def features(self, cells: Sequence[Cell] | None = None, *, derived: bool = False) -> np.ndarray:
        """Feature matrix (len(cells) x 4), see FEATURE_NAMES; with `derived`, DERIVED_FEATURE_NAMES."""
        chosen = self.cells if cells is None else cells
        raw = np.array([c.features() for c in chosen], dtype=float).reshape(len(chosen), len(FEATURE_NAMES))
        if not derived:
            return raw
        return np.hstack([raw, (raw[:, 3] - raw[:, 0])[:, None]])

    def scales(self) -> list[tuple[int, int, int]]:
        return sorted({c.scale for c in self.cells})

    def msg_sizes(self) -> list[int]:
        return sorted({c.msg_bytes for c in self.cells})

    def restrict(self, *, max_ranks: int | None = None, cells: Iterable[Cell] | None = None) -> FeatureSpace:
        """The sub-space of cells with ranks <= max_ranks (and/or among `cells`)."""
        chosen = [c for c in self.cells if max_ranks is None or c.ranks <= max_ranks]
        if cells is not None:
            allowed = set(cells)
            chosen = [c for c in chosen if c in allowed]
        if not chosen:
            raise UsageError(f"no cells left with ranks <= {max_ranks}; smallest is {self.cells[0].ranks}")
        return FeatureSpace(self.collective, tuple(chosen), self.algorithms,
                            {c: a for c, a in self.unavailable.items() if c in set(chosen)})

    # -- JSON round-trip -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "feature_space",
            "version": 1,
            "collective": self.collective,
            "algorithms": list(self.algorithms),
            "cells": [[c.ranks, c.nodes, c.ppn, c.msg_bytes] for c in self.cells],
            "unavailable": [
                {"cell": [c.ranks, c.nodes, c.ppn, c.msg_bytes], "algorithms": sorted(a)}
                for c, a in sorted(self.unavailable.items())
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSpace:
        if data.get("kind") != "feature_space":
            raise UsageError("not a feature space document (kind != 'feature_space')")
        collective = str(data["collective"])
        cells = tuple(Cell(collective, *map(int, c)) for c in data["cells"])
        unavailable = {Cell(collective, *map(int, u["cell"])): frozenset(u["algorithms"])
                       for u in data.get("unavailable", [])}
        return cls(collective, cells, tuple(data["algorithms"]), unavailable)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> FeatureSpace:
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text(encoding="utf-8")
        return cls.from_dict(json.loads(text))
