"""The line protocol between the Python driver and the C engine (bench/c/engine.c).

Requests go to rank 0's stdin, one line each:

    point id=7 coll=allreduce bytes=1024 cvar=<name|-> set=<int|default|keep> newcomm=<0|1>
          warmup=64 min_iters=10 max_iters=1000 rel_ci=0.05 time_cap=1 [back_to_back=<n>] [spoil_every=<n>]
          [dist=<uniform|skewed|sparse>] [nb=<latency|overlap|time>] [compute=<seconds>]
    setup id=1 cvar=<name> set=<int> newcomm=<0|1>      (a cvar kept for the whole launch)
    quit

Rank 0 answers with one JSON object per line: first `{"event":"ready", ...}`, then one
`{"event":"point"|"setup", "id":..., "status":"ok"|"error", ...}` per request, in order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tunempi.collectives import DEFAULT_DISTRIBUTION, DISTRIBUTIONS, is_nonblocking
from tunempi.errors import MPIError

#: `set=` values that are not an int: restore the cvar's start-up value / write nothing.
SET_DEFAULT = "default"
SET_KEEP = "keep"

#: How a non-blocking collective is measured (`nb=`): start + MPI_Wait alone (the pure time, the point's
#: samples and median), or then also with a computation calibrated to that time between the two (OSU's
#: overlap method: the reply adds the overlapped time, the computation's and the overlap %).
NB_LATENCY = "latency"
NB_OVERLAP = "overlap"
#: start + a computation of a given length (`compute=`, seconds) + MPI_Wait in every timed iteration: the
#: point's samples and median are that time (tune --objective time: every algorithm of a cell on the same work).
NB_TIME = "time"
NB_MODES: tuple[str, ...] = (NB_LATENCY, NB_OVERLAP, NB_TIME)

_CVAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class MeasureSettings:
    """How long and how precisely to measure each point.

    warmup: untimed (but checked) iterations first, fewer where they take a quarter of time_cap_s (a
    library's first calls of a new large size can run several times slower: Intel MPI's, 4-5x for 10-35
    calls). Then iterations run in batches until the 95 %
    confidence interval of the median is within +-rel_ci of it (after min_iters), max_iters is reached,
    or time_cap_s of measuring is spent.
    back_to_back: calls per timed iteration, in a row with no barrier between them (as applications
    call); the iteration's time divided by it is the per-call sample. 1: every call between barriers.
    """

    warmup: int = 64
    min_iters: int = 10
    max_iters: int = 1000
    rel_ci: float = 0.05
    time_cap_s: float = 1.0
    back_to_back: int = 1

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.min_iters < 1 or self.max_iters < self.min_iters:
            raise ValueError(
                f"need warmup >= 0 and 1 <= min_iters <= max_iters, got {self.warmup}, "
                f"{self.min_iters}, {self.max_iters}"
            )
        if self.rel_ci < 0 or self.time_cap_s <= 0:
            raise ValueError(f"need rel_ci >= 0 and time_cap_s > 0, got {self.rel_ci}, {self.time_cap_s}")
        if not 1 <= self.back_to_back <= 1_000_000:
            raise ValueError(f"need 1 <= back_to_back <= 1000000, got {self.back_to_back}")


@dataclass(frozen=True)
class PointRequest:
    """One point for the engine: which collective at which size, and how to select the algorithm.

    cvar: the int control variable that selects the collective's algorithm (read back and reported),
    or None. set_value: an int to write to it, SET_DEFAULT (restore the start-up values of every cvar
    written so far) or SET_KEEP (write nothing: the algorithm was forced through the environment).
    new_communicator: measure on a communicator created after the write.
    spoil_every: a self-test of the engine's result check: spoil the result of every n-th iteration
    (warm-up included) on one rank; the reply's `errors` must then count exactly those iterations.
    distribution: how a vector collective's blocks differ between ranks around the mean block `msg_bytes`
    (collectives.DISTRIBUTIONS); sent only when not uniform, so uniform lines are as before.
    """

    id: int
    collective: str
    msg_bytes: int
    cvar: str | None = None
    set_value: int | str = SET_KEEP
    new_communicator: bool = False
    settings: MeasureSettings = MeasureSettings()
    spoil_every: int = 0
    distribution: str = DEFAULT_DISTRIBUTION
    #: Further (cvar, int) writes of this selection, made before `cvar`'s and undone by the next point
    #: that does not ask for them (MPICH's shared-memory level pinned to mpir beside a forced algorithm).
    #: Last, so that positional requests keep their meaning.
    also: tuple[tuple[str, int], ...] = ()
    #: A non-blocking collective's measurement (NB_MODES; "" for blocking collectives, and the engine's
    #: default NB_LATENCY for non-blocking ones): sent only when it is NB_OVERLAP or NB_TIME.
    nb: str = ""
    #: NB_TIME's computation between start and wait, in seconds (needed by it, refused without it).
    compute_s: float | None = None

    def encode(self) -> str:
        """The request line (without newline)."""
        if self.cvar is not None and not _CVAR_NAME.match(self.cvar):
            raise ValueError(f"not a cvar name: {self.cvar!r}")
        if not isinstance(self.set_value, int) and self.set_value not in (SET_DEFAULT, SET_KEEP):
            raise ValueError(f"set_value must be an int, {SET_DEFAULT!r} or {SET_KEEP!r}")
        if isinstance(self.set_value, int) and self.cvar is None:
            raise ValueError("writing a value needs a cvar")
        if self.also and not isinstance(self.set_value, int):
            raise ValueError("also= writes go with a written algorithm")
        for name, _ in self.also:
            if not _CVAR_NAME.match(name):
                raise ValueError(f"not a cvar name: {name!r}")
        if self.nb and self.nb not in NB_MODES:
            raise ValueError(f"unknown nb mode {self.nb!r}; valid: {', '.join(NB_MODES)}")
        if self.nb and not is_nonblocking(self.collective):
            raise ValueError(f"nb={self.nb} needs a non-blocking collective, not {self.collective!r}")
        if self.nb in (NB_OVERLAP, NB_TIME) and self.settings.back_to_back != 1:
            raise ValueError(f"nb={self.nb} times one call per iteration: back_to_back must be 1")
        if (self.nb == NB_TIME) != (self.compute_s is not None):
            raise ValueError("nb=time and compute_s go together")
        if self.compute_s is not None and not 0 <= self.compute_s <= 60:
            raise ValueError(f"compute_s must be within 0-60 s, got {self.compute_s}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {self.distribution!r}; valid: {', '.join(DISTRIBUTIONS)}")
        s = self.settings
        return (
            f"point id={self.id} coll={self.collective} bytes={self.msg_bytes} cvar={self.cvar or '-'} "
            f"set={self.set_value} newcomm={int(self.new_communicator)} warmup={s.warmup} "
            f"min_iters={s.min_iters} max_iters={s.max_iters} rel_ci={s.rel_ci:g} time_cap={s.time_cap_s:g}"
            + (" also=" + ",".join(f"{name}:{int(value)}" for name, value in self.also) if self.also else "")
            + (f" back_to_back={s.back_to_back}" if s.back_to_back != 1 else "")
            + (f" spoil_every={self.spoil_every}" if self.spoil_every else "")
            + (f" dist={self.distribution}" if self.distribution != DEFAULT_DISTRIBUTION else "")
            + (f" nb={self.nb}" if self.nb in (NB_OVERLAP, NB_TIME) else "")
            + (f" compute={self.compute_s:.9f}" if self.compute_s is not None else "")
        )


@dataclass(frozen=True)
class SetupRequest:
    """Write an int cvar on every rank for the rest of the launch (not undone by SET_DEFAULT points)."""

    id: int
    cvar: str
    value: int
    new_communicator: bool = False

    def encode(self) -> str:
        if not _CVAR_NAME.match(self.cvar):
            raise ValueError(f"not a cvar name: {self.cvar!r}")
        return f"setup id={self.id} cvar={self.cvar} set={int(self.value)} newcomm={int(self.new_communicator)}"


QUIT = "quit"


@dataclass(frozen=True)
class EngineReady:
    """The engine's first line: it is up, on these hosts, with this library."""

    ranks: int
    library: str
    hosts: tuple[str, ...]
    mpi_t: bool


