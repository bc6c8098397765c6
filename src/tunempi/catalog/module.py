"""`catalog module`: a Tcl modulefile (Environment Modules and Lmod read it alike) that sets what
`tunempi run --print-env` prints for a tuning directory: the variables that make the library load its files."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

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
    """Write atomically: a module command never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
