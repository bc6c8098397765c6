"""Build the interposer for one MPI library: generate the wrappers from its mpi.h, compile with its mpicc.

The result is a shared library cached under the library's fingerprint (tunempi.mpi.build), to be
LD_PRELOAD'ed into the application's ranks.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from tunempi.mpi.build import build_c, build_dir
from tunempi.mpi.fortran import fortran_bindings
from tunempi.mpi.library import MPILibrary
from tunempi.profile.generate import generate, generate_fortran, parse_prototypes, preprocess_mpi_h

RUNTIME_SOURCES: tuple[str, ...] = ("tmpi_core.c", "tmpi_sizes.c", "tmpi_profile.c", "tmpi_online.c")
HEADERS: tuple[str, ...] = ("tmpi.h", "tmpi_hash.h", "tmpi_counts.h", "tmpi_online_stream.h", "tmpi_fortran.h")


def c_source_dir() -> Path:
    return Path(str(resources.files("tunempi.profile") / "c"))


def generate_wrappers(library: MPILibrary) -> str:
    """The generated wrapper layer for this library (C text): the C wrappers, and the Fortran entry points
    of the library's Fortran bindings that call PMPI_ directly (mpi.fortran)."""
    prototypes = parse_prototypes(preprocess_mpi_h(library.mpicc))
    source = f"{library.name} mpi.h"
    fortran = fortran_bindings(library)
    return generate(prototypes, source=source) + generate_fortran(
        prototypes, f77=fortran.intercept_f77, f08=fortran.intercept_f08, source=source)


def build_interposer(library: MPILibrary, *, werror: bool = False) -> Path:
    """Path of the interposer shared library for `library`, building it if needed."""
    c_dir = c_source_dir()
    out_dir = build_dir(library) / "interposer-src"
    out_dir.mkdir(parents=True, exist_ok=True)
    wrappers = out_dir / "tmpi_wrappers.c"
    text = generate_wrappers(library)
    if not wrappers.exists() or wrappers.read_text() != text:
        tmp = wrappers.with_name(f"{wrappers.name}.tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, wrappers)  # atomic: concurrent builders write the same text
    sources = [c_dir / name for name in RUNTIME_SOURCES] + [wrappers]
    return build_c(
        library,
        sources,
        "libtunempi-interposer",
        headers=[c_dir / name for name in HEADERS],
        shared=True,
        extra_flags=[f"-I{c_dir}"],
        werror=werror,
    )
