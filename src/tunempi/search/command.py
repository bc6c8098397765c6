"""The objective for real applications: run a command with parameter values, measure it.

TEMPORARY HOME. Launching belongs to launch/ and applying values to mpi/ (which knows whether a
parameter is an environment variable, an `--mca` option or a `-genv`); neither exists yet, so this
module keeps the part the search needs small and self-contained:
- `env_apply`: every parameter becomes an environment variable of that name (documented limitation);
- `run_command`: subprocess in its own session, wall time, timeout with a process-group kill;
- `CommandObjective`: the objective the trial loop calls.
When launch/ lands, `run_command` moves there and `CommandObjective` takes its launcher; the
objective interface (`params -> TrialResult`) does not change.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tunempi.search.base import TrialResult, TrialStatus
from tunempi.space.params import ParamSpace, Value

# Seconds between SIGTERM and SIGKILL of a timed-out process group (mpiexec forwards SIGTERM).
KILL_GRACE = 5.0
# How much of a failed run's output ends up in the trial's reason.
REASON_TAIL = 300


@dataclass(frozen=True)
class CommandRun:
    returncode: int | None  # None: killed after the timeout
    seconds: float
    output: str


def run_command(argv: Sequence[str], env: Mapping[str, str], timeout: float | None,
                cwd: str | None = None) -> CommandRun:
    """Run argv in a new session; on timeout, SIGTERM then SIGKILL its whole process group."""
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                errors="replace", start_new_session=True)
    except OSError as exc:
        return CommandRun(127, 0.0, f"cannot run {argv[0]}: {exc.strerror}")
    try:
        out, _ = proc.communicate(timeout=timeout)
        return CommandRun(proc.returncode, time.perf_counter() - start, out)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, _ = proc.communicate()
        return CommandRun(None, time.perf_counter() - start, out or "")
    except BaseException:
        _kill_group(proc)  # Ctrl-C: leave no orphaned ranks behind
        proc.wait()
        raise


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


_ERROR_LINE = re.compile(r"error|assert|abort|fatal|killed|signal|segmentation", re.IGNORECASE)


def failure_summary(output: str) -> str:
    """The line of a failed run's output that says what went wrong (else its last line), shortened.

    MPI libraries print the cause first and a backtrace after it: the tail alone is addresses.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return "(no output)"
    cause = next((line for line in lines if _ERROR_LINE.search(line)), lines[-1])
    return cause[:REASON_TAIL]


def env_apply(space: ParamSpace, params: Mapping[str, Value]) -> dict[str, str]:
    """Parameters as environment variables named after them (until mpi/ knows better)."""
    return space.format_env(params)


@dataclass
class CommandObjective:
    """Objective: run `argv` with the parameters applied; wall time, or --metric's first group.

    A run fails when its exit status is not 0 or the metric is not found; it times out after
    `timeout` seconds. Parameters absent from `params` are not set (the library's defaults).
    """

    argv: Sequence[str]
    space: ParamSpace
    timeout: float | None = None
    metric: re.Pattern[str] | None = None
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: str | None = None
    apply: Callable[[ParamSpace, Mapping[str, Value]], dict[str, str]] = env_apply

    def __call__(self, params: Mapping[str, Value]) -> TrialResult:
        env = dict(self.base_env)
        for name in self.space.names:
            env.pop(name, None)  # an inherited value must not leak into the "default" runs
        env.update(self.apply(self.space, params))
        run = run_command(self.argv, env, self.timeout, self.cwd)
        tail = failure_summary(run.output)
        if run.returncode is None:
            return TrialResult(None, TrialStatus.TIMEOUT, f"killed after the {self.timeout:g} s timeout",
                               duration=run.seconds)
        if run.returncode != 0:
            return TrialResult(None, TrialStatus.FAILED, f"exit status {run.returncode}: {tail}",
                               duration=run.seconds)
        if self.metric is None:
            return TrialResult.ok(run.seconds, duration=run.seconds)
        match = self.metric.search(run.output)
        if match is None:
            return TrialResult(None, TrialStatus.FAILED, f"--metric {self.metric.pattern!r} not found in the "
                               f"output: {tail}", duration=run.seconds)
        text = match.group(1) if match.groups() else match.group(0)
        try:
            value = float(text)
        except ValueError:
            return TrialResult(None, TrialStatus.FAILED, f"--metric matched {text!r}, not a number",
                               duration=run.seconds)
        return TrialResult.ok(value, duration=run.seconds)
