"""The objective for real applications: launch the command with parameter values applied, measure it.

Launching is launch/'s `run_launch` (own session, a marker in every process's environment, whole-job
kill on timeout or Ctrl-C, stragglers killed after exit). How a parameter value becomes environment
variables is given from outside (`apply`: the CLI passes the vendor adapter's `parameter_env`, so
this module never spells a vendor's variable), and so is how those variables reach the ranks when the
command starts with a launcher (`env_args`: Hydra `-genv K V`, mpirun `-x K=V`, from launch/).

The objective is the wall time of the launch, or the first group of `metric` in stdout+stderr.
`TrialResult.metrics` carries the state rl reads (see `MetricsSource`): by default the wall time
(`wall_s`, when the objective is a parsed metric) and the numbers the `observe` patterns find in the
output; a profiling interposer plugs in as another MetricsSource (prepare its environment, read its
records after the run).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tunempi.launch import LaunchError, LaunchResult, run_launch
from tunempi.launch.process import failure_summary
from tunempi.search.base import TrialResult, TrialStatus
from tunempi.search.space import Value

# Seconds between SIGTERM and SIGKILL of a timed-out job.
KILL_GRACE = 5.0

class MetricsSource(Protocol):
    """Where side measurements of a run come from (rl's state). The profiling interposer implements this:
    `prepare` returns the environment that loads it for a run (LD_PRELOAD, output path), `collect` reads
    what it wrote (e.g. MPI_T pvars such as unexpected-queue lengths, time in MPI) after the run."""

    def prepare(self) -> dict[str, str]: ...

    def collect(self, launch: LaunchResult) -> dict[str, float]: ...


@dataclass(frozen=True)
class OutputMetrics:
    """Named numbers parsed from the application's output: {name: regex whose first group is the number}."""

    patterns: Mapping[str, re.Pattern[str]] = field(default_factory=dict)

    def prepare(self) -> dict[str, str]:
        return {}

    def collect(self, launch: LaunchResult) -> dict[str, float]:
        text = launch.stdout + launch.stderr
        found: dict[str, float] = {}
        for name, pattern in self.patterns.items():
            match = pattern.search(text)
            if match is None:
                continue
            try:
                found[name] = float(match.group(1) if match.groups() else match.group(0))
            except ValueError:
                continue
        return found


@dataclass
class CommandObjective:
    """Objective: launch `argv` with the parameters applied; wall time, or --metric's first group.

    A run fails when its exit status is not 0 or the metric is not found; it times out after `timeout`
    seconds (the whole job is killed). Parameters absent from `params` are not set (the library's
    defaults), and `scrub` names variables removed from the inherited environment for every run, so
    a value the caller happens to have set never leaks into the "default" runs.
    """

    argv: Sequence[str]
    apply: Callable[[Mapping[str, Value]], dict[str, str]]
    timeout: float | None = None
    metric: re.Pattern[str] | None = None
    base_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    scrub: Collection[str] = ()
    launch_env: Mapping[str, str] = field(default_factory=dict)  # every run (e.g. the adapter's launch_env)
    env_args: Callable[[Mapping[str, str]], list[str]] | None = None
    sources: Sequence[MetricsSource] = ()
    cwd: str | None = None
    grace_s: float = KILL_GRACE
    last_argv: tuple[str, ...] = ()
    last_env: dict[str, str] = field(default_factory=dict)

    def command_for(self, params: Mapping[str, Value]) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """(argv, the launcher's whole environment, the variables the parameters set)."""
        settings = self.apply(params)
        env = {k: v for k, v in self.base_env.items() if k not in self.scrub}
        env.update(self.launch_env)
        source_env: dict[str, str] = {}
        for source in self.sources:
            source_env.update(source.prepare())
        argv = list(self.argv)
        if self.env_args is not None:
            # Through the launcher's own flags, so they reach ranks on other nodes too; the launcher process
            # itself never gets a source's preload (it links no MPI).
            if settings or source_env:
                argv[1:1] = self.env_args({**source_env, **settings})
            env.update(settings)
        else:
            env.update(source_env)
            env.update(settings)
        return argv, env, settings

    def __call__(self, params: Mapping[str, Value]) -> TrialResult:
        argv, env, settings = self.command_for(params)
        self.last_argv, self.last_env = tuple(argv), settings
        try:
            run = run_launch(argv, env, self.timeout, cwd=self.cwd, grace_s=self.grace_s)
        except LaunchError as exc:
            return TrialResult(None, TrialStatus.FAILED, str(exc), duration=0.0)
        output = run.stdout + run.stderr
        seconds = run.duration_s
        if run.timed_out:
            return TrialResult(None, TrialStatus.TIMEOUT, f"killed after the {self.timeout:g} s timeout "
                               f"({run.killed} process(es))", duration=seconds)
        if run.returncode != 0:
            how = run.reason.split(":", 1)[0]  # "exit status 3" / "killed by SIGSEGV"
            return TrialResult(None, TrialStatus.FAILED, f"{how}: {failure_summary(output)}", duration=seconds)
        metrics: dict[str, float] = {}
        for source in self.sources:
            metrics.update(source.collect(run))
        if self.metric is None:
            return TrialResult.ok(seconds, metrics, duration=seconds)
        match = self.metric.search(output)
        if match is None:
            return TrialResult(None, TrialStatus.FAILED, f"--metric {self.metric.pattern!r} not found in the "
                               f"output: {failure_summary(output)}", duration=seconds)
        text = match.group(1) if match.groups() else match.group(0)
        try:
            value = float(text)
        except ValueError:
            return TrialResult(None, TrialStatus.FAILED, f"--metric matched {text!r}, not a number",
                               duration=seconds)
        metrics.setdefault("wall_s", seconds)
        return TrialResult.ok(value, metrics, duration=seconds)
