"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PEAK_FILE = "ornl-peak.csv.gz"


def _shared_datasets() -> Path | None:
    """The team's shared datasets: TUNEMPI_SHARED_DATASETS, else `shared/datasets` beside the clone or
    beside any folder above it (a clone in /work/main or in /work/ci-check/main finds /work/shared)."""
    explicit = os.environ.get("TUNEMPI_SHARED_DATASETS")
    if explicit:
        return Path(explicit)
    for folder in Path(__file__).resolve().parents[1].parents:
        if (folder / "shared" / "datasets" / PEAK_FILE).is_file():
            return folder / "shared" / "datasets"
    return None


@pytest.fixture(scope="session")
def peak_dataset() -> Path:
    """The real Open MPI sweep on ORNL's Peak (../shared/datasets). Missing is a failure, not a skip."""
    folder = _shared_datasets()
    if folder is None or not (folder / PEAK_FILE).is_file():
        pytest.fail(f"{PEAK_FILE} not found beside the clone or above it; set TUNEMPI_SHARED_DATASETS to its folder")
    return folder / PEAK_FILE
