"""`tunempi run --tuning DIR [--mpi SPEC] -- cmd ...`: run a command with a tuning directory's environment."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from tunempi.cli.paths import directory_option
from tunempi.errors import UsageError
from tunempi.launch import LaunchError, run_in_foreground
from tunempi.launch.layout import job_layout
from tunempi.mpi.discovery import SPEC_HELP, adapter_for
from tunempi.report.tuning import application_warnings, assumption_lines
from tunempi.tune.apply import (
    check_tuning_files,
    command_for_library,
    layout_notes,
    left_to_library,
    tuning_library,
)
from tunempi.tune.manifest import Manifest


def run_command(
    tuning: Annotated[Path, typer.Option(help="A tuning directory written by `tunempi tune`.",
                                                  callback=directory_option)],
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --, e.g. -- mpiexec -n 8 ./app")]
    = None,
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}); default: the one the "
                                            "directory was tuned with. It must be that library.")] = None,
    print_env: Annotated[bool, typer.Option("--print-env", help="Print `export` lines instead of running.")]
    = False,
) -> None:
    """Run a command (usually a launcher line) with the environment the tuning files need.

    Refused (exit 2) before anything starts when the library is not the one the directory was tuned for,
    a tuning file is missing or corrupt, or the launcher belongs to another MPI. A bare `mpiexec` or
    `mpirun` is the tuned library's own launcher.
    """
    manifest = Manifest.load(tuning)
    library = tuning_library(manifest, mpi)
    check_tuning_files(manifest, library)
    env = manifest.activation_env()
    for line in assumption_lines(manifest):
        print(f"tunempi run: {line}", file=sys.stderr)
    for line in application_warnings(manifest):
        print(f"tunempi run: warning: {line}", file=sys.stderr)
    if print_env:
        for name, value in sorted(env.items()):
            print(f"export {name}={shlex.quote(value)}")
        return
    if not command:
        raise UsageError("no command given; usage: tunempi run --tuning DIR -- mpiexec -n 8 ./app")
    # The job's layout against what the tuning measured (issue 57): outside it, it still runs, without the
    # variables the library cannot bound (Intel MPI's strings), so that it keeps its own choice there.
    layout, adapter = job_layout(command, library), adapter_for(library)
    for variables in left_to_library(manifest, layout, adapter).values():
        for name in variables:
            env.pop(name, None)
    notes, warnings = layout_notes(manifest, layout, adapter)
    for line in notes:
        print(f"tunempi run: {line}", file=sys.stderr)
    for line in warnings:
        print(f"tunempi run: warning: {line}", file=sys.stderr)
    argv, launcher_env = command_for_library(command, library)
    # A child, not exec: stopped (Ctrl-C, SIGTERM, SIGHUP), tunempi kills the whole job, which a launcher
    # left to itself does not always do (docs/launch.md, "Stopping a run").
    try:
        code = run_in_foreground(argv, {**os.environ, **launcher_env, **env})
    except LaunchError as exc:
        raise UsageError(str(exc)) from None
    sys.exit(code if code >= 0 else 128 - code)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run_command)
