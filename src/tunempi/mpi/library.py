"""An MPI library as tunempi sees it: where it is, what it is, and a stable fingerprint.

Discovery (resolving a --mpi SPEC, reading MPI_Get_library_version, the library's algorithms and cvars)
lives in mpi/discovery.py; vendor-specific spellings live in the vendor adapters (mpi/mpich.py,
mpi/openmpi.py). Nothing outside mpi/ spells a vendor's cvar or environment variable.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

VENDORS: tuple[str, ...] = ("mpich", "openmpi", "impi")
#: The launcher (launch/'s registry name) that belongs to each vendor's own library. Intel MPI's
#: mpiexec.hydra takes the flags of MPICH's Hydra that tunempi uses (-n, -ppn, -hosts, -genv, -bind-to,
#: -launcher(-exec), -localhost; checked on 2021.19.0).
LAUNCHERS: dict[str, str] = {"mpich": "hydra", "openmpi": "mpirun", "impi": "hydra"}
#: A compiler wrapper that finds its headers and libraries only through a root variable naming the
#: install prefix (Intel MPI's mpicc: I_MPI_ROOT), recognised by a file only that library installs.
ROOT_VARIABLES: tuple[tuple[str, str], ...] = (("bin/impi_info", "I_MPI_ROOT"),)


def wrapper_env(prefix: Path) -> dict[str, str]:
    """Variables the install prefix's compiler wrapper and tools need to find their own files."""
    return {variable: os.path.abspath(prefix) for marker, variable in ROOT_VARIABLES if (prefix / marker).exists()}


@dataclass(frozen=True)
class MPILibrary:
    """One installed MPI library, identified by what it says about itself."""

    vendor: str  # one of VENDORS
    version: str  # e.g. "5.0.2"
    version_string: str  # MPI_Get_library_version, verbatim
    device: str  # e.g. "ch4:ucx" (MPICH), "" where the library does not say
    prefix: Path  # install prefix (bin/, lib/, include/)
    mpicc: Path
    mpiexec: Path  # the launcher that belongs to this library (mpiexec for Hydra, mpirun for Open MPI)
    embedded: bool = False  # installed by tunempi's own setup (PyPI wheel) rather than by the site

    @property
    def name(self) -> str:
        return f"{self.vendor}-{self.version}"

    @property
    def spec(self) -> str:
        """The --mpi SPEC that names this library in a command a user is told to run: the vendor for the
        embedded wheel, else its mpicc (Debian's MPICH and Open MPI share the prefix /usr)."""
        return self.vendor if self.embedded else str(self.mpicc)

    @property
    def wrapper_env(self) -> dict[str, str]:
        """What this library's mpicc (and its own tools) need in the environment (mpi.library.wrapper_env)."""
        return wrapper_env(self.prefix)

    @property
    def launcher(self) -> str | None:
        """The registry name of this library's own launcher (launch.get_launcher), None if unknown."""
        return LAUNCHERS.get(self.vendor)

    @property
    def fingerprint(self) -> str:
        """Changes when the library changes: vendor, version, resolved mpicc path and libmpi's mtime/size.

        Compiled C parts are cached under this key, and measurements are tagged with it.
        """
        parts = [self.vendor, self.version, str(os.path.realpath(self.mpicc))]
        for lib in sorted((self.prefix / "lib").glob("libmpi.so*")):
            try:
                stat = lib.stat()
            except OSError:
                continue
            parts.append(f"{lib.name}:{stat.st_size}:{int(stat.st_mtime)}")
        digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
        return f"{self.vendor}-{self.version}-{digest}"
