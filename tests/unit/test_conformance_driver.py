"""The conformance suite's driver (tests/conformance/suite.py run_suite) over a scripted program: what is
relaunched after a crash, and what is left out. The real program and libraries run in tests/conformance."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

import suite  # noqa: E402

from tunempi.launch.process import LaunchResult  # noqa: E402

#: index -> (collective, case); the nest/usersum class crashes whenever one of its cases runs.
CASES = {0: ("allreduce", "world copy nest/usersum 1 0"), 1: ("allreduce", "world copy int/sum 1 0"),
         2: ("allreduce", "world copy nest/usersum 7 0"), 3: ("bcast", "world copy nest/usersum 7 0")}


class ScriptedProgram:
    """Stands in for coll_conformance under a launcher: runs the cases from --start, leaving out --skip."""

    def __init__(self) -> None:
        self.launches: list[tuple[int, set[int]]] = []

    def __call__(self, argv, env=None, timeout=None, **_: object) -> LaunchResult:  # noqa: ANN001 - run_launch's
        args = list(argv)
        start = int(args[args.index("--start") + 1])
        skipped = {int(i) for i in args[args.index("--skip") + 1].split(",")} if "--skip" in args else set()
        self.launches.append((start, skipped))
        lines = ["READY"]
        for index in sorted(CASES):
            if index < start or index in skipped:
                continue
            collective, case = CASES[index]
            if collective == "allreduce" and "nest/usersum" in case:
                return LaunchResult(tuple(args), 139, "\n".join(lines), "segfault", False, 0.1)
            lines.append(f"R {index} {collective} {case} ok")
        lines.append("DONE 0")
        return LaunchResult(tuple(args), 0, "\n".join(lines), "", False, 0.1)


@pytest.fixture
def program(monkeypatch: pytest.MonkeyPatch) -> ScriptedProgram:
    scripted = ScriptedProgram()
    monkeypatch.setattr(suite, "list_cases", lambda *a, **k: dict(CASES))
    monkeypatch.setattr(suite, "launch_command", lambda library, ranks, args: (list(args), {}))
    monkeypatch.setattr(suite, "library_env", lambda library: {})
    monkeypatch.setattr(suite, "run_launch", scripted)
    return scripted


def _verdicts(outcomes: dict[int, suite.Outcome]) -> list[str]:
    return [outcomes[i].verdict for i in sorted(outcomes)]


def test_every_crash_costs_a_relaunch_and_is_recorded_by_default(program: ScriptedProgram) -> None:
    outcomes = suite.run_suite(None, 2, program=Path("coll_conformance"))  # type: ignore[arg-type]
    assert _verdicts(outcomes) == ["CRASH", "ok", "CRASH", "ok"]
    assert [start for start, _ in program.launches] == [0, 1, 3]


def test_a_crashed_class_is_left_out_of_the_rest_of_the_launch_when_asked(program: ScriptedProgram) -> None:
    asked: list[str] = []

    def after(crashed: suite.Outcome) -> bool:
        asked.append(crashed.case)
        return True

    outcomes = suite.run_suite(None, 2, program=Path("coll_conformance"),  # type: ignore[arg-type]
                               skip_class_after=after)
    # Case 2 is of the crashed class (allreduce, nest/usersum): not run; bcast's case of the same datatypes
    # is another class and runs.
    assert _verdicts(outcomes) == ["CRASH", "ok", "SKIP", "ok"]
    assert asked == [CASES[0][1]]
    assert program.launches == [(0, set()), (1, {2})]


def test_what_later_runs_skip_takes_the_mixed_type_cases_of_a_crashed_type_and_no_other() -> None:
    # Intel MPI 2021.19.0's gather corrupts its root's heap on the negative-lower-bound type: the cases where
    # half the ranks pass that type (`neglb|int`) are its class too; another type's mixed cases, and the same
    # type in another collective, still run.
    outcomes = {i: suite.Outcome(i, c, case, verdict) for i, (c, case, verdict) in enumerate([
        ("gather", "world copy neglb 33 3", "CRASH"),
        ("gather", "world copy neglb|int 33 0", "ok"),
        ("gather", "world copy vec|int 7 0", "ok"),
        ("scatter", "world copy neglb|int 33 0", "ok"),
        ("gather", "world copy int 7 0", "FAIL"),
    ])}
    assert suite.crashing(outcomes) == [("gather", "world copy neglb 33 3"), ("gather", "world copy neglb|int 33 0")]
