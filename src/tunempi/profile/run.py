"""Run an MPI command with the interposer preloaded into its ranks (profile mode)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.config import ENV_PREFIX
from tunempi.errors import MPIError
from tunempi.launch import rank_env_command
from tunempi.mpi.library import MPILibrary
from tunempi.profile.build import build_interposer


@dataclass(frozen=True)
class ProfileRun:
    returncode: int
    output: Path
    written: bool  # the interposer wrote the file (the application reached MPI_Finalize)


def interposer_env(interposer: Path, output: Path, mode: str = "profile") -> dict[str, str]:
    """The variables the ranks need: the preload, the mode, the output, and the caller's TUNEMPI_*."""
    env = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}
    preload = str(interposer)
    if os.environ.get("LD_PRELOAD"):
        preload += ":" + os.environ["LD_PRELOAD"]
    env.update({"LD_PRELOAD": preload, "TUNEMPI_MODE": mode, "TUNEMPI_PROFILE_OUT": str(output)})
    return env


def run_profiled(argv: Sequence[str], library: MPILibrary, output: Path | str) -> ProfileRun:
    """Run `argv` (a launcher command line, or a single program) with the profiling interposer."""
    output = Path(output).resolve()
    interposer = build_interposer(library)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)  # never report a previous run's profile as this one's
    argv = list(argv)
    if argv and argv[0] in ("mpiexec", "mpirun"):
        # A bare launcher name means "this library's launcher": the ranks must run the library the
        # interposer was built against, whatever comes first in PATH.
        argv[0] = str(library.mpiexec)
    # The variables reach the ranks through the launcher's own syntax (Hydra -genv, mpirun -x, srun
    # --export); the launcher process never gets the preload (it links no MPI).
    command = rank_env_command(argv, interposer_env(interposer, output), library)
    try:
        # Not launch.run_launch: the application keeps the terminal (stdin for `< input`, output as it
        # comes, uncaptured), and Ctrl-C reaches the launcher in the foreground process group as usual.
        result = subprocess.run(list(command.argv), env=command.full_env())
    except OSError as exc:
        raise MPIError(f"cannot run {command.argv[0]}: {exc.strerror}") from exc
    return ProfileRun(result.returncode, output, output.exists())
