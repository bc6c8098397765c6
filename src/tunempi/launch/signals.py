"""Stopping tunempi: SIGTERM, SIGINT and SIGHUP end every job it started, and it exits with 128 + the signal.

Without this, SIGTERM (`timeout`, `kill`, a batch system ending a job) ended the Python process at once:
no `finally` ran, and the jobs, each in a session of its own (process.py), ran on. Measured: `timeout 20
tunempi online run -- mpirun -n 2 ./hung` returned 124 and left prterun (mpiexec with MPICH) and both ranks
spinning; so did `compare` and `search`; a SIGTERM to `tunempi run` or `tunempi profile` alone left the
launcher and the ranks.

`run_stoppable(main)` runs an entry point with the first of these signals turned into `Stopped(signum)`,
raised in the main thread. Stopped is a KeyboardInterrupt, so every path written for Ctrl-C runs: the
launch in progress is killed whole, what was measured stays in the store, the command says how to go on.
A signal that comes while stopping does not raise again (cleanup is never cut short halfway); it makes
the kills skip their grace (SIGKILL at once). When the entry point is done, every launch of this process
that has not ended is killed (`process.end_live_launches`), one line says so on stderr, and the status is
128 + N (143 SIGTERM, 130 SIGINT, 129 SIGHUP), whatever the command would have returned.

A signal ignored when tunempi started stays ignored (`nohup` ignores SIGHUP; a non-interactive shell's
background job ignores SIGINT).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from types import FrameType

from tunempi.launch.process import end_live_launches, hurry_kills

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def stop_status(signum: int) -> int:
    """The exit status of a command stopped by `signum`: 128 + N, as a shell reports a process it killed."""
    return 128 + signum


class Stopped(KeyboardInterrupt):
    """tunempi was asked to stop by a signal (raised in the main thread, once)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return stop_status(self.signum)


def interrupt_status(exc: BaseException) -> int:
    """The exit status for an interruption: 128 + N for Stopped, 130 for a plain Ctrl-C."""
    return exc.exit_status if isinstance(exc, Stopped) else stop_status(signal.SIGINT)


def _say(line: str) -> None:
    """One line on stderr, safe inside a signal handler (no Python-level buffer that may be mid-write)."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode(errors="replace"))


class StopSignals:
    """The handlers: `install()`, `disarm()` (record only, never raise again), `restore()`; `signum` is
    the first stop signal received (None: none)."""

    def __init__(self, signals: Iterable[int] = STOP_SIGNALS, *, name: str = "tunempi") -> None:
        self.signals = tuple(signals)
        self.name = name
        self.signum: int | None = None
        self._armed = False
        self._raised = False
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread may set handlers; a library caller keeps its own
        for signum in self.signals:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._handle)
        self._armed = True
        return self

    def disarm(self) -> None:
        self._armed = False

    def restore(self) -> None:
        self._armed = False
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        if self._armed and not self._raised:
            self._raised = True
            raise Stopped(signum)
        if self._raised:
            hurry_kills()
            _say(f"{self.name}: {signal_name(signum)} while stopping: killing what is left now")


def run_stoppable(main: Callable[[], int | None], *, name: str = "tunempi") -> int:
    """Run an entry point with the stop signals handled (module docstring); returns its exit status.

    `main` returns a status or raises SystemExit; a stop signal makes the status 128 + N after every
    launch still running has been killed."""
    stop = StopSignals(name=name)
    code = 0
    try:
        try:
            try:
                stop.install()
                code = main() or 0
            except SystemExit as exc:
                code = _exit_code(exc)
            finally:
                stop.disarm()
        except KeyboardInterrupt:  # a Ctrl-C or Stopped no command caught (or one raised just before disarming)
            stop.disarm()
            code = stop_status(signal.SIGINT)
    finally:
        stop.disarm()
        if stop.signum is not None:
            killed, left = end_live_launches()
            code = stop_status(stop.signum)
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
            ended = (f"{left} process(es) it started could not be killed" if left else
                     "nothing it started is left running" + (f" ({killed} killed at the end)" if killed else ""))
            _say(f"{name}: stopped by {signal_name(stop.signum)}; {ended} (exit status {code})")
        stop.restore()
    return code


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    _say(str(exc.code))  # sys.exit("message"): Python prints it and exits 1
    return 1


__all__ = ["STOP_SIGNALS", "StopSignals", "Stopped", "interrupt_status", "run_stoppable", "signal_name",
           "stop_status"]
