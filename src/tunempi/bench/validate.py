"""Checks on benchmark points, done in Python before anything reaches MPI.

MPI does not forgive bad input: MPICH segfaults in MPI_Init on an unknown algorithm name, and an
algorithm that cannot take a layout aborts the whole job. Every point is checked here first; the
engine re-checks what it can and answers with an error line instead of crashing.
"""

from __future__ import annotations

from tunempi.collectives import (
    DEFAULT_ALGORITHM,
    REDUCTIONS,
    VECTOR_COLLECTIVES,
    blocking_collective,
    check_collective,
)
from tunempi.errors import UsageError
from tunempi.mpi.vendor import VendorAdapter

#: What the C engine implements (bench/c/cases.c). Message sizes follow OSU: the per-rank buffer for
#: allreduce/bcast/reduce; the per-destination block for the others (its mean for the vector collectives,
#: whose blocks differ between ranks as the point's distribution says: collectives.DISTRIBUTIONS). The
#: non-blocking ones take their blocking collective's sizes (collectives.NONBLOCKING).
ENGINE_COLLECTIVES: tuple[str, ...] = (
    "allreduce", "bcast", "allgather", "alltoall", "reduce", "reduce_scatter", "reduce_scatter_block",
    "gather", "scatter", "barrier", "allgatherv", "alltoallv", "gatherv", "scatterv", "alltoallw",
    "iallreduce", "ibcast", "ialltoall", "iallgather",
)

#: Reductions sum floats (4 bytes), as OSU does: their sizes are whole numbers of elements.
REDUCTION_ELEMENT_BYTES = 4

#: The engine passes element counts of whole buffers as C ints.
_INT_MAX = 2**31 - 1


def check_engine_collective(name: str) -> str:
    collective = check_collective(name)
    if collective not in ENGINE_COLLECTIVES:
        raise UsageError(
            f"the benchmark engine does not measure {collective!r}; valid: {', '.join(ENGINE_COLLECTIVES)}"
        )
    return collective


def size_problem(collective: str, msg_bytes: int, ranks: int) -> str | None:
    """Why `msg_bytes` cannot be measured for `collective` on `ranks` ranks, or None when it can."""
    base = blocking_collective(collective)  # a non-blocking collective takes its blocking one's sizes
    if msg_bytes < 0:
        return f"negative size {msg_bytes}"
    if base == "barrier" and msg_bytes != 0:
        return "barrier moves no data: its only size is 0"
    if base in REDUCTIONS and msg_bytes % REDUCTION_ELEMENT_BYTES:
        return (
            f"{collective} reduces {REDUCTION_ELEMENT_BYTES}-byte floats: sizes must be multiples of "
            f"{REDUCTION_ELEMENT_BYTES} bytes, got {msg_bytes}"
        )
    per_rank_total = msg_bytes if base in ("allreduce", "bcast", "reduce") else msg_bytes * ranks
    if base in VECTOR_COLLECTIVES:
        per_rank_total *= 2  # a skewed or sparse distribution gives some rank up to twice the mean
    if per_rank_total > _INT_MAX:
        return f"{collective} of {msg_bytes} bytes on {ranks} ranks needs buffers over 2 GiB"
    return None


def check_size(collective: str, msg_bytes: int, ranks: int) -> int:
    problem = size_problem(collective, msg_bytes, ranks)
    if problem:
        raise UsageError(problem)
    return msg_bytes


def check_ranks(ranks: int) -> int:
    if ranks < 1:
        raise UsageError(f"ranks must be at least 1, got {ranks}")
    return ranks


def is_default(adapter: VendorAdapter, algorithm: str) -> bool:
    """True for 'default' and for the library's own spelling of 'let the library choose'."""
    return algorithm in (DEFAULT_ALGORITHM, adapter.default_name())


def check_algorithm(adapter: VendorAdapter, collective: str, algorithm: str) -> str:
    """The canonical algorithm name ('default' for the library's choice), or UsageError naming the valid ones."""
    if is_default(adapter, algorithm):
        return DEFAULT_ALGORITHM
    return adapter.check_algorithm(collective, algorithm).name


def algorithm_names(adapter: VendorAdapter, collective: str) -> list[str]:
    """Every algorithm the library offers for `collective`, after 'default'."""
    return [DEFAULT_ALGORITHM] + [a.name for a in adapter.algorithms(collective)]


def parse_algorithms(adapter: VendorAdapter, collective: str, text: str) -> list[str]:
    """'all' -> default + every algorithm; 'a,b' -> validated names (order kept, duplicates dropped)."""
    text = text.strip()
    if text.lower() == "all":
        return algorithm_names(adapter, collective)
    names = [check_algorithm(adapter, collective, part.strip()) for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(
            f"no algorithms in {text!r}; valid for {collective}: all, "
            f"{', '.join(algorithm_names(adapter, collective))}"
        )
    return list(dict.fromkeys(names))
