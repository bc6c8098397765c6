"""A library's Fortran bindings: whether it has them, its Fortran compiler, and which of its Fortran entry
points bypass the C MPI_ functions (and so must be intercepted by the PMPI interposer on their own).

Measured on Debian's MPICH 4.0.2 and Open MPI 4.1.4 (disassembly of the Fortran libraries, and profiles of
tests/integration/fortran_apps/known_calls.F90; docs/mpi-facts-measured.md, "Fortran bindings"):
- Open MPI: every Fortran entry point (mpif.h, `use mpi`, `use mpi_f08`) converts its arguments and calls
  PMPI_X directly; a C interposer sees no Fortran call at all, not even MPI_Init/MPI_Finalize.
- MPICH: the mpif.h / `use mpi` entry points call the C MPI_X (already intercepted); in `use mpi_f08`
  the routines with a choice buffer (mpi_x_f08ts_) call the C MPI_X too, but those without one
  (mpi_init_f08_, mpi_finalize_f08_, mpi_barrier_f08_, mpi_wait_f08_, mpi_comm_free_f08_, ...) call PMPI_X.
The PyPI wheels of both have no Fortran bindings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tunempi.mpi.library import MPILibrary

FORTRAN_COMPILER_NAMES: tuple[str, ...] = ("mpifort", "mpif90")


@dataclass(frozen=True)
class FortranBindings:
    """compiler: the library's Fortran wrapper compiler, None when the library has no Fortran bindings.
    intercept_f77 / intercept_f08: the interposer must define that family's Fortran symbols itself
    (the family calls PMPI_ directly), see profile.generate.generate_fortran."""

    compiler: Path | None
    intercept_f77: bool
    intercept_f08: bool


def fortran_compiler(library: MPILibrary) -> Path | None:
    """mpifort/mpif90 next to the library's mpicc, with the same suffix (mpicc.mpich -> mpifort.mpich)."""
    name = library.mpicc.name
    suffix = name[len("mpicc"):] if name.startswith("mpicc") else ""
    for base in FORTRAN_COMPILER_NAMES:
        path = library.mpicc.parent / f"{base}{suffix}"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def fortran_bindings(library: MPILibrary) -> FortranBindings:
    compiler = fortran_compiler(library)
    if compiler is None:
        return FortranBindings(None, False, False)
    if library.vendor == "openmpi":
        return FortranBindings(compiler, True, True)
    return FortranBindings(compiler, False, True)  # MPICH: only mpi_f08's routines without a buffer
