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


def _launched_by_the_driver(monkeypatch: pytest.MonkeyPatch, scripted: ScriptedProgram) -> ScriptedProgram:
    """`scripted` in place of the real program, launcher and case list."""
    monkeypatch.setattr(suite, "list_cases", lambda *a, **k: dict(CASES))
    monkeypatch.setattr(suite, "launch_command", lambda library, ranks, args: (list(args), {}))
    monkeypatch.setattr(suite, "library_env", lambda library: {})
    monkeypatch.setattr(suite, "run_launch", scripted)
    return scripted


@pytest.fixture
def program(monkeypatch: pytest.MonkeyPatch) -> ScriptedProgram:
    return _launched_by_the_driver(monkeypatch, ScriptedProgram())


def _verdicts(outcomes: dict[int, suite.Outcome]) -> list[str]:
    return [outcomes[i].verdict for i in sorted(outcomes)]


def test_every_crash_costs_a_relaunch_and_is_recorded_by_default(program: ScriptedProgram) -> None:
    outcomes = suite.run_suite(None, 2, program=Path("coll_conformance"))  # type: ignore[arg-type]
    assert _verdicts(outcomes) == ["CRASH", "ok", "CRASH", "ok"]
    assert [start for start, _ in program.launches] == [0, 1, 3]


class LosesItsStdoutOnACrash(ScriptedProgram):
    """The same program behind a launcher that drops what the crashed launch printed (MPICH 5.0.2's Hydra at
    8 ranks lost READY when the first case crashed at once): only the --log file has the report."""

    def __call__(self, argv, env=None, timeout=None, **_: object) -> LaunchResult:  # noqa: ANN001 - run_launch's
        result = super().__call__(argv, env, timeout)
        args = list(argv)
        Path(args[args.index("--log") + 1]).write_text(result.stdout + "\n")
        return result if result.returncode == 0 else LaunchResult(result.argv, result.returncode, "", "segfault",
                                                                  False, 0.1)


def test_a_crash_that_takes_the_launch_s_output_with_it_is_still_a_crash_of_its_case(
        monkeypatch: pytest.MonkeyPatch) -> None:
    program = _launched_by_the_driver(monkeypatch, LosesItsStdoutOnACrash())
    outcomes = suite.run_suite(None, 2, program=Path("coll_conformance"))  # type: ignore[arg-type]
    # From stdout alone the first launch never got READY: three set-up retries, then every case SETUP.
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


def _breaks(collective: str, case: str, ranks: int) -> frozenset[str]:
    return suite.broken_requirements(suite.Outcome(0, collective, case, "FAIL"), ranks)


def test_a_case_breaks_the_requirements_its_op_buffers_and_types_break_and_no_other() -> None:
    plain = _breaks("allreduce", "world copy int/sum 33 0", 2)
    # a plain int sum on 2 ranks: only "inplace" (and what no case states) is broken
    assert plain == {"inplace"} | suite.UNREADABLE_REQUIREMENTS
    assert {"commutative", "builtin-op", "not-inplace"} <= _breaks("reduce", "world inplace mat/matmul 33 0", 4)
    assert _breaks("reduce", "world copy int/usersum 33 0", 4) & {"commutative", "builtin-op"} == {"builtin-op"}
    assert {"contiguous", "true-lb-zero"} <= _breaks("bcast", "world copy neglb 33 0", 4)
    assert "true-lb-zero" not in _breaks("bcast", "world copy struct 33 0", 4)
    assert "contiguous" in _breaks("bcast", "world copy struct 33 0", 4)
    assert {"same-types", "same-counts"} <= _breaks("gather", "world copy neglb|int 33 0", 4)
    assert _breaks("allgather", "world copy vec>int 33 0", 4) & {"same-types", "same-counts"} == {"same-types"}


def test_a_case_breaks_the_communicator_requirements_of_the_communicator_it_runs_on() -> None:
    # 5 ranks: the world is no power of two; the halves (3 and 2) and their intercommunicator neither
    for comm in ("world", "rev", "half", "inter"):
        assert "power-of-two" in _breaks("ibcast", f"{comm} copy int 33 1", 5)
    # 4 ranks: halves of 2 are a power of two and exactly two ranks, the world of 4 at most four
    assert not {"power-of-two", "two-ranks"} & _breaks("bcast", "half copy int 33 0", 4)
    assert {"two-ranks"} <= _breaks("bcast", "world copy int 33 0", 4)
    assert "at-most-four-ranks" not in _breaks("allreduce", "world copy int/sum 4500 0", 4)
    assert "at-most-four-ranks" in _breaks("allreduce", "world copy int/sum 4500 0", 5)
    # count >= the largest power of two <= the communicator size
    assert "count-ge-pow2" in _breaks("reduce_scatter_block", "world copy int/sum 1 0", 4)
    assert "count-ge-pow2" not in _breaks("reduce_scatter_block", "world copy int/sum 4 0", 4)
    # reduce_scatter's counts alternate n and n+1: irregular wherever there are two ranks and n > 0
    assert "block-regular" in _breaks("reduce_scatter", "world copy int/sum 33 0", 2)
    assert "block-regular" not in _breaks("reduce_scatter_block", "world copy int/sum 33 0", 2)
