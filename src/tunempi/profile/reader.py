"""Read the interposer's JSON profile (schema "tunempi-profile", versions 1 and 2) into frozen records.

The file is written by rank 0 at MPI_Finalize (c/tmpi_profile.c); docs/profile.md describes every field.
Times in the file are integer nanoseconds summed over ranks; the records here keep them and offer
seconds and shares.

`Profile.usage()` is the small interface that `tunempi advise` builds on: one row per (collective,
communicator size, nodes, ppn, message size) the application used, with its calls and time.

Version 2 added `count_shapes` to the rows of vector collectives (how each call's counts differ between
ranks); a version 1 file reads with none recorded.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunempi.collectives import REDUCTIONS
from tunempi.errors import UsageError

#: Collectives (blocking names) whose every significant datatype is significant on every rank, so the
#: interposer reads them all (profile/generate.py `datatypes`); the rooted ones' root-only datatypes it never reads.
FULLY_TYPED: frozenset[str] = frozenset({
    "allreduce", "bcast", "allgather", "allgatherv", "alltoall", "alltoallv", "reduce", "reduce_scatter",
    "reduce_scatter_block", "scan", "exscan"})

SCHEMA = "tunempi-profile"
SCHEMA_VERSION = 2
READABLE_VERSIONS: tuple[int, ...] = (1, 2)
NS = 1e-9

#: The shapes the interposer sorts a vector collective's counts into (c/tmpi_counts.h), in its order: the
#: bench engine's count distributions (collectives.DISTRIBUTIONS), which `tune --distribution` measures.
COUNT_SHAPES: tuple[str, ...] = ("uniform", "skewed", "sparse")


def dominant_shape(shapes: Mapping[str, int]) -> str | None:
    """The shape with the most calls (a tie goes to the earlier of COUNT_SHAPES: uniform, the engine's
    default, before skewed before sparse); None when no call was classified."""
    if sum(shapes.values()) <= 0:
        return None
    return max(COUNT_SHAPES, key=lambda s: (shapes.get(s, 0), -COUNT_SHAPES.index(s)))


def sum_shapes(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total = dict.fromkeys(COUNT_SHAPES, 0)
    for c in counts:
        for shape, n in c.items():
            total[shape] = total.get(shape, 0) + n
    return total


@dataclass(frozen=True)
class CollectiveRecord:
    """One (collective, communicator size, nodes, ppn, power-of-two size bucket), merged over ranks.

    calls, bytes and time_ns are sums over all ranks; time_min_ns/time_max_ns are over single calls;
    exact_sizes maps each distinct message size to its number of calls (None when there were more than
    the interposer keeps, 8).

    Non-blocking collectives (`blocking` false): time_ns (and min/max) is the time to start them; `completed`
    is how many of the calls a wait or test saw complete, `completion_ns` their time from the start to the
    return of that wait or test, `wait_ns` the time the application spent in the waits and tests that named
    them (a call naming n active requests gives each 1/n of its time), `blocked_ns` the whole time of those waits
    and tests (not shared: the application computed nothing then, whichever request it waited for; None in
    files written before 2026-11-28). Their time in the application, `time_s`, is starting plus waiting.

    Vector collectives (schema version 2): `count_shapes` counts the calls by the shape of the counts each rank
    passed (uniform, skewed, sparse; docs/profile.md "Count shapes"), summed over ranks: every rank's calls for
    alltoallv, alltoallw, allgatherv and reduce_scatter, the root's only for gatherv and scatterv, none on
    intercommunicators. None where no call was classified (and in version 1 files).
    """

    collective: str
    blocking: bool
    comm_size: int
    nodes: int
    ppn: int
    size_lo: int
    size_hi: int
    ranks: int
    calls: int
    bytes: int
    time_ns: int
    time_min_ns: int
    time_max_ns: int
    exact_sizes: dict[int, int] | None
    completed: int = 0
    completion_ns: int = 0
    wait_ns: int = 0
    blocked_ns: int | None = None
    count_shapes: dict[str, int] | None = None
    #: Reductions: calls that passed an MPI_Op, and how many of them a non-commutative one (MPI_Op_commutative);
    #: None where the profile does not say (written before it recorded them).
    op_calls: int | None = None
    noncommutative_calls: int | None = None
    #: Calls whose datatypes the interposer sees (those every rank makes significant), and how many of them
    #: passed a derived one; None where the profile does not say.
    typed_calls: int | None = None
    derived_type_calls: int | None = None

    @property
    def time_s(self) -> float:
        """The application's time in these calls: for a non-blocking collective, starting it plus waiting."""
        return (self.time_ns + self.wait_ns) * NS

    @property
    def mean_completion_s(self) -> float:
        """Non-blocking: the mean time from a call's start to its completion (0 when none was seen)."""
        return self.completion_ns * NS / self.completed if self.completed else 0.0

    @property
    def mean_time_s(self) -> float:
        return self.time_s / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class RankSummary:
    rank: int
    host: str
    wall_ns: int
    mpi_ns: int
    collective_ns: int
    p2p_ns: int
    collective_calls: int
    send_calls: int
    cpu_ns: int | None = None  # the process's CPU time while recording (profiles before 2026-11-28: None)
    span_ns: int | None = None  # the wall time cpu_ns was taken over

    @property
    def on_cpu(self) -> float | None:
        """The share of its run the rank spent on a CPU (None: not recorded)."""
        if self.cpu_ns is None or not self.span_ns:
            return None
        return self.cpu_ns / self.span_ns


