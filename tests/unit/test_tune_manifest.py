from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.space import Cell
from tunempi.tune.manifest import KIND, MANIFEST_NAME, Manifest, SelectionRow


def make_manifest(directory: Path) -> Manifest:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "openmpi.rules").write_text("1\n")
    manifest = Manifest(directory, {
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
    env = Manifest.load(tmp_path / "b").env()
    assert env["OMPI_MCA_coll_tuned_dynamic_rules_filename"] == str((tmp_path / "b" / "openmpi.rules").resolve())
    assert env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"


def test_selection_round_trips_and_missing_files_are_named(tmp_path: Path) -> None:
    manifest = make_manifest(tmp_path)
    assert manifest.selection() == [SelectionRow(Cell("allreduce", 2, 1, 2, 8), "ring", 3.0, 4.0)]
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
