"""Compile tunempi's C parts with the TARGET library's mpicc, cached by library fingerprint.

The C sources ship inside the package; each (library, sources, headers, flags) combination is built once
into <cache>/build/<fingerprint>/ and rebuilt when the library, a source or a header changes. A lock file
makes concurrent builds (two jobs, two test workers) safe.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tunempi.config import cache_dir
from tunempi.errors import MPIError
from tunempi.mpi.library import MPILibrary, wrapper_env

WARNING_FLAGS: tuple[str, ...] = ("-std=c11", "-Wall", "-Wextra")


def build_dir(library: MPILibrary) -> Path:
    return cache_dir() / "build" / library.fingerprint


def headers_beside(sources: Sequence[Path]) -> list[Path]:
    """Every `*.h` in the directories of `sources` (what a `#include "x.h"` of theirs can reach)."""
    directories = sorted({Path(source).resolve().parent for source in sources})
    return sorted(header for directory in directories for header in directory.glob("*.h"))


def build_c(
    library: MPILibrary,
    sources: Sequence[Path],
    name: str,
    *,
    headers: Sequence[Path] = (),
    shared: bool = False,
    extra_flags: Sequence[str] = (),
    werror: bool = False,
) -> Path:
    """Build an executable (or a shared library with shared=True) and return its path.

    The output name carries a hash of the contents of the sources, of the headers (`headers` plus every
    `*.h` beside a source) and of the flags, so a changed source or header is rebuilt and an unchanged
    build is reused.
    """
    # MPICH 4.0.2's MPI_STATUSES_IGNORE is (MPI_Status *)1 and its prototypes declare arrays: GCC 12 then
    # warns that every MPI_Waitall(..., MPI_STATUSES_IGNORE) writes into "a region of size 0". A false
    # positive of that header, kept a warning rather than an error.
    strict = ["-Werror", "-Wno-error=stringop-overflow"] if werror else []
    flags = list(WARNING_FLAGS) + strict + ["-O2", "-D_GNU_SOURCE"]
    if shared:
        flags += ["-shared", "-fPIC"]
    flags += list(extra_flags)
    digest = hashlib.sha256()
    all_headers = sorted({Path(h).resolve() for h in [*headers, *headers_beside(sources)]})
    for path in [*sources, *all_headers]:
        digest.update(str(Path(path).name).encode() + b"\0")
        digest.update(Path(path).read_bytes())
    digest.update(" ".join(flags).encode())
    suffix = ".so" if shared else ""
    out_dir = build_dir(library)
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{name}-{digest.hexdigest()[:12]}{suffix}"
    if output.exists():
        return output
    with open(out_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if output.exists():  # another process built it while we waited
            return output
        tmp = output.with_name(output.name + f".tmp{os.getpid()}")
        argv = [str(library.mpicc), *flags, "-o", str(tmp), *map(str, sources), "-lm"]
        result = subprocess.run(argv, capture_output=True, text=True,
                                env={**os.environ, **wrapper_env(library.prefix)})
        if result.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise MPIError(
                f"building {name} with {library.mpicc} failed (exit {result.returncode}):\n"
                f"{' '.join(argv)}\n{result.stderr.strip()}"
            )
        os.replace(tmp, output)
    return output
