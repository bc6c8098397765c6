"""`tunempi export` / `tunempi import` through the real entry point (exit statuses included)."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

from tunempi.cli.main import main
from tunempi.store import Measurement, ResultStore


def _run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["tunempi", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    code = exit_info.value.code
    return 0 if code is None else int(code)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    with ResultStore(path) as store:
        store.add_many([
            Measurement(library_fingerprint="mpich-5.0.2-abc", library="mpich-5.0.2", collective=c, algorithm="ring",
                        ranks=2, msg_bytes=s, mean_us=float(s), median_us=float(s))
            for c in ("allreduce", "bcast") for s in (8, 1024, 65536)
        ])
    return path


def test_export_to_stdout_with_filters(db: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(monkeypatch, "export", "--db", str(db), "--collective", "bcast", "--sizes", "8,1KiB") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split(",")[:10] == ["system", "library", "collective", "algorithm", "ranks", "nodes", "ppn",
                                        "msg_bytes", "run", "latency_us"]
    assert [line.split(",")[2:8] for line in lines[1:]] == [
        ["bcast", "ring", "2", "1", "2", "8"], ["bcast", "ring", "2", "1", "2", "1024"],
    ]


def test_export_file_by_library_and_env_db(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEMPI_DB", str(db))
    out = tmp_path / "out.csv.gz"
    assert _run(monkeypatch, "export", "--library", "mpich-5.0.2", "--ranks", "2", "-o", str(out)) == 0
    with gzip.open(out, "rt") as handle:
        assert len(handle.read().splitlines()) == 1 + 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--format", "json"), "valid: csv"),
        (("--collective", "allreduse"), "valid: allreduce"),
        (("--library", "intel-2021"), "mpich-5.0.2"),
        (("--ranks", "two"), "whole numbers"),
    ],
)
def test_export_usage_errors_exit_2(db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                    args: tuple[str, ...], message: str) -> None:
    assert _run(monkeypatch, "export", "--db", str(db), *args) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_export_missing_db_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(monkeypatch, "export", "--db", str(tmp_path / "none.sqlite")) == 2
    assert not (tmp_path / "none.sqlite").exists()


def test_import_then_reimport(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str], peak_dataset: Path) -> None:
    db = tmp_path / "r.sqlite"
    assert _run(monkeypatch, "import", "--db", str(db), str(peak_dataset)) == 0
    assert _run(monkeypatch, "import", "--db", str(db), str(peak_dataset)) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "imported 30861 of 30861" in err and "imported 0 of 30861" in err
    with ResultStore(db) as store:
        assert len(store) == 30861


def test_import_usage_errors_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.sqlite"
    assert _run(monkeypatch, "import", "--db", str(db), str(tmp_path / "missing.csv")) == 2
    assert not db.exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("system,library\n")
    assert _run(monkeypatch, "import", "--db", str(db), str(bad)) == 2
    assert _run(monkeypatch, "import", "--db", str(db)) == 2  # no FILE: Typer's own usage error
