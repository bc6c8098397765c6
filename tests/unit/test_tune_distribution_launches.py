"""issue 40: the count distribution tune measures a vector collective with reaches every launch that measures it:
the deciding launches under files (FileDecider) and verify's launches under the files (measure_under_files),
which take it from the manifest. The launches themselves are replaced by a recorder (no MPI here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tunempi.tune.file_launches as file_launches
import tunempi.tune.verify_run as verify_run
from tunempi.space import Cell
from tunempi.tune.file_launches import FileDecider


def recorder(calls: list[dict[str, Any]]):  # noqa: ANN201
    def measure_sides(*args: Any, **kwargs: Any) -> list:
        calls.append(kwargs)
        return []
    return measure_sides


def test_verify_measures_under_the_files_with_the_manifest_s_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(verify_run, "measure_sides", recorder(calls))
    selection = {Cell("alltoallv", 2, 1, 2, 1024): "pairwise", Cell("allreduce", 2, 1, 2, 8): "ring"}
    verify_run.measure_under_files(SimpleNamespace(), SimpleNamespace(), {}, selection, range(2), SimpleNamespace(),
                                   distributions={"alltoallv": "skewed"})
    assert len(calls) == 2 and all(call["distributions"] == {"alltoallv": "skewed"} for call in calls)


def test_deciding_launches_under_files_measure_with_the_tune_s_distributions(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(file_launches, "measure_sides", recorder(calls))
    decider = FileDecider(SimpleNamespace(), SimpleNamespace(), SimpleNamespace(), staging=tmp_path,
                          distributions={"allgatherv": "sparse"})
    monkeypatch.setattr(decider, "sides", lambda layout, cells: [])
    decider.measure({Cell("allgatherv", 2, 1, 2, 1024): ["default", "ring"]}, block=1)
    assert [call["distributions"] for call in calls] == [{"allgatherv": "sparse"}]
