"""The vendor-neutral vocabulary of collectives that tunempi knows.

Message sizes follow OSU's conventions (shared dataset format): the per-rank buffer for
allreduce/bcast/reduce, the per-destination block for allgather/alltoall/gather/scatter.
"""

from __future__ import annotations

from tunempi.errors import UsageError

COLLECTIVES: tuple[str, ...] = (
    "allreduce", "bcast", "allgather", "alltoall", "reduce", "reduce_scatter",
    "gather", "scatter", "barrier", "allgatherv", "alltoallv", "reduce_scatter_block",
)

#: The algorithm name that means "the library's own choice" everywhere: the store, rule sets, tuning
#: files, datasets, online tables.
DEFAULT_ALGORITHM = "default"

#: Collectives whose payload is a reduction over typed elements (sizes are multiples of the element).
REDUCTIONS: frozenset[str] = frozenset({"allreduce", "reduce", "reduce_scatter", "reduce_scatter_block"})

#: Collectives whose message size (OSU's convention) is the block each rank sends to or receives from
#: each peer; for the others it is the whole buffer, which the algorithms split among the ranks.
BLOCK_COLLECTIVES: frozenset[str] = frozenset({"allgather", "allgatherv", "alltoall", "alltoallv", "gather",
                                               "scatter"})


#: Collectives whose blocks may differ between ranks (count and displacement arrays).
VECTOR_COLLECTIVES: frozenset[str] = frozenset({"allgatherv", "alltoallv"})

#: How a vector collective's blocks differ between ranks around its mean block (the message size, as the
#: profiler records it): uniform (every block the same: OSU's v-benchmarks), skewed (rank r's blocks are
#: 2 (r + 1) / (ranks + 1) x the mean), sparse (alltoallv sends to the next rank only; allgatherv takes the
#: even ranks' blocks only). Every other collective is uniform. bench/c/engine.h spells the same.
DISTRIBUTIONS: tuple[str, ...] = ("uniform", "skewed", "sparse")
DEFAULT_DISTRIBUTION = "uniform"


def check_collective(name: str) -> str:
    """Return the canonical name or raise UsageError naming the valid ones."""
    canonical = name.strip().lower()
    if canonical not in COLLECTIVES:
        raise UsageError(f"unknown collective {name!r}; valid: {', '.join(COLLECTIVES)}")
    return canonical


def parse_collectives(text: str) -> list[str]:
    """'allreduce,bcast' -> ['allreduce', 'bcast'], validated, order kept, duplicates dropped."""
    names = [check_collective(part) for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"no collectives in {text!r}; valid: {', '.join(COLLECTIVES)}")
    return list(dict.fromkeys(names))
