"""`catalog module`: a Tcl modulefile (Environment Modules and Lmod read it alike) that sets what
`tunempi run --print-env` prints for a tuning directory: the variables that make the library load its files."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from tunempi.catalog.store import write_atomically

#: Tcl words that need no quoting: braces would also do, but a value with a brace or backslash cannot use them
_PLAIN = re.compile(r"^[A-Za-z0-9_./:=,+@%-]+$")


def tcl_word(value: str) -> str:
    """`value` as one Tcl word, taken literally (no substitution of $, [ or \\)."""
    if _PLAIN.match(value):
        return value
    if not re.search(r"[{}\\]", value):
        return "{" + value + "}"
    return '"' + re.sub(r'([\\"$\[\]{}])', r"\\\1", value) + '"'


def modulefile_text(env: Mapping[str, str], *, what: str) -> str:
    """The modulefile: a whatis line and one setenv per variable (unloading unsets them: module's own undo)."""
    lines = ["#%Module1.0", f"## {what}", "## written by `tunempi catalog module`: load it where jobs start",
             f"module-whatis {tcl_word(what)}"]
    lines += [f"setenv {name} {tcl_word(value)}" for name, value in sorted(env.items())]
    return "\n".join(lines) + "\n"


def write_modulefile(path: Path, text: str) -> Path:
    """Write atomically (a `module` command never reads half a file), readable by every user."""
    return write_atomically(path, text)
