from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.rules import CommBlock, MsgRule, RuleSet, SelectionTable, build_rule_sets
from tunempi.writers.env_file import read_env_file, write_env_file

GOLDEN = Path(__file__).parents[1] / "golden"


def fake_force_env(collective: str, algorithm: str) -> dict[str, str]:
    """Stands in for a vendor adapter's force_env (the real spellings live in mpi/)."""
    return {f"LIB_{collective.upper()}_ALGORITHM": algorithm, "LIB_ENABLE_FORCING": "1"}


def everywhere(collective: str, *rules: MsgRule) -> RuleSet:
    """A rule set for every communicator size (tune's never are: they stop where the evidence does)."""
    return RuleSet(collective, (CommBlock(1, None, rules),))


def forceable() -> list[RuleSet]:
    return [everywhere("allreduce", MsgRule(None, "ring")), everywhere("alltoall", MsgRule(None, "pairwise")),
            everywhere("bcast", MsgRule(4095, "binomial"), MsgRule(None, "scatter ring"))]


def table() -> SelectionTable:
    items = [("allreduce", r, s, "ring") for r in (2, 4) for s in (8, 1 << 20)]
    items += [("bcast", r, s, "binomial" if s < 4096 else "scatter ring") for r in (2, 4) for s in (8, 1 << 20)]
    items += [("alltoall", 2, 8, "pairwise")]
    return SelectionTable.from_items(items)


def test_golden_env_file() -> None:
    env_file = write_env_file(forceable(), fake_force_env, extra_env={"LIB_TUNING_FILE": "/tmp/tuned dir/file.json"})
    path = GOLDEN / "example.env"
    if os.environ.get("TUNEMPI_UPDATE_GOLDEN") == "1":
        path.write_text(env_file.text)
    assert env_file.text == path.read_text()
    assert env_file.needs_file == ("bcast",)
    assert env_file.env == {"LIB_TUNING_FILE": "/tmp/tuned dir/file.json", "LIB_ALLREDUCE_ALGORITHM": "ring",
                            "LIB_ENABLE_FORCING": "1", "LIB_ALLTOALL_ALGORITHM": "pairwise"}


def test_env_file_round_trips_through_a_real_shell(tmp_path: Path) -> None:
    env_file = write_env_file(forceable(), fake_force_env, extra_env={"LIB_X": "a b'c"})
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
        write_env_file(forceable()[:2], clashing)


def test_default_everywhere_sets_nothing() -> None:
    env_file = write_env_file(build_rule_sets(SelectionTable.from_items([("bcast", 2, 8, "default")])),
                              fake_force_env)
    assert env_file.env == {} and env_file.needs_file == ()
    assert "library's own choice" in env_file.text


def test_a_tuning_measured_at_some_sizes_forces_nothing() -> None:
    """Forcing acts at every communicator size; a tuning's rules act only where measured (issue 57)."""
    env_file = write_env_file(build_rule_sets(table()), fake_force_env)
    assert env_file.env == {} and env_file.needs_file == ("allreduce", "alltoall", "bcast")
    assert "# allreduce: ring at 2..4 ranks only; forcing would apply it at every communicator size" in env_file.text
