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