@dataclass(frozen=True)
class P2PBucket:
    """Point-to-point sends with size in (lo, hi] bytes (hi None: no upper bound; the first bucket is [0, hi])."""

    lo: int
    hi: int | None
    calls: int
    bytes: int

    @property
    def label(self) -> str:
        from tunempi.units import format_size

        if self.lo == 0:
            return f"<= {format_size(self.hi or 0)}"
        if self.hi is None:
            return f"> {format_size(self.lo)}"
        return f"{format_size(self.lo)} - {format_size(self.hi)}"


@dataclass(frozen=True)
class UsageRow:
    """What `advise` needs: a message size the application used at a scale, how often, how long."""

    collective: str
    comm_size: int
    nodes: int
    ppn: int
    msg_size: int  # exact size when known, else the bucket's upper bound
    calls: int  # summed over ranks
    time_s: float  # summed over ranks
    ranks: int  # ranks that made these calls


@dataclass(frozen=True)
class Profile:
    header: dict[str, Any]
    ranks: tuple[RankSummary, ...]
    collectives: tuple[CollectiveRecord, ...]
    p2p: tuple[P2PBucket, ...]
    #: MPI_T performance variables (TUNEMPI_PVARS=1): name -> {"sum", "max", "class"} over the ranks, or
    #: None where a rank could not read it; empty when not asked for or the library offers none.
    pvars: dict[str, dict[str, float] | None] = field(default_factory=dict)
    pvars_offered: int = -1  # how many the library lists (-1: not asked for)

    @property
    def wall_s(self) -> float:
        """Run time summed over ranks (rank-seconds): the denominator of every share."""
        return sum(r.wall_ns for r in self.ranks) * NS

    @property
    def mpi_s(self) -> float:
        return sum(r.mpi_ns for r in self.ranks) * NS

    @property
    def collective_s(self) -> float:
        return sum(r.collective_ns for r in self.ranks) * NS

    @property
    def p2p_s(self) -> float:
        return sum(r.p2p_ns for r in self.ranks) * NS

    @property
    def elapsed_s(self) -> float:
        """The longest rank's run time (from MPI_Init to MPI_Finalize)."""
        return max((r.wall_ns for r in self.ranks), default=0) * NS

    def least_on_cpu(self) -> RankSummary | None:
        """The rank that spent the smallest share of its run on a CPU (None: not recorded)."""
        recorded = [r for r in self.ranks if r.on_cpu is not None]
        return min(recorded, key=lambda r: r.on_cpu or 0.0) if recorded else None

    @property
    def mpi_fraction(self) -> float:
        return self.mpi_s / self.wall_s if self.wall_s else 0.0

    def time_by_collective(self) -> list[tuple[str, int, float]]:
        """(collective, calls, time in s summed over ranks), most time first."""
        calls: dict[str, int] = defaultdict(int)
        time: dict[str, float] = defaultdict(float)
        for record in self.collectives:
            calls[record.collective] += record.calls
            time[record.collective] += record.time_s
        return sorted(((name, calls[name], time[name]) for name in calls), key=lambda row: -row[2])

    def count_shapes(self) -> dict[str, dict[str, int]]:
        """collective -> calls per count shape over all its rows, for the collectives with calls classified."""
        found: dict[str, list[dict[str, int]]] = defaultdict(list)
        for record in self.collectives:
            if record.count_shapes:
                found[record.collective].append(record.count_shapes)
        return {name: sum_shapes(rows) for name, rows in sorted(found.items())}

    def commutative_ops_only(self, collectives: Iterable[str] | None = None) -> bool:
        """Every reduction of the profile (of `collectives`, if given) passed a commutative operation, and the
        profile recorded it (a profile from before it did says nothing: False). True where none reduces."""
        return all(r.op_calls is not None and r.noncommutative_calls == 0 for r in self.reduction_rows(collectives))

    def reduction_rows(self, collectives: Iterable[str] | None = None) -> list[CollectiveRecord]:
        """The rows of the collectives that reduce (of `collectives`, if given): what commutative_ops_only reads."""
        wanted = None if collectives is None else set(collectives)
        return [r for r in self.collectives if (wanted is None or r.collective in wanted)
                and (r.op_calls or r.collective.removeprefix("i") in REDUCTIONS | {"scan", "exscan"})]

    def typed_rows(self) -> list[CollectiveRecord]:
        """The rows whose datatypes count (every collective but barrier): what predefined_types_only reads."""
        return [r for r in self.collectives if r.collective.removeprefix("i") != "barrier"]

    def predefined_types_only(self) -> bool:
        """Every collective call of the profile passed predefined datatypes only, and the profile saw every
        datatype that counted: no rooted collective whose root-only datatype the interposer does not read
        (gather, scatter and their v forms), no alltoallw, and a file from before it recorded them says
        nothing (False). Predefined types are contiguous, start at the buffer pointer and count alike on every
        rank: what tune --assume-contiguous-datatypes --assume-same-counts vouch for."""
        return all(r.collective.removeprefix("i") in FULLY_TYPED and r.typed_calls == r.calls
                   and r.derived_type_calls == 0 for r in self.typed_rows())

    def dominant_shapes(self) -> dict[str, str]:
        """collective -> the shape most of its classified calls had (dominant_shape)."""
        return {name: shape for name, shapes in self.count_shapes().items()
                if (shape := dominant_shape(shapes)) is not None}

    def usage(self) -> list[UsageRow]:
        """One row per (collective, scale, message size); time split over exact sizes by their calls."""
        rows = []
        for r in self.collectives:
            sizes = r.exact_sizes or {r.size_hi: r.calls}
            for size, calls in sorted(sizes.items()):
                share = calls / r.calls if r.calls else 0.0
                rows.append(UsageRow(r.collective, r.comm_size, r.nodes, r.ppn, size, calls, r.time_s * share,
                                     r.ranks))
        return rows


