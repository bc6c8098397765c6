"""Running launches: never hang, never leave processes behind.

A launch is started in a new session (so it has its own process group) with a unique marker in its
environment, TUNEMPI_LAUNCH_ID. Killing a launch signals every process that belongs to it: the
launcher's session and process group, its descendants, and any process that inherited the marker.
Killing the process group alone is not enough (measured, docs/launch.md): Hydra's proxy puts each
rank in a session of its own, and Open MPI 5's ranks each have their own process group; once
Open MPI's launcher is SIGKILLed its ranks run on, re-parented to init. The marker survives
re-parenting, so such orphans are found even after the launcher has gone.

Killing sends SIGTERM, waits `grace_s`, then SIGKILL. Before each signal the process's start time is
checked again, so a recycled pid is never hit.

- `run_launch(argv, env, timeout)`: run to completion (or timeout), capture and/or stream output.
- `InteractiveLaunch`: a job whose rank 0 talks over stdin/stdout line by line (the bench engine's driver).
- `run_in_foreground(argv, env)`: a job that keeps the terminal (`tunempi run`, `tunempi profile`).
- `failure_summary(output)`: the line of a failed launch's output that says what went wrong.

Every launch that has not ended yet is known to this module (`live_launches`), so that a stopped tunempi
can end them all as its last act (`end_live_launches`, called by launch/signals.py), whatever the code
was doing when the signal came. When a launch ends, the shared-memory files a killed MPI job leaves in
/dev/shm are removed (mpi/shared_memory.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from tunempi.errors import TunempiError
from tunempi.mpi.shared_memory import mpi_job_ended, mpi_job_starting

#: The environment variable that marks every process of one launch.
LAUNCH_ID_VAR = "TUNEMPI_LAUNCH_ID"
_POLL_S = 0.05

# Launches started by this process and not yet ended: launch id -> (launcher, started in a session of its own).
_LIVE: dict[str, tuple[subprocess.Popen[Any], bool]] = {}
_LIVE_LOCK = threading.Lock()
# Set once a stop must not wait any longer (a second signal while stopping): kills skip their grace.
_HURRY = threading.Event()


class LaunchError(TunempiError):
    """A launch could not be started or talked to."""


class LaunchTimeout(LaunchError):
    """A launch did not answer within its time limit."""


# --- finding and killing a launch's processes ---------------------------------------------------------
@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start: int  # start time in clock ticks since boot: (pid, start) identifies a process


def _read_proc(pid: int) -> _Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces and parentheses.
    rest = data[data.rfind(")") + 2:].split()
    try:
        return _Proc(pid, int(rest[1]), int(rest[2]), int(rest[3]), rest[0], int(rest[19]))
    except (IndexError, ValueError):
        return None


def _process_table() -> dict[int, _Proc]:
    table: dict[int, _Proc] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc = _read_proc(int(entry))
            if proc is not None:
                table[proc.pid] = proc
    return table


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return marker in handle.read().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def job_processes(launch_id: str, *, session: int | None = None, tree_root: int | None = None) -> dict[int, int]:
    """Live processes of a launch, as pid -> start time.

    A process belongs to the launch when it carries the launch's marker, is in the session `session`
    (the launcher's pid: it is started as a session leader), or descends from `tree_root`. Pass
    tree_root only while that pid is known to be the launcher (not yet reaped).
    """
    table = _process_table()
    marker = f"{LAUNCH_ID_VAR}={launch_id}".encode()
    me = os.getpid()
    found: dict[int, int] = {}
    if tree_root is not None and tree_root in table:
        children: dict[int, list[int]] = {}
        for proc in table.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
        stack = [tree_root]
        while stack:
            pid = stack.pop()
            found[pid] = table[pid].start
            stack.extend(children.get(pid, ()))
    for proc in table.values():
        if proc.pid in found:
            continue
        if (session is not None and (proc.sid == session or proc.pgid == session)) or _has_marker(proc.pid, marker):
            found[proc.pid] = proc.start
    return {pid: start for pid, start in found.items() if pid != me and table[pid].state not in ("Z", "X")}


def _alive(pid: int, start: int) -> bool:
    proc = _read_proc(pid)
    return proc is not None and proc.start == start and proc.state not in ("Z", "X")


def _signal(pid: int, start: int, sig: int) -> None:
    if _alive(pid, start):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def terminate_job(
    launch_id: str, *, session: int | None = None, tree_root: int | None = None, grace_s: float = 5.0
) -> int:
    """SIGTERM every process of a launch, SIGKILL what is left after grace_s; returns how many there were."""
    first = job_processes(launch_id, session=session, tree_root=tree_root)
    return terminate_processes(lambda: job_processes(launch_id, session=session), grace_s=grace_s, first=first)


def terminate_processes(
    find: Callable[[], dict[int, int]], *, grace_s: float = 5.0, first: dict[int, int] | None = None
) -> int:
    """SIGTERM the processes `find()` returns (pid -> start time), looking again while they die (a dying
    launcher or daemon may start or re-parent more), SIGKILL what is left after grace_s; returns how many."""
    targets = dict(find() if first is None else first)
    if not targets:
        return 0
    for pid, start in targets.items():
        _signal(pid, start, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not _HURRY.is_set():
        time.sleep(_POLL_S)
        newcomers = {pid: start for pid, start in find().items() if pid not in targets}
        for pid, start in newcomers.items():
            _signal(pid, start, signal.SIGTERM)
        targets.update(newcomers)
        if not any(_alive(pid, start) for pid, start in targets.items()):
            return len(targets)
    targets.update(find())
    for pid, start in targets.items():
        _signal(pid, start, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(pid, start) for pid, start in targets.items()):
        time.sleep(_POLL_S)
    return len(targets)


# --- results ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaunchResult:
    """How a launch ended. `killed` counts processes that had to be killed (timeout, or left behind)."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    killed: int = 0

    @property
    def status(self) -> str:
        """'ok', 'failed' or 'timeout' (the results store's statuses)."""
        if self.timed_out:
            return "timeout"
        return "ok" if self.returncode == 0 else "failed"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def exit_status(self) -> int:
        """The status a shell would report: 124 after a timeout (as timeout(1)), 128+N when killed by signal N."""
        if self.returncode is None:
            return 124
        return 128 - self.returncode if self.returncode < 0 else self.returncode

    @property
    def reason(self) -> str:
        """One line saying why a launch did not succeed ('' when it did)."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s; killed {self.killed} process(es)"
        if self.returncode == 0:
            return ""
        if self.returncode is not None and self.returncode < 0:
            try:
                how = f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                how = f"killed by signal {-self.returncode}"
        else:
            how = f"exit status {self.returncode}"
        last = next((line.strip() for line in reversed(self.stderr.splitlines()) if line.strip()), "")
        return f"{how}: {last}" if last else how


def _prepare_env(env: Mapping[str, str] | None, launch_id: str) -> dict[str, str]:
    merged = dict(os.environ if env is None else env)
    merged[LAUNCH_ID_VAR] = launch_id
    return merged


def _pump(stream: IO[str], sink: Callable[[str], None]) -> None:
    try:
        for line in stream:
            sink(line)
    except (OSError, ValueError):  # closed under us while killing
        pass
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def _start(argv: Sequence[str], env: dict[str, str], cwd: str | os.PathLike[str] | None, stdin: int,
           launch_id: str) -> subprocess.Popen[str]:
    mpi_job_starting()
    try:
        proc = subprocess.Popen(
            list(argv), env=env, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8", errors="replace", bufsize=1, start_new_session=True,
        )
    except OSError as exc:
        raise LaunchError(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
    _remember(launch_id, proc, own_session=True)
    return proc


# --- launches not yet ended ---------------------------------------------------------------------------
def _remember(launch_id: str, proc: subprocess.Popen[Any], *, own_session: bool) -> None:
    with _LIVE_LOCK:
        _LIVE[launch_id] = (proc, own_session)


def _forget(launch_id: str) -> None:
    """The launch has ended (its processes gone, or left running by a foreground command's own choice): the
    shared memory a killed job leaves in /dev/shm goes too (mpi/shared_memory.py)."""
    with _LIVE_LOCK:
        _LIVE.pop(launch_id, None)
    mpi_job_ended()


def live_launches() -> list[str]:
    """The ids of the launches this process started that have not ended yet (not yet cleaned up)."""
    with _LIVE_LOCK:
        return list(_LIVE)


def hurry_kills() -> None:
    """From now on every kill sends SIGKILL without waiting out its grace (a second signal while stopping)."""
    _HURRY.set()


def end_live_launches(grace_s: float = 5.0) -> tuple[int, int]:
    """Kill every launch this process started that has not ended yet, whole (marker, session, tree);
    returns (processes killed, processes still alive afterwards). The last act of a stopped tunempi:
    whatever the code was doing when the signal came, nothing it launched runs on."""
    with _LIVE_LOCK:
        launches = list(_LIVE.items())
    killed = left = 0
    for launch_id, (proc, own_session) in launches:
        running = proc.poll() is None  # not reaped: its pid (and session) still name the launcher
        session = proc.pid if own_session and running else None
        killed += terminate_job(launch_id, session=session, tree_root=proc.pid if running else None,
                                grace_s=grace_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        left += len(job_processes(launch_id, session=session))
        _forget(launch_id)
    return killed, left


def run_launch(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
    on_stdout: Callable[[str], None] | None = None,
    on_stderr: Callable[[str], None] | None = None,
    grace_s: float = 5.0,
    idle_timeout: float | None = None,
) -> LaunchResult:
    """Run a launch to completion, or kill all of it after `timeout` seconds, or (`idle_timeout`) when, after
    its first line on stdout, it writes no further line for that long: a program that reports each step as it
    finishes is hung when it stops reporting, long before a timeout for the whole launch, while its start
    (a build, MPI_Init) has the whole `timeout` (timed_out is set either way).

    env: the launcher's whole environment (default: this process's). Output is captured, and each
    line (without its newline) is also passed to on_stdout/on_stderr as it arrives. Ctrl-C kills the
    launch and propagates. Processes left running after the launcher exits are killed too.
    """
    argv = [str(a) for a in argv]
    launch_id = uuid.uuid4().hex
    started = time.monotonic()
    proc = _start(argv, _prepare_env(env, launch_id), cwd, subprocess.PIPE if input is not None else subprocess.DEVNULL,
                  launch_id)
    out: list[str] = []
    err: list[str] = []
    last_stdout: list[float] = []  # the time of the last line on stdout, once there is one

    def sink(buffer: list[str], callback: Callable[[str], None] | None) -> Callable[[str], None]:
        def take(line: str) -> None:
            buffer.append(line)
            if buffer is out:
                last_stdout[:] = [time.monotonic()]
            if callback is not None:
                callback(line.rstrip("\n"))
        return take

    readers = [
        threading.Thread(target=_pump, args=(proc.stdout, sink(out, on_stdout)), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, sink(err, on_stderr)), daemon=True),
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    killed = 0
    try:
        if input is not None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, OSError):
                proc.stdin.write(input)
                proc.stdin.close()
        try:
            if idle_timeout is None:
                proc.wait(timeout=timeout)
            else:
                _wait_while_writing(proc, started, timeout, idle_timeout, last_stdout)
        except subprocess.TimeoutExpired:
            timed_out = True
            killed = terminate_job(launch_id, session=proc.pid, tree_root=proc.pid, grace_s=grace_s)
            proc.wait()
    except BaseException:
        terminate_job(launch_id, session=proc.pid, tree_root=proc.pid, grace_s=grace_s)
        proc.wait()
        raise
    finally:
        # Whatever outlived the launcher (orphaned ranks) goes too.
        killed += terminate_job(launch_id, session=proc.pid, grace_s=min(grace_s, 2.0))
        _forget(launch_id)
        for reader in readers:
            reader.join(timeout=5.0)
    return LaunchResult(
        argv=tuple(argv), returncode=proc.returncode, stdout="".join(out), stderr="".join(err),
        timed_out=timed_out, duration_s=time.monotonic() - started, killed=killed,
    )


def _wait_while_writing(proc: subprocess.Popen[str], started: float, timeout: float | None, idle_timeout: float,
                        last_stdout: list[float]) -> None:
    """Wait for `proc`; TimeoutExpired after `timeout` in all or `idle_timeout` since its last stdout line."""
    while True:
        now = time.monotonic()
        left = idle_timeout - (now - last_stdout[0]) if last_stdout else math.inf
        if timeout is not None:
            left = min(left, timeout - (now - started))
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, idle_timeout)
        try:
            proc.wait(timeout=min(left, 1.0))
            return
        except subprocess.TimeoutExpired:
            continue


def run_in_foreground(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    grace_s: float = 5.0,
    output: str | os.PathLike[str] | None = None,
) -> int:
    """Run a launch that keeps the terminal: stdin, stdout and stderr are this process's (`output`: stdout and
    stderr go to that file instead, as they come, for a caller whose own output they would drown), and it stays in
    this process group, so a terminal's Ctrl-C reaches the launcher as usual; returns its return code
    (negative: killed by that signal).

    When the wait is interrupted (Ctrl-C, or launch/signals.py's Stopped after SIGTERM or SIGHUP), the
    whole job is killed before the exception propagates: the launcher, its descendants and every process
    carrying this launch's marker get SIGTERM, SIGKILL after grace_s (measured: a SIGTERM to tunempi
    alone used to leave mpiexec/prterun and the ranks running). A normal end leaves the job alone: what
    the command started in the background is its own business.
    """
    argv = [str(a) for a in argv]
    launch_id = uuid.uuid4().hex
    mpi_job_starting()
    log = open(output, "ab") if output is not None else None  # noqa: SIM115 - closed once started
    try:
        proc = subprocess.Popen(argv, env=_prepare_env(env, launch_id), cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT if log is not None else None)
    except OSError as exc:
        raise LaunchError(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
    finally:
        if log is not None:
            log.close()  # the child has its own descriptor
    _remember(launch_id, proc, own_session=False)
    try:
        return proc.wait()
    except BaseException:
        # Not the session or group: they are this process's own (and its shell's).
        terminate_job(launch_id, tree_root=proc.pid, grace_s=grace_s)
        proc.wait()
        raise
    finally:
        _forget(launch_id)


class InteractiveLaunch:
    """A launch that is talked to line by line: requests on stdin, answers on stdout.

    MPI launchers forward their stdin to rank 0 and collect every rank's stdout, so a program whose
    rank 0 reads requests and prints one line per answer can be driven from here::

        with InteractiveLaunch(argv, env) as job:
            job.send_line('{"collective": "allreduce", ...}')
            answer = job.read_line(timeout=60)   # LaunchTimeout if nothing comes
        result = job.result                      # how it ended (close() or kill() also return it)

    Leaving the `with` block normally sends `quit_line` (if given), closes stdin and waits for the job
    to end (killing it after `close_timeout_s`); leaving it with an exception kills the job. stderr is
    kept (the last `stderr_lines` lines) for error messages.

    Open MPI 5 (PRRTE) never delivers end-of-file to rank 0's stdin (measured with 5.0.11): a program
    driven through mpirun must stop on an explicit request, hence `quit_line`; Hydra forwards EOF.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        grace_s: float = 5.0,
        close_timeout_s: float = 30.0,
        quit_line: str | None = None,
        stderr_lines: int = 200,
        on_stderr: Callable[[str], None] | None = None,
    ) -> None:
        self.argv = tuple(str(a) for a in argv)
        self.env = env
        self.cwd = cwd
        self.grace_s = grace_s
        self.close_timeout_s = close_timeout_s
        self.quit_line = quit_line
        self.on_stderr = on_stderr
        self.launch_id = uuid.uuid4().hex
        self.result: LaunchResult | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=stderr_lines)
        self._eof = False
        self._readers: list[threading.Thread] = []
        self._started = 0.0

    # --- life cycle -------------------------------------------------------------------------------
    def start(self) -> InteractiveLaunch:
        if self._proc is not None:
            raise LaunchError("launch already started")
        self._started = time.monotonic()
        self._proc = _start(self.argv, _prepare_env(self.env, self.launch_id), self.cwd, subprocess.PIPE,
                            self.launch_id)

        def stdout_sink(line: str) -> None:
            self._lines.put(line.rstrip("\n"))

        def stderr_sink(line: str) -> None:
            self._stderr.append(line)
            if self.on_stderr is not None:
                self.on_stderr(line.rstrip("\n"))

        def pump_stdout() -> None:
            assert self._proc is not None and self._proc.stdout is not None
            _pump(self._proc.stdout, stdout_sink)
            self._lines.put(None)  # end of output

        assert self._proc.stderr is not None
        self._readers = [
            threading.Thread(target=pump_stdout, daemon=True),
            threading.Thread(target=_pump, args=(self._proc.stderr, stderr_sink), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        return self

    def __enter__(self) -> InteractiveLaunch:
        return self.start() if self._proc is None else self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stderr_tail(self) -> str:
        return "".join(self._stderr)

    # --- talking ----------------------------------------------------------------------------------
    def send_line(self, line: str) -> None:
        """Write one line to rank 0's stdin (a newline is added)."""
        proc = self._require()
        if "\n" in line:
            raise LaunchError("send_line takes one line without newlines")
        try:
            assert proc.stdin is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise LaunchError(f"launch no longer reads its input ({self._ended_how()})") from exc

    def read_line(self, timeout: float) -> str | None:
        """The next line of output (without newline); None once the output has ended.

        Raises LaunchTimeout when no line arrives within `timeout` seconds; the job keeps running
        (call kill() to end it).
        """
        self._require()
        if self._eof:
            return None
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise LaunchTimeout(f"no output within {timeout:g} s from {self.argv[0]}") from None
        if line is None:
            self._eof = True
        return line

    # --- ending -----------------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> LaunchResult:
        """Send quit_line (if set) and close stdin, wait up to `timeout` s (default close_timeout_s),
        then kill whatever is left."""
        proc = self._require()
        if self.result is not None:
            return self.result
        if self.quit_line is not None and proc.poll() is None:
            with contextlib.suppress(LaunchError):
                self.send_line(self.quit_line)
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.close()
        timed_out = False
        killed = 0
        try:
            proc.wait(timeout=self.close_timeout_s if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            killed = terminate_job(self.launch_id, session=proc.pid, tree_root=proc.pid, grace_s=self.grace_s)
            proc.wait()
        return self._finish(timed_out, killed)

    def kill(self) -> LaunchResult:
        """Kill the whole job now (SIGTERM, then SIGKILL after grace_s)."""
        proc = self._require()
        if self.result is not None:
            return self.result
        killed = 0
        if proc.poll() is None:
            killed = terminate_job(self.launch_id, session=proc.pid, tree_root=proc.pid, grace_s=self.grace_s)
        proc.wait()
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.close()
        return self._finish(False, killed)

    def _finish(self, timed_out: bool, killed: int) -> LaunchResult:
        proc = self._require()
        killed += terminate_job(self.launch_id, session=proc.pid, grace_s=min(self.grace_s, 2.0))
        _forget(self.launch_id)
        self._eof = True
        for reader in self._readers:
            reader.join(timeout=5.0)
        unread: list[str] = []
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                unread.append(line + "\n")
        self.result = LaunchResult(
            argv=self.argv, returncode=proc.returncode, stdout="".join(unread), stderr=self.stderr_tail(),
            timed_out=timed_out, duration_s=time.monotonic() - self._started, killed=killed,
        )
        return self.result

    def _require(self) -> subprocess.Popen[str]:
        if self._proc is None:
            raise LaunchError("launch not started (call start() or use it in a with block)")
        return self._proc

    def _ended_how(self) -> str:
        code = self._proc.poll() if self._proc is not None else None
        return "still running" if code is None else f"exited with status {code}"


# How much of a failed launch's output a reason keeps.
REASON_TAIL = 300
_ERROR_LINE = re.compile(r"error|assert|abort|fatal|killed|signal|segmentation", re.IGNORECASE)


def failure_summary(output: str) -> str:
    """The line of a failed launch's output that says what went wrong (else its last line), shortened.

    MPI libraries print the cause first and a backtrace after it: the tail alone is addresses.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return "(no output)"
    cause = next((line for line in lines if _ERROR_LINE.search(line)), lines[-1])
    return cause[:REASON_TAIL]
