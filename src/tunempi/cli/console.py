"""The consoles every subcommand prints through: readable whether or not stdout is a terminal."""

from __future__ import annotations

import os

from rich.console import Console

#: Columns when output goes to a file or a pipe (and COLUMNS does not say): tables keep every column
#: whole instead of being squeezed into "..." at Rich's default of 80.
FILE_WIDTH = 200


def output_console(*, stderr: bool = False) -> Console:
    """The terminal's width on a terminal; COLUMNS, else FILE_WIDTH columns (no colour codes) otherwise."""
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console
    return Console(stderr=stderr, width=FILE_WIDTH)
