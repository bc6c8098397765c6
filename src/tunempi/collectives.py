"""The vendor-neutral vocabulary of collectives that tunempi knows.

Message sizes follow OSU's conventions (shared dataset format): the per-rank buffer for
allreduce/bcast/reduce, the per-destination block for allgather/alltoall/gather/scatter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tunempi.errors import UsageError

COLLECTIVES: tuple[str, ...] = (
    "allreduce", "bcast", "allgather", "alltoall", "reduce", "reduce_scatter",
    "gather", "scatter", "barrier", "allgatherv", "alltoallv", "reduce_scatter_block", "gatherv", "scatterv",
    "alltoallw", "iallreduce", "ibcast", "ialltoall", "iallgather",
)

#: Non-blocking collectives (MPI_Iallreduce, ...) -> the blocking collective each one computes: the same
#: buffers, sizes (OSU's conventions) and results; a library chooses their algorithms separately (issue 41).
#: The engine measures them started, then completed with MPI_Wait (latency), and with a computation between
#: the two (overlap): docs/bench.md.
NONBLOCKING: dict[str, str] = {
    "iallreduce": "allreduce", "ibcast": "bcast", "ialltoall": "alltoall", "iallgather": "allgather",
}

#: What `bench`, `tune` and `verify` minimise for a non-blocking collective (`--objective`; recorded in the
#: manifest and in every stored point, so that figures of different objectives never mix; verify compares
#: under the tuning's): `time` (the default: start + a computation + MPI_Wait, the computation of one fixed
#: length per (collective, size, layout) shared by every algorithm of that cell, the library default's
#: measured latency there: what an application that overlaps sees; engine nb=time), `latency` (start +
#: MPI_Wait back to back, OSU's pure time; engine nb=latency) and `overlap` (the share of the collective hidden
#: behind a computation as long as each rank's own latency, as IMB-NBC and OSU calibrate it; minimised as the
#: time NOT hidden, per iteration the largest over ranks of own overlapped - own computation; engine nb=overlap). Blocking collectives are measured as they are (their
#: points' objective is `latency`) whatever the objective (docs/tune.md, "Objectives").
OBJECTIVES: tuple[str, ...] = ("time", "latency", "overlap")
DEFAULT_OBJECTIVE = "time"
#: The objective of a point or a manifest from before `--objective` was measured (issue 41), and of every
#: blocking collective's point: start to end of the call(s).
LATENCY_OBJECTIVE = "latency"

#: The algorithm name that means "the library's own choice" everywhere: the store, rule sets, tuning
#: files, datasets, online tables.
DEFAULT_ALGORITHM = "default"

#: Collectives whose payload is a reduction over typed elements (sizes are multiples of the element).
REDUCTIONS: frozenset[str] = frozenset({"allreduce", "reduce", "reduce_scatter", "reduce_scatter_block",
                                        "iallreduce"})

#: Collectives whose message size (OSU's convention) is the block each rank sends to or receives from
#: each peer; for the others it is the whole buffer, which the algorithms split among the ranks.
BLOCK_COLLECTIVES: frozenset[str] = frozenset({"allgather", "allgatherv", "alltoall", "alltoallv", "gather",
                                               "scatter", "gatherv", "scatterv", "alltoallw", "iallgather",
                                               "ialltoall"})


#: Collectives whose blocks may differ between ranks (count and displacement arrays; alltoallw's datatypes too:
#: the engine measures it as alltoallv with an MPI_BYTE type per peer).
VECTOR_COLLECTIVES: frozenset[str] = frozenset({"allgatherv", "alltoallv", "gatherv", "scatterv", "alltoallw"})

#: The vector collectives whose each rank's counts are its own (every rank sends and receives a block per
#: peer, and no rank sees the others' counts): a tuning file keyed on a rank's own total could choose
#: different algorithms on the ranks of one call (mpi/vendor.py selects_by_size).
ALL_TO_ALL_VECTOR_COLLECTIVES: frozenset[str] = frozenset({"alltoallv", "alltoallw"})

#: The vector collectives whose counts no rank but the root knows in full (gatherv's recvcounts, scatterv's
#: sendcounts): no tuning file can choose their algorithm by a size every rank of a call computes alike.
ROOTED_VECTOR_COLLECTIVES: frozenset[str] = frozenset({"gatherv", "scatterv"})

#: Collectives the online mode switches per call: those whose message size (tunempi's convention) is the
#: same on every rank of the call, so every rank finds the same cell and draws the same algorithm. Not
#: alltoallv, alltoallw, gatherv, scatterv: each rank's size is its own blocks' (their counts differ between ranks),
#: so ranks of one call would find different cells (and could run different algorithms). The non-blocking
#: ones are switched at their start (MPICH and Open MPI's libnbc read their algorithm there; issue 41); a
#: record's time runs from the start to the wait or test that completes it.
ONLINE_SWITCHABLE: tuple[str, ...] = (
    "allreduce", "bcast", "allgather", "alltoall", "reduce", "barrier", "gather", "scatter",
    "reduce_scatter", "reduce_scatter_block", "allgatherv",
    "iallreduce", "ibcast", "ialltoall", "iallgather",
)

#: How a vector collective's blocks differ between ranks around its mean block (the message size, as the
#: profiler records it): uniform (every block the same: OSU's v-benchmarks), skewed (rank r's blocks are
#: 2 (r + 1) / (ranks + 1) x the mean), sparse (alltoallv and alltoallw send to the next rank only; allgatherv and gatherv
#: take the even ranks' blocks only, scatterv sends to the even ranks only). gatherv/scatterv: the root
#: receives (sends) rank r's block as allgatherv's rank r contributes it. Every other collective is uniform.
#: bench/c/engine.h spells the same.
DISTRIBUTIONS: tuple[str, ...] = ("uniform", "skewed", "sparse")
DEFAULT_DISTRIBUTION = "uniform"


def parse_distributions(text: str) -> dict[str, str]:
    """'alltoallv=skewed,gatherv=sparse' -> {collective: distribution}: how `tune` measures a vector
    collective's blocks (the profile's distribution, or --distribution). Uniform entries are left out (the
    default), so a mapping names only what differs; anything but a vector collective or a known distribution
    is a UsageError."""
    found: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        collective, sep, distribution = part.partition("=")
        collective, distribution = collective.strip().lower(), distribution.strip().lower()
        if not sep or not collective or not distribution:
            raise UsageError(f"--distribution {part!r}: give COLLECTIVE=DISTRIBUTION, e.g. alltoallv=skewed")
        found.update(check_distributions({collective: distribution}))
        if distribution == DEFAULT_DISTRIBUTION:
            found.pop(collective, None)
    return found


def check_distributions(distributions: Mapping[str, str]) -> dict[str, str]:
    """The mapping without its uniform entries, or UsageError naming what is not a vector collective
    (VECTOR_COLLECTIVES) or not a distribution (DISTRIBUTIONS)."""
    for collective, distribution in distributions.items():
        if collective not in VECTOR_COLLECTIVES:
            raise UsageError(f"a count distribution applies to the vector collectives "
                             f"({', '.join(sorted(VECTOR_COLLECTIVES))}), not {collective!r}")
        if distribution not in DISTRIBUTIONS:
            raise UsageError(f"unknown count distribution {distribution!r} for {collective}; valid: "
                             f"{', '.join(DISTRIBUTIONS)}")
    return {c: d for c, d in sorted(distributions.items()) if d != DEFAULT_DISTRIBUTION}


def is_nonblocking(collective: str) -> bool:
    return collective in NONBLOCKING


def blocking_collective(collective: str) -> str:
    """'iallreduce' -> 'allreduce'; a blocking collective is its own."""
    return NONBLOCKING.get(collective, collective)


def check_collective(name: str) -> str:
    """Return the canonical name or raise UsageError naming the valid ones."""
    canonical = name.strip().lower()
    if canonical not in COLLECTIVES:
        raise UsageError(f"unknown collective {name!r}; valid: {', '.join(COLLECTIVES)}")
    return canonical


def check_objective(objective: str, collectives: Iterable[str] | None = None) -> str:
    """The objective's name, or UsageError: not one of OBJECTIVES, or `overlap` asked for `collectives` none
    of which is non-blocking (the others ignore the objective; overlap means nothing for them)."""
    name = objective.strip().lower()
    if name not in OBJECTIVES:
        raise UsageError(f"unknown --objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if collectives is not None and name == "overlap" and not any(is_nonblocking(c) for c in collectives):
        raise UsageError("--objective overlap applies to the non-blocking collectives "
                         f"({', '.join(NONBLOCKING)}) only; none is asked for")
    return name


def objective_of(collective: str, objective: str) -> str:
    """What a point of `collective` is measured for under `objective`: the objective for a non-blocking
    collective, LATENCY_OBJECTIVE (the call's time) for a blocking one."""
    return objective if is_nonblocking(collective) else LATENCY_OBJECTIVE


def parse_collectives(text: str, *, nonblocking: bool = True) -> list[str]:
    """'allreduce,bcast' -> ['allreduce', 'bcast'], validated, order kept, duplicates dropped.

    nonblocking: whether the caller takes the non-blocking collectives (every command does since issue 41
    step 4: bench, tune, verify, profile, online; a caller that cannot passes False)."""
    names = [check_collective(part) for part in text.split(",") if part.strip()]
    if not nonblocking and (refused := [name for name in names if name in NONBLOCKING]):
        raise UsageError(f"{', '.join(refused)}: non-blocking collectives are not taken here")
    if not names:
        raise UsageError(f"no collectives in {text!r}; valid: {', '.join(COLLECTIVES)}")
    return list(dict.fromkeys(names))
