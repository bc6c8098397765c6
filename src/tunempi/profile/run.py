"""Run an MPI command with the interposer preloaded into its ranks (profile mode)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.config import ENV_PREFIX
from tunempi.errors import MPIError
from tunempi.launch import LaunchError, launcher_for_argv, own_launcher, rank_env_command, run_in_foreground
from tunempi.launch.launchers import LaunchCommand, OpenMPILauncher
from tunempi.mpi.library import MPILibrary
from tunempi.profile.build import build_interposer


@dataclass(frozen=True)
class ProfileRun:
    returncode: int
    output: Path  # where this run's profile is (the requested file, or `kept_aside` for a failed command)
    written: bool  # the interposer wrote a profile (the application reached MPI_Finalize)
    kept_aside: bool = False  # written, but the command failed: the requested file was left as it was


def failed_run_path(output: Path, returncode: int) -> Path:
    """Where the profile of a command that failed goes, so a previous good profile at `output` survives."""
    return output.with_name(f"{output.stem}.exit{returncode}{output.suffix}")


def interposer_env(interposer: Path, output: Path, mode: str = "profile") -> dict[str, str]:
    """The variables the ranks need: the preload, the mode, the output, and the caller's TUNEMPI_*."""
    env = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}
    preload = str(interposer)
    if os.environ.get("LD_PRELOAD"):
        preload += ":" + os.environ["LD_PRELOAD"]
    env.update({"LD_PRELOAD": preload, "TUNEMPI_MODE": mode, "TUNEMPI_PROFILE_OUT": str(output)})
    return env


def run_profiled(argv: Sequence[str], library: MPILibrary, output: Path | str,
                 log: Path | None = None) -> ProfileRun:
    """Run `argv` (a launcher command line, or a single program) with the profiling interposer. `log`: the
    application's stdout and stderr go there (autotune's), else to the terminal (`tunempi profile`).

    The interposer writes to a temporary name beside `output`; the profile replaces `output` only when the
    command succeeded, so a crashed or failed run never destroys the last good profile.
    """
    output = Path(output).resolve()
    interposer = build_interposer(library)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    # The ranks must run the library the interposer was built against: a bare mpiexec is its launcher.
    argv = own_launcher(argv, library)
    # The variables reach the ranks through the launcher's own syntax (Hydra -genv, mpirun -x, srun
    # --export); the launcher process never gets the preload (it links no MPI).
    command = rank_env_command(argv, interposer_env(interposer, partial), library)
    launcher = launcher_for_argv(argv, library)
    if isinstance(launcher, OpenMPILauncher) and launcher.as_root:  # as root: Open MPI's permission to run
        command = LaunchCommand(command.argv, {**OpenMPILauncher.ROOT_ENV, **command.env})
    try:
        # Not launch.run_launch: the application keeps the terminal (stdin for `< input`, output as it
        # comes, uncaptured), and Ctrl-C reaches the launcher in the foreground process group as usual.
        # Stopped (Ctrl-C, SIGTERM, SIGHUP), the whole job is killed and `output` is left as it was.
        returncode = run_in_foreground(command.argv, command.full_env(), output=log)
    except LaunchError as exc:
        partial.unlink(missing_ok=True)
        raise MPIError(str(exc)) from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if not partial.exists():
        return ProfileRun(returncode, output, False)
    if returncode == 0:
        os.replace(partial, output)
        return ProfileRun(0, output, True)
    aside = failed_run_path(output, returncode)
    os.replace(partial, aside)
    return ProfileRun(returncode, aside, True, kept_aside=True)
