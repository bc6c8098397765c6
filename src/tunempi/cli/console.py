"""The consoles every subcommand prints through: readable whether or not stdout is a terminal."""

from __future__ import annotations

import os

from rich.console import Console

#: Columns at least, when output goes to a file or a pipe: tables keep every column whole instead of being
#: squeezed into "…" at Rich's default of 80 (or at a COLUMNS=80 that a job environment exports).
FILE_WIDTH = 200


def output_console(*, stderr: bool = False) -> Console:
    """The terminal's width on a terminal; otherwise FILE_WIDTH columns (or a wider COLUMNS), no colours."""
    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=max(FILE_WIDTH, int(columns) if columns.isdigit() else 0))
