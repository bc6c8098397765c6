"""Run an application in online mode: the interposer preloaded into its ranks, reading this run's table.

The ranks get the preload and the online settings on the launcher's command line (Hydra `-genv`,
Open MPI `-x`, Slurm `--export`): the launcher itself must not load the interposer (it needs libmpi's
symbols; the launcher is no MPI program). The job runs under tunempi.launch.run_launch, so a timeout or
Ctrl-C never leaves ranks behind.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.config import ENV_PREFIX
from tunempi.errors import UsageError
from tunempi.launch import OpenMPILauncher, run_launch
from tunempi.mpi.discovery import adapter_for
from tunempi.mpi.library import MPILibrary
from tunempi.online.state import OnlineConfig, OnlineState
from tunempi.online.switching import collective_switches
from tunempi.profile.build import build_interposer

_log = logging.getLogger(__name__)

class CannotSwitch(UsageError):
    """The library cannot switch any of the requested collectives at run time."""


_HYDRA = {"mpiexec.hydra", "mpiexec.mpich"}
_OPENMPI = {"mpirun.openmpi", "mpiexec.openmpi", "orterun", "prterun"}
_GENERIC = {"mpiexec", "mpirun"}


def with_rank_env(argv: Sequence[str], env: Mapping[str, str], vendor: str) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment of the launcher) that give the RANKS of `argv` the variables in `env`.

    TODO(launch/): launch/ builds command lines from a LaunchSpec; it has no way yet to add variables
    to a command line the user wrote, which is what this does.
    """
    if not argv:
        raise UsageError("no command to run; give it after --, e.g. -- mpiexec -n 4 ./app")
    launcher = os.path.basename(argv[0])
    head, rest = [argv[0]], list(argv[1:])
    if launcher in _HYDRA or (launcher in _GENERIC and vendor == "mpich"):
        for name, value in env.items():
            head += ["-genv", name, value]
        return head + rest, {}
    if launcher in _OPENMPI or (launcher in _GENERIC and vendor == "openmpi"):
        for name, value in env.items():
            head += ["-x", f"{name}={value}"]
        extra = dict(OpenMPILauncher.ROOT_ENV) if os.geteuid() == 0 else {}
        return head + rest, extra
    if launcher == "srun":
        exports = ",".join(f"{name}={value}" for name, value in env.items())
        return head + [f"--export=ALL,{exports}"] + rest, {}
    return list(argv), dict(env)


def open_state(directory: Path | str, library: MPILibrary, config: OnlineConfig | None = None) -> OnlineState:
    """The state directory for `library`, created (with `config`) on first use."""
    state = OnlineState(directory)
    if state.exists():
        state.check_library(library.fingerprint, library.name)
        if config is not None:
            state.set_config(config)
        return state
    config = config or OnlineConfig()
    adapter = adapter_for(library)
    switches = collective_switches(adapter, config.collectives)
    if not switches:
        raise CannotSwitch(f"{library.name} cannot switch any of {', '.join(config.collectives)} at run time")
    state.create(config, library.fingerprint, library.name, switches)
    return state


def run_untouched(library: MPILibrary, argv: Sequence[str], *, timeout: float | None = None) -> int:
    """Run the command as it is (no interposer): for libraries that cannot switch."""
    argv = list(argv)
    if argv and argv[0] in _GENERIC:
        argv[0] = str(library.mpiexec)
    command, launcher_env = with_rank_env(argv, {}, library.vendor)
    result = run_launch(command, {**os.environ, **launcher_env}, timeout=timeout,
                        on_stdout=lambda line: print(line, flush=True),
                        on_stderr=lambda line: print(line, file=sys.stderr, flush=True))
    return result.returncode


@dataclass(frozen=True)
class OnlineRun:
    batch: int
    run: int
    returncode: int
    duration_s: float
    records: Path
    written: bool
    timed_out: bool


def run_online(state: OnlineState, library: MPILibrary, argv: Sequence[str], *, timeout: float | None = None,
               echo: bool = True) -> OnlineRun:
    """Run `argv` once in online mode and keep its records in the state directory."""
    state.check_library(library.fingerprint, library.name)
    interposer = build_interposer(library)
    probabilities = state.probabilities()
    batch, run = state.take_run_number()
    records = state.records_path(batch, run).resolve()
    records.parent.mkdir(parents=True, exist_ok=True)
    # What this run draws from, kept next to its records.
    run_table = state.write_table(run, batch, probabilities, path=records.with_suffix(".table"))
    argv = list(argv)
    if argv and argv[0] in _GENERIC:
        argv[0] = str(library.mpiexec)  # the ranks must run the library the interposer was built for
    adapter = adapter_for(library)
    rank_env = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}
    preload = str(interposer) + (":" + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "")
    rank_env.update(adapter.launch_env())
    rank_env.update({"LD_PRELOAD": preload, "TUNEMPI_MODE": "online", "TUNEMPI_ONLINE_TABLE": str(run_table),
                     "TUNEMPI_ONLINE_OUT": str(records)})
    command, launcher_env = with_rank_env(argv, rank_env, library.vendor)
    env = {**os.environ, **adapter.launch_env(), **launcher_env}
    started = time.monotonic()
    result = run_launch(command, env, timeout=timeout,
                        on_stdout=(lambda line: print(line, file=sys.stdout, flush=True)) if echo else None,
                        on_stderr=(lambda line: print(line, file=sys.stderr, flush=True)) if echo else None)
    duration = time.monotonic() - started
    meta = {"batch": batch, "run": run, "command": list(argv), "returncode": result.returncode,
            "duration_s": duration, "timed_out": result.timed_out, "fingerprint": library.fingerprint,
            "library": library.name, "records_written": records.exists()}
    records.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return OnlineRun(batch, run, result.returncode, duration, records, records.exists(), result.timed_out)
