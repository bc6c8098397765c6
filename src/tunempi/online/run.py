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
from types import MappingProxyType

from tunempi.config import ENV_PREFIX
from tunempi.errors import UsageError
from tunempi.launch import (
    LaunchCommand,
    OpenMPILauncher,
    launcher_for_argv,
    own_launcher,
    rank_env_command,
    run_launch,
)
from tunempi.mpi.discovery import adapter_for
from tunempi.mpi.library import MPILibrary
from tunempi.online.state import OnlineConfig, OnlineState
from tunempi.online.switching import collective_switches
from tunempi.profile.build import build_interposer

_log = logging.getLogger(__name__)

class CannotSwitch(UsageError):
    """The library cannot switch any of the requested collectives at run time."""


def rank_command(argv: Sequence[str], env: Mapping[str, str], library: MPILibrary) -> LaunchCommand:
    """The user's command with `env` passed to its ranks (launch.rank_env_command); as root, Open MPI's
    mpirun also gets the permission to run (the user's command line need not say --allow-run-as-root)."""
    command = rank_env_command(argv, env, library)
    launcher = launcher_for_argv(argv, library)
    if isinstance(launcher, OpenMPILauncher) and launcher.as_root:
        return LaunchCommand(command.argv, MappingProxyType({**OpenMPILauncher.ROOT_ENV, **command.env}))
    return command


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
    if not adapter.switches_at_run_time():
        raise CannotSwitch(
            f"{library.name} reads its algorithm choice at MPI_Init only, so it cannot switch any collective "
            f"(blocking or non-blocking) per call; "
            f"tune it offline instead (`tunempi tune --mpi {library.spec}`), or compare whole runs under "
            f"settings (`tunempi compare`, `tunempi search`)")
    switches = collective_switches(adapter, config.collectives)
    if not switches:
        raise CannotSwitch(f"{library.name} cannot switch any of {', '.join(config.collectives)} at run time")
    state.create(config, library.fingerprint, library.name, switches)
    return state


def run_untouched(library: MPILibrary, argv: Sequence[str], *, timeout: float | None = None) -> int:
    """Run the command as it is (no interposer): for libraries that cannot switch."""
    argv = own_launcher(argv, library)
    command = rank_command(argv, {}, library)
    result = run_launch(list(command.argv), command.full_env(), timeout=timeout,
                        on_stdout=lambda line: print(line, flush=True),
                        on_stderr=lambda line: print(line, file=sys.stderr, flush=True))
    return result.exit_status


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
    adapter = adapter_for(library)
    # What this run draws from, kept next to its records.
    strict = adapter.strict_selection_switch()
    run_table = state.write_table(run, batch, probabilities, path=records.with_suffix(".table"),
                                  refusals=adapter.refusal_messages(),
                                  strict=(strict.cvar, int(strict.value)) if strict is not None else None)
    argv = own_launcher(argv, library)  # the ranks must run the library the interposer was built for
    rank_env = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}
    preload = str(interposer) + (":" + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "")
    rank_env.update(adapter.launch_env())
    rank_env.update({"LD_PRELOAD": preload, "TUNEMPI_MODE": "online", "TUNEMPI_ONLINE_TABLE": str(run_table),
                     "TUNEMPI_ONLINE_OUT": str(records)})
    command = rank_command(argv, rank_env, library)
    env = command.full_env({**os.environ, **adapter.launch_env()})
    started = time.monotonic()
    result = run_launch(list(command.argv), env, timeout=timeout,
                        on_stdout=(lambda line: print(line, file=sys.stdout, flush=True)) if echo else None,
                        on_stderr=(lambda line: print(line, file=sys.stderr, flush=True)) if echo else None)
    duration = time.monotonic() - started
    meta = {"batch": batch, "run": run, "command": list(argv), "returncode": result.returncode,
            "duration_s": duration, "timed_out": result.timed_out, "fingerprint": library.fingerprint,
            "library": library.name, "records_written": records.exists()}
    records.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return OnlineRun(batch, run, result.exit_status, duration, records, records.exists(), result.timed_out)
