from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.writers.env_file import read_env_file, write_env_file

GOLDEN = Path(__file__).parents[1] / "golden"


def fake_force_env(collective: str, algorithm: str) -> dict[str, str]:
    """Stands in for a vendor adapter's force_env (the real spellings live in mpi/)."""
    return {f"LIB_{collective.upper()}_ALGORITHM": algorithm, "LIB_ENABLE_FORCING": "1"}


def table() -> SelectionTable:
    items = [("allreduce", r, s, "ring") for r in (2, 4) for s in (8, 1 << 20)]
    items += [("bcast", r, s, "binomial" if s < 4096 else "scatter ring") for r in (2, 4) for s in (8, 1 << 20)]
    items += [("alltoall", 2, 8, "pairwise")]
    return SelectionTable.from_items(items)


def test_golden_env_file() -> None:
    env_file = write_env_file(build_rule_sets(table()), fake_force_env,
                              extra_env={"LIB_TUNING_FILE": "/tmp/tuned dir/file.json"})
    path = GOLDEN / "example.env"
    if os.environ.get("TUNEMPI_UPDATE_GOLDEN") == "1":
        path.write_text(env_file.text)
    assert env_file.text == path.read_text()
    assert env_file.needs_file == ("bcast",)
    assert env_file.env == {"LIB_TUNING_FILE": "/tmp/tuned dir/file.json", "LIB_ALLREDUCE_ALGORITHM": "ring",
                            "LIB_ENABLE_FORCING": "1", "LIB_ALLTOALL_ALGORITHM": "pairwise"}


def test_env_file_round_trips_through_a_real_shell(tmp_path: Path) -> None:
    env_file = write_env_file(build_rule_sets(table()), fake_force_env, extra_env={"LIB_X": "a b'c"})
    script = tmp_path / "tuning.env"
    script.write_text(env_file.text)
    shown = subprocess.run(["sh", "-c", f". {script}; printf '%s|%s' \"$LIB_X\" \"$LIB_ALLREDUCE_ALGORITHM\""],
                           capture_output=True, text=True, check=True).stdout
    assert shown == "a b'c|ring"
    assert read_env_file(env_file.text) == env_file.env


def test_conflicting_spellings_are_refused() -> None:
    def clashing(collective: str, algorithm: str) -> dict[str, str]:
        return {"LIB_ALGORITHM": algorithm}

    with pytest.raises(UsageError, match="already"):
        write_env_file(build_rule_sets(SelectionTable.from_items(
            [("allreduce", 2, 8, "ring"), ("alltoall", 2, 8, "pairwise")])), clashing)


def test_default_everywhere_sets_nothing() -> None:
    env_file = write_env_file(build_rule_sets(SelectionTable.from_items([("bcast", 2, 8, "default")])),
                              fake_force_env)
    assert env_file.env == {} and env_file.needs_file == ()
    assert "library's own choice" in env_file.text
