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
    every_size_line,
    layout_notes,
    left_to_library,
    tuning_library,
    unbounded_env,
)
from tunempi.tune.manifest import Manifest


def run_command(
    tuning: Annotated[Path, typer.Option(help="A tuning directory written by `tunempi tune`.",
                                                  callback=directory_option)],
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --, e.g. -- mpiexec -n 8 ./app")]
    = None,
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}); default: the one the "
                                            "directory was tuned with. It must be that library.")] = None,
    print_env: Annotated[bool, typer.Option("--print-env", help="Print `export` lines instead of running (with a "
                                            "launch line after --, those `run` would export for that job).")]
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
    adapter = adapter_for(library)
    if command:
        # The job's layout against what the tuning measured (issue 57): outside it, it still runs, without the
        # variables the library cannot bound (Intel MPI's strings, Open MPI's libnbc values), so that it keeps
        # its own choice there; --print-env prints what this job would get.
        layout = job_layout(command, library)
        for variables in left_to_library(manifest, layout, adapter).values():
            for name in variables:
                env.pop(name, None)
        notes, warnings = layout_notes(manifest, layout, adapter)
        for line in notes:
            print(f"tunempi run: {line}", file=sys.stderr)
        for line in warnings:
            print(f"tunempi run: warning: {line}", file=sys.stderr)
    elif not print_env:
        raise UsageError("no command given; usage: tunempi run --tuning DIR -- mpiexec -n 8 ./app")
    elif unbounded := unbounded_env(manifest, adapter):  # no job to judge: printed, and said to act everywhere
        print(f"tunempi run: warning: {every_size_line(manifest, unbounded)}", file=sys.stderr)
    if print_env or not command:
        for name, value in sorted(env.items()):
            print(f"export {name}={shlex.quote(value)}")
        return
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
