"""What a profile says about the application's non-blocking collectives: its own computation between start and
wait per cell, and the objective (`--objective`, collectives.OBJECTIVES) that fits how it uses them.

The interposer (c/tmpi_profile.c) records per non-blocking row: `time_ns`, the time in the start calls (every
call); for the calls a wait or test was seen to complete (`completed`), `completion_ns`, from the entry of the
start call to the return of the wait or test that completed it; `wait_ns`, the time spent in the waits and tests
that named the request, shared (a call naming n active requests gives each 1/n of its time: the application's
time in the collective, which the shares add up); and `blocked_ns`, the whole time of those waits and tests (not
shared). So per completed call

    window = completion - start - blocked        (means per call, clamped at 0)

is the time between the start's return and the completing wait's return that the application spent outside
every wait and test naming the request: its own computation, plus any other MPI call it made in between that
did not name it (the halo's sends, the wait of another collective, a blocking collective): time the collective
could progress behind. The shared `wait_ns` would leave the (n-1)/n of a Waitall of n requests in the window,
so a profile written before `blocked_ns` (2026-11-28) overstates a window completed by a Waitall of several.
It is what tune's `time` objective measures the algorithms with (start + a computation of that length + wait),
so `tune --from-profile` takes it as the cell's computation. Where the window is below
`NO_WINDOW_SHARE` of the completion time (or under `NO_WINDOW_US`), the application waits right after
starting: nothing can hide behind the collective, and the figure that fits is its latency.

Limits: the start's mean is over every call, the rest over completed ones; a request freed with
MPI_Request_free, or completed by a Fortran Waitany/Waitsome/Testany/Testsome (not converted), is never
seen completed: a row with none completed gives no window (None: the library default's latency sizes the
computation, as without a profile).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tunempi.profile.reader import NS, CollectiveRecord, Profile
from tunempi.units import format_size

#: Below this share of the mean completion time the window is no window: the application waits right after
#: starting (what is left is the interposer's own time between the two calls, and noise).
NO_WINDOW_SHARE = 0.05
#: ... or below this many microseconds, whatever the share.
NO_WINDOW_US = 1.0

LATENCY = "latency"
TIME = "time"


@dataclass(frozen=True)
class NonblockingUse:
    """One non-blocking row of a profile (collective, communicator size, nodes, ppn, size bucket): what the
    application does between start and wait, per call (means, microseconds)."""

    collective: str
    comm_size: int
    nodes: int
    ppn: int
    size_lo: int
    size_hi: int
    calls: int  # summed over ranks
    completed: int  # of those, seen completed by a wait or test
    start_us: float  # mean time in the start call
    wait_us: float  # mean time in the waits and tests that named it, shared (completed calls)
    blocked_us: float  # mean whole time of those waits and tests (completed calls; = wait_us in older files)
    completion_us: float  # mean time from the start's entry to the completing wait's return (completed calls)
    sizes: tuple[int, ...] = ()  # the exact sizes started with, where the profile kept them

    @property
    def size_text(self) -> str:
        if self.sizes:
            return ", ".join(format_size(size) for size in self.sizes)
        return format_size(self.size_hi) if self.size_lo >= self.size_hi else \
            f"{format_size(self.size_lo)}-{format_size(self.size_hi)}"

    @property
    def seen(self) -> bool:
        """Some call was seen completed: the window is known."""
        return self.completed > 0

    @property
    def window_us(self) -> float | None:
        """The application's computation between start and wait per call (completion - start - wait, >= 0);
        None when no call was seen completed."""
        if not self.seen:
            return None
        return max(0.0, self.completion_us - self.start_us - self.blocked_us)

    @property
    def overlaps(self) -> bool | None:
        """Whether the application computes between start and wait (None: not known)."""
        window = self.window_us
        if window is None:
            return None
        return window >= NO_WINDOW_US and window >= NO_WINDOW_SHARE * self.completion_us

    @property
    def objective(self) -> str | None:
        """The objective that fits this cell: time (with `compute_us`) where it overlaps, else latency; None
        when nothing was seen completed."""
        overlaps = self.overlaps
        return None if overlaps is None else TIME if overlaps else LATENCY

    @property
    def compute_us(self) -> float | None:
        """The computation tune's `time` measures this cell with: the window where it overlaps, 0 where it
        waits right after starting (time with no computation is latency), None when not known."""
        overlaps = self.overlaps
        if overlaps is None:
            return None
        return round(self.window_us or 0.0, 3) if overlaps else 0.0

    @property
    def label(self) -> str:
        """'iallreduce 4 ranks (1x4) 1 KiB-2 KiB' as a source of a computation."""
        scale = f"{self.nodes}x{self.ppn}" if self.nodes >= 1 else "?"
        return f"{self.collective} {self.comm_size} ranks ({scale}) {self.size_text}"

    @property
    def text(self) -> str:
        """'iallreduce 2 ranks (1x2) 8 KiB: 200 calls, start 1.2us, computes 40.0us, waits 3.1us (start to
        completion 44.3us): time', as tune --from-profile and advise print a row."""
        if not self.seen:
            return (f"{self.label}: {self.calls} calls, start {self.start_us:.1f}us, none seen completed (its "
                    "computation between start and wait is not known)")
        return (f"{self.label}: {self.calls} calls, start {self.start_us:.1f}us, computes {self.window_us or 0.0:.1f}us, "
                f"waits {self.blocked_us:.1f}us (start to completion {self.completion_us:.1f}us): {self.objective}")

    def to_dict(self) -> dict[str, object]:
        return {"collective": self.collective, "comm_size": self.comm_size, "nodes": self.nodes, "ppn": self.ppn,
                "size_lo": self.size_lo, "size_hi": self.size_hi, "calls": self.calls, "completed": self.completed,
                "start_us": round(self.start_us, 3), "wait_us": round(self.wait_us, 3), "blocked_us": round(self.blocked_us, 3),
                "completion_us": round(self.completion_us, 3),
                "window_us": None if self.window_us is None else round(self.window_us, 3),
                "objective": self.objective, "compute_us": self.compute_us}


