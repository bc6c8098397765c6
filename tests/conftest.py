"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PEAK_FILE = "ornl-peak.csv.gz"


def _datasets_folder() -> Path:
    """The project's own copy of the datasets (data/ in the repository); TUNEMPI_DATASETS points elsewhere."""
    explicit = os.environ.get("TUNEMPI_DATASETS")
    return Path(explicit) if explicit else Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def peak_dataset() -> Path:
    """The real Open MPI sweep on ORNL's Peak, shipped in data/. Missing is a failure, not a skip."""
    path = _datasets_folder() / PEAK_FILE
    if not path.is_file():
        pytest.fail(f"{path} is missing: the repository ships it in data/ (see data/README.md)")
    return path


# System packages some tests need, by the group names of tools/system-packages.sh, and how to tell they are here.
SYSTEM_GROUPS: dict[str, tuple[str, ...]] = {
    "site-mpi": ("/usr/bin/mpicc.mpich", "/usr/bin/mpicc.openmpi", "/usr/bin/gfortran"),
    "slurm": ("/usr/sbin/slurmd", "/usr/sbin/slurmctld", "/usr/bin/srun"),
    "browser": ("/usr/bin/chromium",),
}


def require_system(group: str) -> None:
    """Skip with a one-line reason when a system package group is missing; under CI=true fail instead."""
    missing = [path for path in SYSTEM_GROUPS[group] if not Path(path).exists()]
    if not missing:
        return
    reason = (f"needs the '{group}' system packages ({', '.join(missing)} missing): "
              "run `make test` as root on Debian to install them")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)
