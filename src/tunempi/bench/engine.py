"""The Python side of the benchmark engine: build it, launch it once per layout, stream points through it.

`EngineSession` owns one launch of the C engine (bench/c/) for one process layout and one fixed
environment. `measure(request)` sends one request line to rank 0 and waits for its one JSON answer.
When a point hangs (no answer within its timeout) or the job dies (an algorithm aborted it), the whole
job is killed, the point is reported as timed out / failed, and the next `measure` relaunches: a sweep
goes on.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from tunempi.bench.protocol import (
    QUIT,
    EngineReady,
    PointReply,
    PointRequest,
    SetupReply,
    SetupRequest,
    decode_line,
)
from tunempi.bench.stats import Statistics, summarize
from tunempi.errors import MPIError
from tunempi.launch.hosts import NodeAllocation, local_cores
from tunempi.launch.launchers import Launcher, LaunchSpec, launcher_for
from tunempi.launch.process import InteractiveLaunch, LaunchError, LaunchTimeout
from tunempi.mpi.build import build_c
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import CvarSwitch
from tunempi.store.launches import LaunchTiming

C_DIR = Path(__file__).parent / "c"
ENGINE_SOURCES: tuple[Path, ...] = (C_DIR / "engine.c", C_DIR / "cvars.c", C_DIR / "cases.c", C_DIR / "stats.c")
ENGINE_HEADERS: tuple[Path, ...] = (C_DIR / "engine.h",)
ENGINE_NAME = "tunempi_bench_engine"

# Lines of an abort message that say what went wrong (the engine's own watchdog, Open MPI's "*** An error
# occurred in MPI_Alltoall" / "*** MPI_ERR_...", MPICH's "Fatal error in ..." / assertion).
_TELLING = re.compile(r"tunempi engine:|error occurred in|MPI_ERR_|Fatal error|Assertion|[Ss]egmentation|signal \d+")
_MESSAGE_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)?(\*+\s*)?")

#: Seconds to wait for the engine's "ready" line (MPI_Init of every rank).
START_TIMEOUT_S = 120.0


def build_engine(library: MPILibrary, *, werror: bool = False) -> Path:
    """Compile the engine with the library's own mpicc (cached by library fingerprint, sources and headers)."""
    return build_c(library, list(ENGINE_SOURCES), ENGINE_NAME, headers=ENGINE_HEADERS, werror=werror)


