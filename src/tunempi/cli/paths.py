"""Options that name a directory: a file there (or on the way there) is a usage error before any work starts,
not a traceback from deep inside the command (issue 58)."""

from __future__ import annotations

from pathlib import Path

import typer

from tunempi.config import not_a_directory


def directory_option(value: str | Path | None) -> str | Path | None:
    """Typer callback of a directory option given as a flag: Click reports the BadParameter and exits 2 (an
    option whose value may come from the environment is checked again with config.directory_setting)."""
    if value is not None and (why := not_a_directory(value)):
        raise typer.BadParameter(why)
    return value
