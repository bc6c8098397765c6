"""autotune's work state after a first step that failed (issue 58): the corrected command continues.

The user's first command failed in its profile step (a launch line the library's launcher refused), which
finished nothing; the corrected command (another --mpi, another launch line) must not need --restart. A
state with a finished step of another command is still refused: its steps would mix two applications'."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tunempi.autotune import (
    STATE_NAME,
    AutotuneListener,
    AutotuneOutcome,
    AutotuneRequest,
    Context,
    StepRunner,
    WorkState,
    run_autotune,
)
from tunempi.errors import TunempiError, UsageError


class FakeSteps(StepRunner):
    """A profile (that fails when asked to) whose plan picks no tuning: profile, plan, report."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def profile(self, ctx: Context) -> dict[str, Any]:
        self.calls.append("profile")
        if self.fail is not None:
            raise self.fail
        return {"profile": "p.json", "run_s": 1.0}

    def plan(self, ctx: Context) -> dict[str, Any]:
        self.calls.append("plan")
        return {"plan": [{"kind": "tune", "worth": False, "why": "collectives take 0.1%"}]}

    def report(self, ctx: Context, outcome: AutotuneOutcome) -> dict[str, Any]:
        self.calls.append("report")
        return {}


def request(tmp_path: Path, **changes: Any) -> AutotuneRequest:
    return AutotuneRequest(**{"command": ["mpiexec", "-n", "2", "./app"], "out": tmp_path / "work",
                              "budget_s": 110.0, **changes})


class Notes(AutotuneListener):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def test_a_corrected_command_continues_after_a_first_step_that_failed(tmp_path: Path) -> None:
    failing = FakeSteps(fail=TunempiError("the profiled run failed (exit status 1)"))
    with pytest.raises(TunempiError):
        run_autotune(request(tmp_path, command=["mpiexec", "-launcher", "ssh", "-n", "2", "./app"]), failing)
    assert json.loads((tmp_path / "work" / STATE_NAME).read_text())["steps"] == {}

    corrected, notes = FakeSteps(), Notes()
    outcome = run_autotune(request(tmp_path, mpi="mpich", command=["mpiexec", "-n", "2", "./app"]), corrected,
                           notes)
    assert corrected.calls == ["profile", "plan", "report"]
    assert not outcome.failed
    [line] = notes.notes
    assert "no step had finished" in line and "command, mpi" in line and "replaced" in line
    state = json.loads((tmp_path / "work" / STATE_NAME).read_text())
    assert state["key"]["mpi"] == "mpich" and "profile" in state["steps"]

    # now a step of the corrected command finished: a third command is refused, as before
    with pytest.raises(UsageError, match="another autotune command.*budget_s"):
        run_autotune(request(tmp_path, mpi="mpich", command=["mpiexec", "-n", "2", "./app"], budget_s=60.0),
                     FakeSteps())


def test_a_state_with_no_finished_step_is_replaced_and_one_with_a_finished_step_refused(tmp_path: Path) -> None:
    WorkState.open(tmp_path, {"command": ["a"]})
    replaced = WorkState.open(tmp_path, {"command": ["b"]})
    assert replaced.replaced is not None and "command" in replaced.replaced
    assert json.loads((tmp_path / STATE_NAME).read_text())["key"] == {"command": ["b"]}
    assert WorkState.open(tmp_path, {"command": ["b"]}).replaced is None  # the same command: it continues
    replaced.finish("profile", {"profile": "p.json"})
    with pytest.raises(UsageError, match="another autotune command"):
        WorkState.open(tmp_path, {"command": ["c"]})
    assert WorkState.open(tmp_path, {"command": ["b"]}).result("profile") == {"profile": "p.json"}
