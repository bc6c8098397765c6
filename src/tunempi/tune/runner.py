"""Measuring for the tuner: one long-lived engine session per layout, and the topology-aware parallel runner.

`LayoutRunner` keeps one engine launch per (layout, hosts) open for the whole tuning run and streams
points through it, switching algorithms between points through MPI_T (bench.sweep.selection_for):
a strategy's rounds cost no launches after the first.

`ParallelRunner` runs the points of one round, grouped by layout, as jobs under
launch.scheduler.GroupScheduler: jobs for different layouts run at the same time on disjoint node
groups (`topology`), one at a time (`serial`), or all at once on the same hosts (`local`, tests).
Results come back to the calling thread, which alone writes the store (SQLite connections stay in the
thread that made them).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tunempi.bench.engine import EngineSession, Layout, PointOutcome
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint, Selection, measure_point, selection_for, to_measurement
from tunempi.launch.hosts import NodeAllocation
from tunempi.launch.scheduler import BenchJob, GroupScheduler, Placement
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import CvarSwitch, VendorAdapter
from tunempi.store.results import Measurement
from tunempi.tune.machine_state import ranks_sharing_cores, usable_probe


@dataclass(frozen=True)
class PointResult:
    """One measured point: what the engine said, the stored record, and the wall time it cost."""

    point: BenchPoint
    layout: Layout
    outcome: PointOutcome
    measurement: Measurement
    wall_s: float
    launches: int  # engine launches this point caused (0 when the session was already up)
    #: Which launch of a block measured it where a block is several launches (tune/file_launches.py: the
    #: default's or a contender rank's); "" where one launch measures every side.
    side: str = ""
    #: The layout's nodes are emulated on this one machine (NodeAllocation.emulated): its ranks share its cores.
    emulated: bool = False

    @property
    def probe_us(self) -> float | None:
        """The machine's state just before the point (bench engine's probe; tune/machine_state.py), None where
        the layout oversubscribes the cores (machine_state.usable_probe)."""
        reply = self.outcome.reply
        return usable_probe(reply.probe_us if reply is not None else None,
                            ranks_sharing_cores(self.layout.ranks, self.layout.ppn_or_derived, self.emulated))


#: Engine sessions a layout keeps open at once where each forced algorithm needs its own launch (Intel MPI).
MAX_SESSIONS = 6


class LayoutRunner:
    """Measures points of one layout through engine sessions kept open between calls.

    Every session makes the strict-selection write at launch (the adapter's; a forced algorithm that
    cannot take a call then fails instead of falling back). A forced MPICH allreduce/bcast algorithm pins the shared-memory level to `mpir` (else
    release_gather silently runs instead after a few calls) with its own point (`Selection.also`), and the
    next default point puts it back: the library's default and its contenders are measured in ONE launch,
    so a launch that favours one side (10-30 % on this VM) cannot decide a cell (issue 39). So on MPICH
    and Open MPI one session per layout; a library that
    reads its choice at MPI_Init only (Intel MPI) needs a launch per forced algorithm (`Selection.env`):
    at most `max_sessions` stay open, the least recently used closed first. A point that
    was mostly measured while ranks were descheduled (`bench.sweep.contended`) is measured again, up to
    `retries` times, keeping the lowest median: the same rule as Sweep's.
    """

    def __init__(
        self,
        library: MPILibrary,
        adapter: VendorAdapter,
        layout: Layout,
        *,
        settings: MeasureSettings,
        allocation: NodeAllocation | None = None,
        system: str = "",
        point_timeout_s: float | None = None,
        executable: Path | None = None,
        retries: int = 2,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.library = library
        self.adapter = adapter
        self.layout = layout
        self.settings = settings
        self.system = system
        self.retries = retries
        env = dict(adapter.launch_env())
        if layout.nodes == 1 and allocation is None:
            env.update(adapter.single_node_env())  # faster start-up, same collectives
        self._env = env
        self._allocation = allocation
        self._point_timeout_s = point_timeout_s
        self._executable = executable
        strict = adapter.strict_selection_switch()  # a forced algorithm that cannot take a call fails
        self._strict: tuple[CvarSwitch, ...] = (strict,) if strict is not None else ()
        # forced environment -> its session, the most recently used last
        self.sessions: dict[tuple[tuple[str, str], ...], EngineSession] = {}
        self.max_sessions = max(1, max_sessions)
        self._closed_launches = 0
        self._next_id = 0
        self._lock = threading.Lock()

    @property
    def launches(self) -> int:
        return self._closed_launches + sum(session.launches for session in self.sessions.values())

    def _key(self, selection: Selection) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(selection.env.items()))

    def in_launch_order(self, points: Sequence[BenchPoint]) -> list[BenchPoint]:
        """`points` as given where their sessions can all stay open; else grouped by session (the open ones
        first, order kept within a group), so that each forced launch is made once per round and not once
        per point (Intel MPI: a preset per launch, 55 presets for allreduce and bcast)."""
        keys = [self._key(selection_for(self.adapter, point, "mpit")) for point in points]
        if len(set(keys) | set(self.sessions)) <= self.max_sessions:
            return list(points)
        first_seen = {key: (key not in self.sessions, i) for i, key in reversed(list(enumerate(keys)))}
        order = sorted(range(len(points)), key=lambda i: (first_seen[keys[i]], i))
        return [points[i] for i in order]

    def session_for(self, selection: Selection) -> EngineSession:
        key = self._key(selection)
        session = self.sessions.pop(key, None)
        if session is None:
            while len(self.sessions) >= self.max_sessions:
                self._close(self.sessions.pop(next(iter(self.sessions))))
            session = EngineSession(
                self.library, self.layout, env={**self._env, **selection.env}, setup=self._strict,
                executable=self._executable, allocation=self._allocation, point_timeout_s=self._point_timeout_s,
            )
        self.sessions[key] = session  # most recently used last
        return session

    def measure(self, point: BenchPoint, settings: MeasureSettings | None = None) -> PointResult:
        """Measure one point (never raises for a failure of the point: see PointOutcome.status)."""
        with self._lock:
            selection = selection_for(self.adapter, point, "mpit")
            session = self.session_for(selection)
            launches_before = self.launches
            started = time.perf_counter()
            outcome = measure_point(session, point, selection, settings or self.settings,
                                    next_id=self._take_id, retries=self.retries,
                                    says_not_usable=self.adapter.says_not_usable)
            wall = time.perf_counter() - started
            measurement = to_measurement(self.library, self.layout, point, outcome, system=self.system)
            return PointResult(point, self.layout, outcome, measurement, wall, self.launches - launches_before,
                               emulated=self._allocation is not None and self._allocation.emulated)

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()

    def _close(self, session: EngineSession) -> None:
        session.close()
        self._closed_launches += session.launches

    def relaunch(self) -> None:
        """Close every session: the next point starts a new launch (tune's launches as blocks)."""
        with self._lock:
            for session in self.sessions.values():
                self._close(session)
            self.sessions.clear()

    def kill(self) -> None:
        for session in self.sessions.values():
            session.kill()


RunnerFactory = Callable[[Layout, NodeAllocation | None], LayoutRunner]


@dataclass(frozen=True)
class JobRecord:
    """One scheduled job of a ParallelRunner: a layout's points measured on `hosts` from start to end
    (time.time() seconds); the evidence that concurrent jobs really ran on disjoint nodes."""

    layout: Layout
    hosts: tuple[str, ...]
    start: float
    end: float
    points: int

    def overlaps(self, other: JobRecord) -> bool:
        return self.start < other.end and other.start < self.end


def most_at_once(records: Sequence[JobRecord]) -> int:
    """The largest number of jobs that ran at the same moment."""
    events = sorted([(r.start, 1) for r in records] + [(r.end, -1) for r in records], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak
OnPoint = Callable[[PointResult], None]


class ParallelRunner:
    """Runs rounds of points, one job per layout, under a GroupScheduler; keeps runners between rounds.

    allocation: the job's hosts (None: this machine only; every placement then runs locally).
    """

    def __init__(self, make_runner: RunnerFactory, scheduler: GroupScheduler,
                 allocation: NodeAllocation | None = None) -> None:
        self.make_runner = make_runner
        self.scheduler = scheduler
        self.allocation = allocation
        self.jobs: list[JobRecord] = []  # every job run so far, in the order they ended
        self._runners: dict[tuple[Layout, tuple[str, ...]], LayoutRunner] = {}
        self._stop = threading.Event()

    def runner_for(self, layout: Layout, hosts: tuple[str, ...]) -> LayoutRunner:
        key = (layout, hosts if self.allocation is not None else ())
        if key not in self._runners:
            allocation = None
            if self.allocation is not None:  # run exactly where the scheduler placed the job
                slots = dict(zip(self.allocation.hosts, self.allocation.slots, strict=True))
                allocation = replace(self.allocation, hosts=hosts, slots=tuple(slots[h] for h in hosts))
            self._runners[key] = self.make_runner(layout, allocation)
        return self._runners[key]

    @property
    def launches(self) -> int:
        return sum(r.launches for r in self._runners.values())

    def run(self, work: Mapping[Layout, Sequence[BenchPoint]], on_point: OnPoint | None = None,
            settings: MeasureSettings | None = None, deadline: float | None = None) -> list[PointResult]:
        """Measure every layout's points; `on_point` runs in the calling thread as each result arrives.

        deadline: a time.monotonic() value after which no further point is started.

        On KeyboardInterrupt every worker is stopped and every engine killed before it propagates; the
        results delivered so far have been passed to on_point.
        """
        jobs = [BenchJob(layout, layout.nodes) for layout, points in work.items() if points]
        for job in jobs:
            self.scheduler.check(job)
        pending = sorted(jobs, key=lambda j: -j.nodes)
        results: queue.Queue[PointResult | Placement | BaseException] = queue.Queue()
        running: dict[Placement, threading.Thread] = {}
        delivered: list[PointResult] = []
        self._stop.clear()

        def work_on(placement: Placement) -> None:
            started, measured = time.time(), 0
            layout = placement.job.key
            assert isinstance(layout, Layout)
            try:
                runner = self.runner_for(layout, placement.hosts)
                for point in runner.in_launch_order(work[layout]):
                    if self._stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                        break
                    results.put(runner.measure(point, settings))
                    measured += 1
            except BaseException as exc:  # noqa: BLE001 (handed to the main thread)
                results.put(exc)
            finally:
                self.jobs.append(JobRecord(layout, placement.hosts, started, time.time(), measured))
                results.put(placement)

        def start_what_fits() -> None:
            nonlocal pending
            waiting = []
            for job in pending:
                placement = self.scheduler.place(job)
                if placement is None:
                    waiting.append(job)
                    continue
                thread = threading.Thread(target=work_on, args=(placement,), daemon=True)
                running[placement] = thread
                thread.start()
            pending = waiting

        try:
            start_what_fits()
            while running:
                item = results.get()
                if isinstance(item, Placement):
                    running.pop(item).join()
                    self.scheduler.release(item)
                    start_what_fits()
                elif isinstance(item, BaseException):
                    raise item
                else:
                    delivered.append(item)
                    if on_point is not None:
                        on_point(item)
        except BaseException:
            self._stop.set()
            for runner in self._runners.values():
                runner.kill()
            for placement, thread in running.items():
                thread.join(timeout=10)
                self.scheduler.release(placement)
            raise
        return delivered

    def relaunch(self) -> None:
        """Every layout's next point starts a new launch (its engine sessions are closed)."""
        for runner in self._runners.values():
            runner.relaunch()

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()