@dataclass(frozen=True)
class Layout:
    """How many processes, and (where several nodes exist) how they are spread."""

    ranks: int
    nodes: int = 1
    ppn: int | None = None  # None: the launcher's default placement

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.nodes < 1 or (self.ppn is not None and self.ppn < 1):
            raise ValueError(f"bad layout: ranks={self.ranks} nodes={self.nodes} ppn={self.ppn}")

    @property
    def ppn_or_derived(self) -> int:
        """Processes per node (the largest count where nodes are not filled evenly)."""
        return self.ppn if self.ppn is not None else -(-self.ranks // self.nodes)


_launch_logs: list[list[LaunchTiming]] = []
_launch_logs_lock = threading.Lock()


@contextmanager
def launches_timed() -> Iterator[list[LaunchTiming]]:
    """Every engine launch closed while the block runs, from any thread, timed into the list it gives
    (tune stores them: tune/plan.py prices a launch of the library by them, and Open MPI's start took
    0.07-0.16 s here where MPICH's took 0.06)."""
    timings: list[LaunchTiming] = []
    with _launch_logs_lock:
        _launch_logs.append(timings)
    try:
        yield timings
    finally:
        with _launch_logs_lock:
            _launch_logs.remove(timings)


@dataclass(frozen=True)
class PointOutcome:
    """What became of one request: status 'ok', 'failed' (engine error, job died) or 'timeout'.
    `not_usable`: a failure that is the library refusing the forced algorithm for this call (told apart by
    the adapter in `measure_point`), not something going wrong."""

    request: PointRequest
    status: str
    reason: str = ""
    reply: PointReply | None = None
    statistics: Statistics | None = None
    hosts: tuple[str, ...] = ()
    launch_argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    not_usable: bool = False
    #: Seconds from the request sent to the reply read (an engine start before it not counted; 0: never sent).
    run_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


#: How `EngineSession.measure` words a point whose engine died under it.
ENGINE_DIED = "the engine died"


def killed_the_engine(status: str, reason: str) -> bool:
    """Whether a point's run ended its engine (it died, or timed out and was killed): the next point relaunches
    (tune/driver.py blocks the algorithm there; tune --plan counts the relaunch)."""
    return status == "timeout" or reason.startswith(ENGINE_DIED)


def condense(message: str) -> str:
    """One line from a multi-line MPI error (MPICH's error stack): its first line and its cause, the last."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) <= 2:
        return " ".join(lines)
    cause = re.sub(r"^\S+\(\d+\)\.*:\s*", "", lines[-1])  # "MPIR_Allreduce_impl(4850)....: why"
    return f"{lines[0]} ... {cause}"


def resolve_binding(choice: str | None, layout: Layout, allocation: NodeAllocation | None = None) -> str | None:
    """The binding for `choice` (None: the launcher's default); "auto" binds each rank to a core when the
    ranks fit the cores of this one node, else leaves placement to the launcher (oversubscribed, or several nodes). Unbound, the scheduler
    places the ranks anew in every launch, and a placement moved a whole launch: MPICH at 2 ranks, 5 of 32
    launches read a 128 KiB allreduce or bcast 3-8x slower, none of 32 bound. Ranks bound two to a core
    (oversubscribed) take turns in lockstep, and a 4-rank bcast read 0.2 us in most launches, its non-roots
    finding the root's message already there: figures no application sees (docs/bench.md "Binding")."""
    if choice != "auto":
        return choice
    fits = layout.nodes == 1 and allocation is None and layout.ranks <= local_cores()
    return "core" if fits else None


class EngineSession:
    """One running engine for one layout and one environment; relaunched after a failure.

    env: variables every rank must see (the adapter's launch_env, plus force_env in one-shot mode).
    setup: cvar writes made right after every (re)launch and kept for the whole launch (e.g. the
    adapter's strict_selection_switch, so that an algorithm that cannot take a call fails it).
    point_timeout_s: None derives it from each request's time cap.
    bind: "auto" (resolve_binding: tune, verify and bench bind the engines they start alike), "core",
    "none", or None for the launcher's default.
    """

    def __init__(
        self,
        library: MPILibrary,
        layout: Layout,
        *,
        env: Mapping[str, str] | None = None,
        setup: tuple[CvarSwitch, ...] = (),
        executable: Path | None = None,
        launcher: Launcher | None = None,
        allocation: NodeAllocation | None = None,
        bind: str | None = "auto",
        point_timeout_s: float | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.library = library
        self.layout = layout
        self.env: Mapping[str, str] = MappingProxyType(dict(env or {}))
        self.setup = tuple(setup)
        self.executable = executable if executable is not None else build_engine(library)
        self.launcher = launcher if launcher is not None else launcher_for(library)
        self.allocation = allocation
        self.bind = resolve_binding(bind, layout, allocation)
        self.point_timeout_s = point_timeout_s
        self.start_timeout_s = start_timeout_s
        self.launches = 0  # how many times the engine was started (relaunches after failures included)
        self._start_s: float | None = None  # the running launch's start, timed (LaunchTiming)
        self.ready: EngineReady | None = None
        self._job: InteractiveLaunch | None = None
        self._noise: collections.deque[str] = collections.deque(maxlen=20)  # stray stdout lines

    # --- life cycle -----------------------------------------------------------------------------------
    @property
    def launch_argv(self) -> tuple[str, ...]:
        return tuple(self.launcher.command(self._spec()).argv)

    def _spec(self) -> LaunchSpec:
        return LaunchSpec(
            command=(str(self.executable),), ranks=self.layout.ranks,
            nodes=self.layout.nodes if self.layout.nodes > 1 else None, ppn=self.layout.ppn,
            allocation=self.allocation, env=self.env, bind=self.bind,
        )

    def start(self) -> EngineReady:
        """Launch the engine (if not running), wait for its ready line and make the setup writes.

        Raises MPIError (and leaves nothing running) when the engine cannot be started.
        """
        if self._job is not None and self.ready is not None:
            return self.ready
        command = self.launcher.command(self._spec())
        began = time.perf_counter()
        self._job = InteractiveLaunch(command.argv, command.full_env(), quit_line=QUIT)
        self._job.start()
        self.launches += 1
        try:
            self.ready = self._handshake()
        except BaseException:
            self.kill()
            raise
        self._start_s = time.perf_counter() - began
        return self.ready

    def _handshake(self) -> EngineReady:
        assert self._job is not None
        try:
            line = self._read(self.start_timeout_s)
        except LaunchTimeout:
            raise MPIError(f"the benchmark engine did not start within {self.start_timeout_s:g} s") from None
        if line is None:
            raise MPIError(f"the benchmark engine died at start-up: {self._death_note()}")
        ready = decode_line(line)
        if not isinstance(ready, EngineReady):
            raise MPIError(f"the benchmark engine did not say it was ready: {line[:200]!r}")
        for number, switch in enumerate(self.setup, 1):
            self._job.send_line(SetupRequest(number, switch.cvar, switch.value, switch.needs_new_communicator).encode())
            answer = self._read(self.start_timeout_s)
            done = decode_line(answer) if answer is not None else None
            if not isinstance(done, SetupReply) or not done.ok or done.cvar_value != switch.value:
                raise MPIError(f"the benchmark engine could not set {switch.cvar}={switch.value}: {answer!r}")
        return ready

    def close(self) -> None:
        """Ask the engine to quit and wait for it (killing it if it does not end)."""
        if self._job is not None:
            began = time.perf_counter()
            self._job.close()
            if self._start_s is not None and _launch_logs:
                timing = LaunchTiming(self.library.fingerprint, self.layout.ranks, self.layout.nodes,
                                      self.layout.ppn_or_derived, self._start_s, time.perf_counter() - began)
                with _launch_logs_lock:
                    for log in _launch_logs:
                        log.append(timing)
        self._job = None
        self._start_s = None
        self.ready = None

    def kill(self) -> None:
        if self._job is not None:
            self._job.kill()
        self._job = None
        self._start_s = None
        self.ready = None

    def __enter__(self) -> EngineSession:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()

    # --- measuring ------------------------------------------------------------------------------------
    def timeout_for(self, request: PointRequest) -> float:
        if self.point_timeout_s is not None:
            return self.point_timeout_s
        return 30.0 + 5.0 * request.settings.time_cap_s

    def measure(self, request: PointRequest) -> PointOutcome:
        """Measure one point; never raises for a failure of the point itself (see PointOutcome.status)."""
        try:
            ready = self.start()
        except (MPIError, LaunchError) as exc:
            return self._outcome(request, "failed", str(exc))
        assert self._job is not None
        sent = time.perf_counter()
        outcome = self._request(request, ready)
        return replace(outcome, run_s=time.perf_counter() - sent)

    def _request(self, request: PointRequest, ready: EngineReady) -> PointOutcome:
        assert self._job is not None
        try:
            self._job.send_line(request.encode())
            line = self._read(self.timeout_for(request))
        except LaunchTimeout:
            self.kill()
            return self._outcome(
                request, "timeout", f"no result within {self.timeout_for(request):g} s; job killed", ready
            )
        except LaunchError as exc:
            why = self._death_note()
            self.kill()
            return self._outcome(request, "failed", f"{exc}: {why}", ready)
        if line is None:
            why = self._death_note()
            self.kill()
            return self._outcome(request, "failed", f"{ENGINE_DIED}: {why}", ready)
        try:
            reply = decode_line(line)
        except MPIError as exc:
            self.kill()
            return self._outcome(request, "failed", str(exc), ready)
        if not isinstance(reply, PointReply) or (reply.id != request.id and reply.ok):
            self.kill()
            return self._outcome(request, "failed", f"unexpected engine answer: {line[:200]!r}", ready)
        if not reply.ok:
            return self._outcome(request, "failed", f"engine: {condense(reply.error)}", ready, reply)
        return PointOutcome(
            request=request, status="ok", reply=reply, statistics=summarize(reply.samples_us),
            hosts=ready.hosts, launch_argv=self.launch_argv, env=self.env,
        )

    # --- helpers --------------------------------------------------------------------------------------
    def _read(self, timeout: float) -> str | None:
        """The next JSON line from the engine (other stdout lines are kept as noise), None at the end."""
        assert self._job is not None
        while True:
            line = self._job.read_line(timeout)
            if line is None or line.startswith("{"):
                return line
            self._noise.append(line)

    def _death_note(self) -> str:
        """Why the job ended: exit status and the MPI library's own error lines, from the job's output."""
        if self._job is None:
            return "not running"
        result = self._job.kill()
        lines = [_MESSAGE_PREFIX.sub("", ln).strip() for ln in result.stderr.splitlines() + list(self._noise)]
        lines = [ln for ln in lines if ln.isprintable() and ln.strip("-=* ")]
        own = [ln for ln in lines if ln.startswith("tunempi engine:")]  # the engine's watchdog says it all
        telling = own[:1] or [ln for ln in lines if _TELLING.search(ln)][:2]
        if not own and lines and lines[-1] not in telling:  # MPICH's error stack ends with the actual cause
            telling.append(lines[-1])
        how = result.reason.split(":")[0] if result.reason else f"exit status {result.returncode}"
        return how + (": " + "; ".join(dict.fromkeys(telling)) if telling else "")

    def _outcome(
        self, request: PointRequest, status: str, reason: str, ready: EngineReady | None = None,
        reply: PointReply | None = None,
    ) -> PointOutcome:
        return PointOutcome(
            request=request, status=status, reason=reason, reply=reply,
            hosts=ready.hosts if ready else (), launch_argv=self.launch_argv, env=self.env,
        )