def use_of(record: CollectiveRecord) -> NonblockingUse:
    """The per-call means of one non-blocking row."""
    done = record.completed
    return NonblockingUse(
        record.collective, record.comm_size, record.nodes, record.ppn, record.size_lo, record.size_hi, record.calls,
        done, record.time_ns * NS * 1e6 / record.calls if record.calls else 0.0,
        record.wait_ns * NS * 1e6 / done if done else 0.0,
        (record.wait_ns if record.blocked_ns is None else record.blocked_ns) * NS * 1e6 / done if done else 0.0,
        record.completion_ns * NS * 1e6 / done if done else 0.0, tuple(sorted(record.exact_sizes or ())))


def nonblocking_uses(profile: Profile, collectives: Iterable[str] | None = None) -> tuple[NonblockingUse, ...]:
    """Every non-blocking row of the profile with calls (of `collectives` only, when given), most time first."""
    wanted = set(collectives) if collectives is not None else None
    rows = [r for r in profile.collectives if not r.blocking and r.calls
            and (wanted is None or r.collective in wanted)]
    return tuple(use_of(r) for r in sorted(rows, key=lambda r: -r.time_s))


@dataclass(frozen=True)
class ApplicationObjective:
    """The objective a profile implies for its non-blocking collectives, and why."""

    objective: str | None  # time, latency; None: the profile uses none, or none was seen completed
    uses: tuple[NonblockingUse, ...]
    reason: str


def application_objective(uses: Sequence[NonblockingUse]) -> ApplicationObjective:
    """`time` where some cell computes between start and wait (each cell with its own computation; a cell
    that waits right away gets 0, which `time` measures as latency), `latency` where every cell seen waits
    right after starting, None where no call was seen completed (or there is no non-blocking call)."""
    if not uses:
        return ApplicationObjective(None, (), "the application starts no non-blocking collective")
    seen = [u for u in uses if u.seen]
    if not seen:
        return ApplicationObjective(None, tuple(uses), "no wait or test was seen completing a non-blocking "
                                    "collective (freed requests, or Fortran Waitany/Waitsome): its computation "
                                    "between start and wait is not known")
    overlapping = [u for u in seen if u.overlaps]
    if not overlapping:
        return ApplicationObjective(LATENCY, tuple(uses), "the application waits right after starting "
                                    f"({_windows(seen)}): nothing to hide the collective behind, so its latency")
    waiting = len(seen) - len(overlapping)
    return ApplicationObjective(TIME, tuple(uses), "the application computes between start and wait "
                                f"({_windows(overlapping)}): start + that computation + wait, each cell with its "
                                "own" + (f"; {waiting} other cell{'s' if waiting > 1 else ''} wait right after "
                                         "starting (no computation: their latency)" if waiting else ""))


def chosen_objective(implied: ApplicationObjective, given: str | None, path: str) -> tuple[str | None, str]:
    """(objective, where it came from) for a tune from a profile: `given` (--objective) wins, else the profile's
    (`profile PATH`), else None ("default": tune's default, time sized by the library default's latency)."""
    if given is not None:
        return given, "--objective"
    if implied.objective is None:
        return None, "default"
    return implied.objective, f"profile {path}"


def computation_rows(uses: Iterable[NonblockingUse], path: str) -> list[dict[str, Any]]:
    """The rows with a known computation between start and wait, as plain data (the fields of
    tune.objective.ApplicationComputation, which tune takes; JSON for autotune's state)."""
    return [{"collective": u.collective, "ranks": u.comm_size, "nodes": max(u.nodes, 1), "ppn": max(u.ppn, 1),
             "size_lo": u.size_lo, "size_hi": u.size_hi, "compute_us": u.compute_us,
             "source": f"profile {path}: {u.label}"} for u in uses if u.compute_us is not None]


def _windows(uses: Sequence[NonblockingUse]) -> str:
    return "; ".join(f"{u.label}: {u.window_us:.1f}us of {u.completion_us:.1f}us" for u in uses[:4]) + (
        f"; {len(uses) - 4} more" if len(uses) > 4 else "")
