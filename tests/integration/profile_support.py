"""Helpers for the profile integration tests: the embedded libraries (mpi.discovery) and launches built the
way `tunempi profile` builds them: a plain launcher command line (launch.launcher_for), then the variables
for the ranks inserted in that launcher's syntax (launch.rank_env_command), run with launch.run_launch
(whole-job timeout, no orphans).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tunempi.launch import LaunchCommand, LaunchResult, LaunchSpec, launcher_for, rank_env_command, run_launch
from tunempi.mpi.discovery import resolve_library
from tunempi.mpi.library import MPILibrary


def embedded_library(vendor: str) -> MPILibrary:
    """The embedded MPICH 5.0.2 / Open MPI 5.0.11 of `make setup`, as discovery sees it."""
    library = resolve_library(vendor)
    assert library.embedded, f"{vendor}: expected the embedded library, got {library.prefix}"
    return library


def launch_argv(library: MPILibrary, ranks: int, program: Sequence[str]) -> list[str]:
    """The command line a user would type (Open MPI: root and oversubscription flags where needed)."""
    return list(launcher_for(library).command(LaunchSpec(tuple(program), ranks)).argv)


def rank_env_argv(library: MPILibrary, ranks: int, program: Sequence[str], env: Mapping[str, str]) -> LaunchCommand:
    """launch_argv with `env` passed to the ranks, exactly as `tunempi profile` passes its variables."""
    return rank_env_command(launch_argv(library, ranks, program), env, library)


def clean_env() -> dict[str, str]:
    """This environment without the caller's TUNEMPI_* settings (the tests set what they mean)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_") or k == "TUNEMPI_CACHE"}


def run(command: LaunchCommand | Sequence[str], timeout: float = 60, env: Mapping[str, str] | None = None
        ) -> LaunchResult:
    """Run a launch to completion; on timeout the whole job is killed and the test fails."""
    if isinstance(command, LaunchCommand):
        argv, full_env = list(command.argv), command.full_env(clean_env() if env is None else env)
    else:
        argv, full_env = list(command), dict(clean_env() if env is None else env)
    result = run_launch(argv, full_env, timeout=timeout)
    assert not result.timed_out, f"{result.reason}: {' '.join(argv)}\n{result.stdout}\n{result.stderr}"
    return result


#: A short tune for the tests that run `tunempi tune` on a profile: the exploring launch alone, coarse intervals.
QUICK_TUNE = ("--timeout", "60s", "--time-cap", "10ms", "--rel-ci", "0.2", "--launches", "1")


def tunempi(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m tunempi ARGS` in `cwd`, its own results store there, none of the caller's TUNEMPI_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}
    env.update({"TUNEMPI_DB": str(cwd / "results.sqlite"), "COLUMNS": "250"})
    return subprocess.run([sys.executable, "-m", "tunempi", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
