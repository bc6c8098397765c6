"""The test suite's own layout: pytest imports test files by basename (rootdir-relative, no packages),
so two files with one name in tests/unit and tests/integration stop collection for the whole suite."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_its_own_basename() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
