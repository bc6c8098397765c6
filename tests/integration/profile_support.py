"""Test helpers for the profile integration tests: the embedded libraries and plain launch command lines.

TODO(launch/, mpi/): replace `embedded_library` with tunempi.mpi.discovery and `launch_argv` with the
launch/ package's launchers once those land.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tunempi.mpi.library import MPILibrary

VENV_OPT = Path(sys.prefix) / "opt"


def embedded_library(vendor: str) -> MPILibrary:
    """The embedded MPICH 5.0.2 / Open MPI 5.0.11 of `make setup`, described by hand."""
    prefix = VENV_OPT / vendor
    bin_dir = prefix / "bin"
    if vendor == "mpich":
        text = subprocess.run([str(bin_dir / "mpichversion")], capture_output=True, text=True, check=True).stdout
        version = re.search(r"MPICH Version:\s*(\S+)", text)
        assert version, text
        return MPILibrary("mpich", version.group(1), text.strip(), "ch4:ucx", prefix, bin_dir / "mpicc",
                          bin_dir / "mpiexec", embedded=True)
    text = subprocess.run([str(bin_dir / "ompi_info"), "--version"], capture_output=True, text=True,
                          check=True).stdout
    version = re.search(r"Open MPI v(\S+)", text)
    assert version, text
    return MPILibrary("openmpi", version.group(1), text.strip().splitlines()[0], "", prefix, bin_dir / "mpicc",
                      bin_dir / "mpirun", embedded=True)


def launch_argv(library: MPILibrary, ranks: int, program: Sequence[str]) -> list[str]:
    """A plain launch command line (Hydra mpiexec, or Open MPI mpirun oversubscribed as root)."""
    if library.vendor == "mpich":
        return [str(library.mpiexec), "-n", str(ranks), *program]
    return [str(library.mpiexec), "--allow-run-as-root", "--oversubscribe", "-n", str(ranks), *program]


def rank_env_argv(library: MPILibrary, ranks: int, program: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Like launch_argv, with `env` passed to the ranks on the launcher's command line."""
    argv = launch_argv(library, ranks, program)
    flags: list[str] = []
    for name, value in env.items():
        flags += ["-genv", name, value] if library.vendor == "mpich" else ["-x", f"{name}={value}"]
    return [argv[0], *flags, *argv[1:]]


def run(argv: Sequence[str], timeout: float = 60, env: Mapping[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run a launch in its own session; on timeout kill the whole group (launcher, proxies, ranks)."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(env),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"timed out after {timeout} s: {' '.join(argv)}\n{out}\n{err}") from None
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
