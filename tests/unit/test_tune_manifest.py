from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.space import Cell
from tunempi.tune.manifest import KIND, MANIFEST_NAME, Manifest, RunRecord, SelectionRow
from tunempi.tune.plan import PlanRecord, Prediction


def make_manifest(directory: Path) -> Manifest:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "openmpi.rules").write_text("1\n")
    manifest = Manifest.from_dict(directory, {
        "kind": KIND, "version": 1, "library": {"name": "openmpi-5.0.11", "fingerprint": "f", "prefix": "/x"},
        "files": {"openmpi-rules": "openmpi.rules"},
        "env_files": {"OMPI_MCA_coll_tuned_dynamic_rules_filename": "openmpi.rules"},
        "env": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"},
        "selection": [SelectionRow(Cell("allreduce", 2, 1, 2, 8), "ring", 3.0, 4.0).to_dict()],
        "rule_sets": {},
    })
    manifest.save()
    return manifest


def test_env_resolves_file_variables_against_the_directory_even_after_a_move(tmp_path: Path) -> None:
    make_manifest(tmp_path / "a")
    (tmp_path / "a").rename(tmp_path / "b")
    env = Manifest.load(tmp_path / "b").activation_env()
    assert env["OMPI_MCA_coll_tuned_dynamic_rules_filename"] == str((tmp_path / "b" / "openmpi.rules").resolve())
    assert env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"


def test_selection_round_trips_and_missing_files_are_named(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path)
    assert manifest.selection == (SelectionRow(Cell("allreduce", 2, 1, 2, 8), "ring", 3.0, 4.0),)
    assert manifest.missing_files() == []
    (tmp_path / "openmpi.rules").unlink()
    assert manifest.missing_files() == ["openmpi.rules"]


def test_load_refuses_what_is_not_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a tuning directory"):
        Manifest.load(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"kind": "something"}))
    with pytest.raises(UsageError, match="not a tunempi tuning manifest"):
        Manifest.load(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"kind": KIND, "version": 99}))
    with pytest.raises(UsageError, match="version 99"):
        Manifest.load(tmp_path)


def test_the_record_round_trips_through_its_json_and_keeps_the_keys(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path)
    replaced = dataclasses.replace(
        manifest, excluded={"allreduce": {"tree": "its leaf takes tree_type"}}, assumes=("contiguous",),
        distributions={"alltoallv": "skewed"},
        selection=(SelectionRow(Cell("allreduce", 2, 1, 2, 8), "default", 4.0, 4.0, replaced_from="ring",
                                decided=(1.08, 1.04, 1.12, 2), others={"rabenseifner": 3.5}),),
        run=RunRecord(stop_reason="max_rounds", wall_s=1.23456, measured=3))
    replaced.save()
    loaded = Manifest.load(tmp_path)
    assert loaded == dataclasses.replace(replaced, run=RunRecord(stop_reason="max_rounds", wall_s=1.235, measured=3))
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert data["excluded"] == {"allreduce": {"tree": "its leaf takes tree_type"}}
    assert data["assumes"] == ["contiguous"]
    assert data["distributions"] == {"alltoallv": "skewed"}  # verify measures alltoallv as tune did
    assert data["selection"][0]["replaced_from"] == "ring" and data["run"]["stop_reason"] == "max_rounds"
    assert data["selection"][0]["decided"] == {"speedup": 1.08, "low": 1.04, "high": 1.12, "launches": 2}
    assert data["selection"][0]["others"] == {"rabenseifner": 3.5}
    # the medians the extension policy reads: a replaced row's own median is the default's, so it names no ring
    assert loaded.selection[0].medians() == {(Cell("allreduce", 2, 1, 2, 8), "rabenseifner"): 3.5,
                                             (Cell("allreduce", 2, 1, 2, 8), "default"): 4.0}
    assert data["library"]["name"] == "openmpi-5.0.11" and data["verify"] is None


def test_a_manifest_without_the_newer_keys_still_loads(tmp_path: Path) -> None:
    make_manifest(tmp_path)
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    for key in ("excluded", "training_curve", "smoke", "strategy_params", "assumes", "distributions"):
        del data[key]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    loaded = Manifest.load(tmp_path)
    assert loaded.excluded == {} and loaded.smoke == () and loaded.library.fingerprint == "f"
    assert loaded.assumes == ()  # tuned before the option existed: files that assume nothing
    assert loaded.distributions == {}  # tuned before issue 40's distributions: every collective uniform
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"kind": KIND, "version": 1}))
    with pytest.raises(UsageError, match="not a readable tuning manifest"):
        Manifest.load(tmp_path)


def test_a_rerun_removes_the_files_the_earlier_manifest_listed_and_the_new_one_does_not(tmp_path: Path) -> None:
    earlier = dataclasses.replace(make_manifest(tmp_path), env_file="tuning.env")
    earlier = dataclasses.replace(earlier, compositions=dataclasses.replace(
        earlier.compositions, files={"composition": "composition.json"}))
    for name in ("tuning.env", "composition.json", "notes.txt"):
        (tmp_path / name).write_text("x\n")
    (tmp_path.parent / "outside.json").write_text("x\n")
    listed = earlier.file_names() | {"../outside.json"}
    assert earlier.file_names() == {"openmpi.rules", "tuning.env", "composition.json"}
    rerun = dataclasses.replace(earlier, compositions=dataclasses.replace(earlier.compositions, files={}))
    assert rerun.remove_files_no_longer_listed(listed) == ["composition.json"]
    assert not (tmp_path / "composition.json").exists()
    for kept in ("openmpi.rules", "tuning.env", "notes.txt"):  # still listed, or never listed
        assert (tmp_path / kept).is_file()
    assert (tmp_path.parent / "outside.json").is_file()  # never a path outside the directory


def test_the_manifest_keeps_predicted_and_actual_and_an_older_one_loads_without(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path)
    record = PlanRecord(Prediction(10.0, 13, 400), Prediction(12.5, 13, 414), "results store")
    dataclasses.replace(manifest, plan=record).save()
    data = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert data["plan"]["predicted"] == {"wall_s": 10.0, "launches": 13, "runs": 400}
    loaded = Manifest.load(tmp_path).plan
    assert loaded == record and loaded.error("wall_s") == pytest.approx(-0.2)
    del data["plan"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    assert Manifest.load(tmp_path).plan is None
