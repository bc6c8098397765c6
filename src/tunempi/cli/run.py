"""`tunempi run --tuning DIR -- cmd ...`: run a command with a tuning directory's environment."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from tunempi.errors import UsageError
from tunempi.tune.manifest import Manifest


def tuning_environment(directory: Path) -> dict[str, str]:
    """The variables that make the library read the tuning files (file paths resolved)."""
    manifest = Manifest.load(directory)
    missing = manifest.missing_files()
    if missing:
        raise UsageError(f"{directory}: files named in the manifest are missing: {', '.join(missing)}")
    return manifest.activation_env()


def run_command(
    tuning: Annotated[Path, typer.Option(help="A tuning directory written by `tunempi tune`.")],
    command: Annotated[list[str] | None, typer.Argument(help="The command, after --, e.g. -- mpiexec -n 8 ./app")]
    = None,
    print_env: Annotated[bool, typer.Option("--print-env", help="Print `export` lines instead of running.")]
    = False,
) -> None:
    """Run a command (usually a launcher line) with the environment the tuning files need."""
    env = tuning_environment(tuning)
    if print_env:
        for name, value in sorted(env.items()):
            print(f"export {name}={shlex.quote(value)}")
        return
    if not command:
        raise UsageError("no command given; usage: tunempi run --tuning DIR -- mpiexec -n 8 ./app")
    try:
        code = subprocess.call(command, env={**os.environ, **env})
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]}") from None
    sys.exit(code)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run_command)