def _require(data: dict[str, Any], key: str, path: Path) -> Any:
    if key not in data:
        raise UsageError(f"{path}: not a tunempi profile (missing {key!r})")
    return data[key]


def parse_profile(data: dict[str, Any], path: Path = Path("<profile>")) -> Profile:
    if data.get("schema") != SCHEMA:
        raise UsageError(f"{path}: not a tunempi profile (schema {data.get('schema')!r}, expected {SCHEMA!r})")
    if data.get("schema_version") not in READABLE_VERSIONS:
        raise UsageError(
            f"{path}: profile schema version {data.get('schema_version')!r}; this tunempi reads "
            + ", ".join(map(str, READABLE_VERSIONS))
        )
    collectives = []
    for row in _require(data, "collectives", path):
        exact = row["exact_sizes"]
        shapes = row.get("count_shapes")
        collectives.append(CollectiveRecord(
            collective=row["collective"], blocking=bool(row["blocking"]), comm_size=row["comm_size"],
            nodes=row["nodes"], ppn=row["ppn"], size_lo=row["size_lo"], size_hi=row["size_hi"],
            ranks=row["ranks"], calls=row["calls"], bytes=row["bytes"], time_ns=row["time_ns"],
            time_min_ns=row["time_min_ns"], time_max_ns=row["time_max_ns"],
            exact_sizes=None if exact is None else {int(k): int(v) for k, v in exact.items()},
            completed=int(row.get("completed", 0)), completion_ns=int(row.get("completion_ns", 0)),
            wait_ns=int(row.get("wait_ns", 0)),
            blocked_ns=int(row["blocked_ns"]) if "blocked_ns" in row else None,
            count_shapes=None if not shapes else {str(k): int(v) for k, v in shapes.items()},
            op_calls=int(row["op_calls"]) if "op_calls" in row else None,
            noncommutative_calls=int(row["noncommutative_calls"]) if "noncommutative_calls" in row else None,
            typed_calls=int(row["typed_calls"]) if "typed_calls" in row else None,
            derived_type_calls=int(row["derived_type_calls"]) if "derived_type_calls" in row else None,
        ))
    ranks = tuple(RankSummary(**row) for row in _require(data, "ranks", path))
    histogram = _require(data, "p2p_histogram", path)
    buckets, lo = [], 0
    for hi, calls, nbytes in zip(histogram["upper_bounds"], histogram["calls"], histogram["bytes"], strict=True):
        buckets.append(P2PBucket(lo, hi, calls, nbytes))
        lo = hi if hi is not None else lo
    return Profile(dict(_require(data, "header", path)), ranks, tuple(collectives), tuple(buckets),
                   dict(data.get("pvars") or {}), int(data.get("pvars_offered", -1)))


def load_profile(path: Path | str) -> Profile:
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read profile {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a tunempi profile")
    try:
        return parse_profile(data, path)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: malformed tunempi profile ({exc})") from exc
