"""`catalog module`: a Tcl modulefile (Environment Modules and Lmod read it alike) that sets what
`tunempi run --print-env` prints for a tuning directory, the variables that make the library load its files,
less those a module cannot bound (`module_env`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tunempi.catalog.store import write_atomically
from tunempi.errors import UsageError
from tunempi.tune.apply import measured_layouts_words, unbounded_env

if TYPE_CHECKING:
    from tunempi.mpi.vendor import VendorAdapter
    from tunempi.tune.manifest import Manifest

#: Tcl words that need no quoting: braces would also do, but a value with a brace or backslash cannot use them
_PLAIN = re.compile(r"^[A-Za-z0-9_./:=,+@%-]+$")


def tcl_word(value: str) -> str:
    """`value` as one Tcl word, taken literally (no substitution of $, [ or \\)."""
    if _PLAIN.match(value):
        return value
    if not re.search(r"[{}\\]", value):
        return "{" + value + "}"
    return '"' + re.sub(r'([\\"$\[\]{}])', r"\\\1", value) + '"'


def module_env(manifest: Manifest, adapter: VendorAdapter) -> tuple[dict[str, str], tuple[str, ...]]:
    """(the variables the module sets, the names it leaves out): `run --print-env`'s less every variable whose
    rules act at communicator sizes no rule states (adapter.unbounded_selection_env: Intel MPI's strings take
    the nearest condition's preset, Open MPI's libnbc values are one per collective). `run` leaves those out of a job outside the measured layouts
    (tune.apply.left_to_library); a module is loaded before any job's layout is known, so it cannot, and set
    there they would replace the library's own choice without evidence."""
    unbounded = unbounded_env(manifest, adapter)
    return {name: value for name, value in manifest.activation_env().items() if name not in unbounded}, unbounded


def left_out_text(manifest: Manifest, left: Iterable[str]) -> str:
    """One line on what `module_env` left out, why, and what sets it instead."""
    measured = measured_layouts_words(manifest)
    names = list(left)
    them = "it" if len(names) == 1 else "them"
    return (f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} left out of the module: this library "
            f"applies {them} at every communicator size, measured or not, and a "
            f"module is loaded before a job's layout is known; `tunempi run --tuning {manifest.directory.resolve()}"
            f" -- ...` sets {them} for a job within the layouts measured ({measured or 'none recorded'}) and "
            f"leaves every other job to the library")


def modulefile_text(env: Mapping[str, str], *, what: str, notes: Iterable[str] = ()) -> str:
    """The modulefile: a whatis line, `notes` as comments and one setenv per variable (unloading unsets them:
    module's own undo)."""
    lines = ["#%Module1.0", f"## {what}", "## written by `tunempi catalog module`: load it where jobs start",
             *(f"## {note}" for note in notes), f"module-whatis {tcl_word(what)}"]
    lines += [f"setenv {name} {tcl_word(value)}" for name, value in sorted(env.items())]
    return "\n".join(lines) + "\n"


def write_modulefile(path: Path, text: str) -> Path:
    """Write atomically (a `module` command never reads half a file), readable by every user; UsageError where
    it cannot be written."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory: name the modulefile inside it, e.g. {path / 'site'}")
    try:
        return write_atomically(path, text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
