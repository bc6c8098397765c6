"""What `tunempi tune` tunes: the sub-scales of an allocation, the message sizes, the candidates.

Pure functions (no MPI): the CLI and the driver call them with what the user typed and what the vendor
adapter says, and the unit tests check them against fixed inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tunempi.bench.engine import Layout
from tunempi.bench.validate import REDUCTION_ELEMENT_BYTES, size_problem
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.errors import UsageError
from tunempi.space import Cell, FeatureSpace
from tunempi.space.feature import in_between_sizes, power_of_two_sizes

#: Smallest message size tuned by default: one reduction element (4 bytes, OSU's float).
DEFAULT_MIN_MSG = REDUCTION_ELEMENT_BYTES


@dataclass(frozen=True, order=True)
class Scale:
    """One sub-scale of the allocation: `nodes` nodes with `ppn` processes each."""

    nodes: int
    ppn: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.ppn

    @property
    def layout(self) -> Layout:
        return Layout(ranks=self.ranks, nodes=self.nodes, ppn=self.ppn if self.nodes > 1 else None)

    def key(self) -> tuple[int, int, int]:
        """(ranks, nodes, ppn), as in space.Cell.scale."""
        return (self.ranks, self.nodes, self.ppn)

    def label(self) -> str:
        return f"{self.ranks} ranks" if self.nodes == 1 else f"{self.nodes}x{self.ppn}"


def powers_and_own(limit: int, *, start: int = 1) -> list[int]:
    """Powers of two from `start` up to `limit`, and `limit` itself (an allocation's ppn 12 is tuned too)."""
    if limit < start:
        return []
    values = {limit}
    value = start
    while value <= limit:
        values.add(value)
        value *= 2
    return sorted(values)


def sub_scales(*, nodes: int = 1, ppn: int | None = None, ranks: int | None = None) -> list[Scale]:
    """Every (nodes, ppn) sub-scale of an allocation, ACCLAiM-style: node counts and ppn values that are
    powers of two up to the allocation's, plus the allocation's own values. One-rank layouts are left out
    (a collective on one process does nothing worth tuning).

    Single node (`nodes` == 1): `ranks` (or `ppn`) gives the process count: 4 -> 2 and 4 ranks.
    """
    if nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {nodes}")
    if nodes == 1:
        count = ranks if ranks is not None else ppn
        if count is None or count < 2:
            raise UsageError(f"tuning needs at least 2 processes, got {count}")
        if ppn is not None and ranks is not None and ranks != ppn:
            raise UsageError(f"on one node --ranks ({ranks}) and --ppn ({ppn}) must agree")
        return [Scale(1, p) for p in powers_and_own(count, start=2)]
    if ppn is None:
        if ranks is None or ranks % nodes:
            raise UsageError(f"give --ppn (or --ranks divisible by --nodes {nodes})")
        ppn = ranks // nodes
    if ppn < 1:
        raise UsageError(f"--ppn must be at least 1, got {ppn}")
    scales = [Scale(n, p) for n in powers_and_own(nodes) for p in powers_and_own(ppn)]
    return [s for s in scales if s.ranks >= 2]


def message_sizes(max_msg: int, *, min_msg: int = DEFAULT_MIN_MSG, in_between: bool = True) -> list[int]:
    """Powers of two from min_msg to max_msg and (ACCLAiM) the in-between sizes 1.5x each power of two,
    rounded to whole reduction elements so every collective can take every size."""
    if min_msg < 1 or max_msg < min_msg:
        raise UsageError(f"need 1 <= --min-msg <= --max-msg, got {min_msg} and {max_msg}")
    align = REDUCTION_ELEMENT_BYTES
    sizes = [s for s in power_of_two_sizes(min_msg, max_msg) if s % align == 0]
    if in_between:
        sizes += in_between_sizes(min_msg, max_msg, align=align)
    if not sizes:
        raise UsageError(f"no message size between {min_msg} and {max_msg} is a multiple of {align} bytes")
    return sorted(set(sizes))


def candidate_algorithms(
    library_algorithms: Sequence[str], *, exclude: Iterable[str] = (), include_default: bool = True
) -> tuple[str, ...]:
    """The algorithms a strategy chooses among: 'default' first (the library's own choice is a
    legitimate winner: MPICH's shared-memory algorithms often are at small sizes), then the library's."""
    excluded = set(exclude)
    names = [a for a in library_algorithms if a not in excluded and a != DEFAULT_ALGORITHM]
    return ((DEFAULT_ALGORITHM,) if include_default else ()) + tuple(dict.fromkeys(names))


def feature_space(
    collective: str,
    scales: Sequence[Scale],
    sizes: Sequence[int],
    algorithms: Sequence[str],
) -> FeatureSpace:
    """The cells of one collective (sizes it cannot take at a scale are left out). An algorithm that cannot
    run somewhere is learnt by measuring: the engine reports the failure and the strategy avoids it."""
    cells = [
        Cell(collective, scale.ranks, scale.nodes, scale.ppn, size)
        for scale in scales for size in sizes if not size_problem(collective, size, scale.ranks)
    ]
    if not cells:
        raise UsageError(f"no {collective} cell to tune: check --max-msg and the scales")
    return FeatureSpace(collective, tuple(cells), tuple(algorithms))