@dataclass(frozen=True)
class PointReply:
    """The engine's answer to one point request (status "ok" or "error")."""

    id: int
    status: str
    error: str = ""
    cvar: str | None = None
    cvar_value: int | None = None
    cvar_consistent: bool = True
    iterations: int = 0
    warmup: int = 0
    errors: int = 0
    checked: int = 0
    stop: str = ""
    elapsed_s: float = 0.0
    median_us: float | None = None
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    samples_us: tuple[float, ...] = ()
    #: Non-blocking collectives: how they were measured (NB_MODES; "" for a blocking one). With NB_OVERLAP
    #: (each rank computes for its own pure time, the peers' method): the medians over `overlap_iterations`
    #: of start + computation + wait and of the computation alone (each iteration's slowest rank), rank 0's
    #: calibrated loop count, the share of its own pure time each rank hid behind its computation, in %
    #: (0-100; `overlap_pct_ranks`, by rank, with each rank's own pure time in `pure_us_ranks` and its own
    #: median start + computation + wait in `overlapped_us_ranks`) and their mean
    #: over ranks (`overlap_pct`), and per overlap iteration the time not hidden on the rank that waited
    #: longest (max over ranks of own overlapped - own compute). With NB_TIME, samples_us are start +
    #: computation + wait and compute_us the computation's median.
    nb: str = ""
    overlap_iterations: int = 0
    compute_loops: int = 0
    overlapped_us: float | None = None
    compute_us: float | None = None
    overlap_pct: float | None = None
    unhidden_samples_us: tuple[float, ...] = ()
    overlap_pct_ranks: tuple[float, ...] = ()
    pure_us_ranks: tuple[float, ...] = ()
    overlapped_us_ranks: tuple[float, ...] = ()
    #: The machine's state just before the point: the fastest one-way time of a 256 KiB ping-pong between rank
    #: 0 and the last rank (engine.c probe_state; None with one rank). Launches whose probes differ by more
    #: than machine_state.STATE_RATIO met the machine in different states.
    probe_us: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def overlap_percent(pure_us: float, overlapped_us: float, compute_us: float) -> float:
    """OSU's overlap: the share of the pure time hidden behind the computation, clamped to 0-100 %."""
    if pure_us <= 0:
        return 0.0
    return max(0.0, min(100.0, 100.0 * (1.0 - (overlapped_us - compute_us) / pure_us)))


