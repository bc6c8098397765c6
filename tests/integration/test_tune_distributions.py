"""`tune --distribution` (issue 40): a vector collective is tuned with the per-rank count distribution asked
for (skewed, sparse), not only with equal counts. Every point tune measures of it has that distribution in
the results store (a point of its own beside a uniform one of the same mean block), and the manifest records
it for verify. The embedded MPICH, 2 ranks, two sizes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from profile_support import QUICK_TUNE, tunempi

pytestmark = pytest.mark.mpi



def test_tune_measures_each_vector_collective_with_the_distribution_asked_for(tmp_path: Path) -> None:
    tuned = tunempi("tune", "--mpi", "mpich", "--ranks", "2", "--collectives", "alltoallv,allgatherv",
                    "--distribution", "alltoallv=skewed", "--distribution", "allgatherv=sparse",
                    "--min-msg", "1KiB", "--max-msg", "2KiB", "--out", "tuned", *QUICK_TUNE, cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout[-3000:] + tuned.stderr[-3000:]
    assert "counts: allgatherv sparse, alltoallv skewed" in tuned.stdout
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        stored = set(db.execute("SELECT DISTINCT collective, distribution FROM measurements"))
    assert stored == {("alltoallv", "skewed"), ("allgatherv", "sparse")}
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert manifest["distributions"] == {"allgatherv": "sparse", "alltoallv": "skewed"}
    assert {row["collective"] for row in manifest["selection"]} == {"alltoallv", "allgatherv"}