@dataclass(frozen=True)
class SetupReply:
    id: int
    status: str
    error: str = ""
    cvar_value: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def decode_line(line: str) -> EngineReady | PointReply | SetupReply:
    """Parse one line from the engine; MPIError on anything that is not a known JSON event."""
    try:
        data: dict[str, Any] = json.loads(line)
    except json.JSONDecodeError as exc:
        raise MPIError(f"engine printed a line that is not JSON: {line[:200]!r}") from exc
    event = data.get("event") if isinstance(data, dict) else None
    if event == "ready":
        return EngineReady(
            ranks=int(data["ranks"]), library=str(data["library"]),
            hosts=tuple(str(h) for h in data.get("hosts", ())), mpi_t=bool(data.get("mpi_t", False)),
        )
    if event == "setup":
        ok = data.get("status") == "ok"
        return SetupReply(
            id=int(data.get("id", -1)), status="ok" if ok else "error", error=str(data.get("error", "")),
            cvar_value=data.get("cvar_value") if ok else None,
        )
    if event == "point":
        if data.get("status") != "ok":
            return PointReply(id=int(data.get("id", -1)), status="error", error=str(data.get("error", "")))
        return PointReply(
            id=int(data["id"]), status="ok", cvar=data.get("cvar"), cvar_value=data.get("cvar_value"),
            cvar_consistent=bool(data.get("cvar_consistent", True)), iterations=int(data["iterations"]),
            warmup=int(data["warmup"]), errors=int(data["errors"]), checked=int(data["checked"]),
            stop=str(data["stop"]), elapsed_s=float(data["elapsed_s"]), median_us=float(data["median_us"]),
            ci_low_us=float(data["ci_low_us"]), ci_high_us=float(data["ci_high_us"]),
            samples_us=tuple(float(x) for x in data["samples_us"]),
            nb=str(data.get("nb", "")),
            overlap_iterations=int(data.get("overlap_iterations", 0)),
            compute_loops=int(data.get("compute_loops", 0)),
            overlapped_us=float(data["overlapped_us"]) if "overlapped_us" in data else None,
            compute_us=float(data["compute_us"]) if "compute_us" in data else None,
            overlap_pct=float(data["overlap_pct"]) if "overlap_pct" in data else None,
            unhidden_samples_us=tuple(float(x) for x in data.get("unhidden_samples_us", ())),
            overlap_pct_ranks=tuple(float(x) for x in data.get("overlap_pct_ranks", ())),
            pure_us_ranks=tuple(float(x) for x in data.get("pure_us_ranks", ())),
            overlapped_us_ranks=tuple(float(x) for x in data.get("overlapped_us_ranks", ())),
            probe_us=float(data["probe_us"]) if "probe_us" in data else None,
        )
    raise MPIError(f"engine printed an unknown event: {line[:200]!r}")
