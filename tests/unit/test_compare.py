"""`tunempi compare` above the launcher: the shuffled balanced blocks, the paired verdicts and their error
rate on A/A pairs, the result check, leaving the race, resuming, the budget, the manifest record.

The launches here are a function of (variant, run count) drawing seeded noise: the real launcher is
tests/integration/test_compare_mpi.py's business."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import pytest
from store_history import store_at_version

from tunempi.compare.results import ResultCheck, ResultUnavailable, difference, tokens
from tunempi.compare.session import (
    CompareRequest,
    RunOutcome,
    assess,
    block_order,
    prepare_compare,
    run_compare,
)
from tunempi.compare.variants import BASELINE, Variant, load_variant, parse_env_lines
from tunempi.errors import TunempiError, UsageError
from tunempi.report.tuning import application_warnings
from tunempi.store.comparisons import ComparisonLog
from tunempi.store.results import ResultStore
from tunempi.tune.manifest import ApplicationCheck, LibraryRecord, Manifest


def env_file(path: Path, **env: str) -> str:
    path.write_text("# made by the test\n" + "".join(f"{k}={v}\n" for k, v in env.items()))
    return str(path)


class Application:
    """A fake application: wall time = base * FACTOR * lognormal noise; result 'checksum = 42' unless WRONG;
    FAIL fails. `calls` lists the variants in launch order."""

    def __init__(self, sigma: float = 0.02, seed: int = 0, interrupt_at: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.sigma = sigma
        self.calls: list[str] = []
        self.interrupt_at = interrupt_at

    def __call__(self, variant: Variant, timeout: float | None) -> RunOutcome:
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls.append(variant.name)
        if variant.env.get("FAIL"):
            return RunOutcome("failed", 0.1, "Segmentation fault", "exit status 139: Segmentation fault")
        factor = float(variant.env.get("FACTOR", "1"))
        wall = 1.0 * factor * math.exp(self.rng.gauss(0.0, self.sigma))
        checksum = 42.0 * (1.001 if variant.env.get("WRONG") else 1.0)
        return RunOutcome("ok", wall, f"step 1\nchecksum = {checksum:.10g}\nrate = {100 / wall:.6g}\n")


def session_for(tmp_path: Path, app: Application, variants: dict[str, dict[str, str]], **options):
    specs = [f"{name}={env_file(tmp_path / (name + '.env'), **env)}" for name, env in variants.items()]
    request = CompareRequest(["./app"], specs, db=str(tmp_path / "db.sqlite"), **options)
    return prepare_compare(request, launch=app)


# -- the schedule ---------------------------------------------------------------------------------------

def test_every_block_runs_each_arm_once_in_an_order_that_varies_and_is_reproducible():
    arms = ["default", "a", "b"]
    orders = [block_order(arms, seed=7, block=b) for b in range(30)]
    assert all(sorted(order) == sorted(arms) for order in orders)
    firsts = Counter(order[0] for order in orders)
    assert set(firsts) == set(arms)  # no arm always first (after a cold cache) or always last
    assert orders == [block_order(arms, seed=7, block=b) for b in range(30)]
    assert orders != [block_order(arms, seed=8, block=b) for b in range(30)]


def test_the_blocks_are_run_as_planned_and_a_real_difference_is_found(tmp_path):
    app = Application(sigma=0.03)
    session = session_for(tmp_path, app, {"fast": {"FACTOR": "0.8"}, "slow": {"FACTOR": "1.1"},
                                          "same": {"FACTOR": "1.0"}}, min_runs=10, max_runs=10)
    outcome = run_compare(session)
    assert len(app.calls) == 40
    for block in range(10):  # each block: every arm once, in block_order
        assert app.calls[4 * block:4 * block + 4] == block_order(["default", "fast", "slow", "same"], 0, block)
    verdicts = {v.variant.name: v for v in outcome.verdicts}
    assert verdicts["fast"].verdict == "faster" and verdicts["fast"].comparison is not None
    assert verdicts["fast"].comparison.low > 1.15 and verdicts["fast"].comparison.high < 1.35
    assert verdicts["slow"].verdict == "slower" and verdicts["slow"].comparison.high < 1.0
    assert verdicts["same"].verdict == "no difference"
    assert outcome.blocks == 10 and outcome.default_runs == 10


def test_a_higher_is_better_metric_turns_the_speedup_around(tmp_path):
    app = Application(sigma=0.02)
    session = session_for(tmp_path, app, {"fast": {"FACTOR": "0.5"}}, metric=r"rate = (\S+)",
                          higher_is_better=True, min_runs=5, max_runs=5)
    verdict = run_compare(session).verdicts[0]
    assert verdict.verdict == "faster" and 1.8 < verdict.comparison.speedup < 2.2


def test_no_difference_is_reported_at_the_rate_evidence_promises(tmp_path):
    """A/A: the variant is the default. Over 300 adaptive comparisons (stopping on the interval's width, from
    10 to 30 runs), "faster" and "slower" must each come out at most at the one-sided level of 2.5 % (with
    room for the sampling error of 300 draws: 3 standard errors)."""
    outcomes = Counter()
    stopped_early = 0
    store = tmp_path / "aa.sqlite"
    for seed in range(300):
        app = Application(sigma=0.03, seed=seed)
        request = CompareRequest(["./app"], [f"same={env_file(tmp_path / 'same.env', FACTOR='1.0')}"],
                                 db=str(store), seed=seed, min_runs=10, max_runs=30, width=0.04)
        outcome = run_compare(prepare_compare(request, launch=app))
        outcomes[outcome.verdicts[0].verdict] += 1
        stopped_early += outcome.blocks < 30
    bound = 300 * (0.025 + 3 * math.sqrt(0.025 * 0.975 / 300))
    assert outcomes["faster"] <= bound and outcomes["slower"] <= bound, outcomes
    assert outcomes["no difference"] >= 300 - 2 * bound
    assert 0 < stopped_early < 300  # the width rule did stop some comparisons early, not all


# -- leaving the race --------------------------------------------------------------------------------------

def test_a_changed_result_and_a_crash_leave_the_race_at_once(tmp_path):
    app = Application()
    session = session_for(tmp_path, app, {"wrong": {"WRONG": "1"}, "crash": {"FAIL": "1"}, "ok": {"FACTOR": "1"}},
                          results=(r"checksum = (\S+)",), min_runs=6, max_runs=6)
    outcome = run_compare(session)
    verdicts = {v.variant.name: v for v in outcome.verdicts}
    assert verdicts["wrong"].verdict == "wrong results" and verdicts["wrong"].results == "changed"
    assert "42.042 instead of 42" in verdicts["wrong"].reason
    assert verdicts["crash"].verdict == "failed" and "Segmentation fault" in verdicts["crash"].reason
    assert verdicts["ok"].results == "unchanged" and verdicts["ok"].verdict != "failed"
    assert app.calls.count("wrong") == 1 and app.calls.count("crash") == 1
    assert app.calls.count("ok") == 6 and app.calls.count(BASELINE) == 6


def test_a_result_within_the_tolerance_is_unchanged_and_a_missing_one_fails(tmp_path):
    app = Application()
    slight = session_for(tmp_path, app, {"wrong": {"WRONG": "1"}}, results=(r"checksum = (\S+)",),
                         tolerance=0.01, min_runs=3, max_runs=3)
    assert run_compare(slight).verdicts[0].results == "unchanged"
    missing = session_for(tmp_path / ".." / tmp_path.name, Application(), {"a": {"FACTOR": "1"}},
                          results=(r"energy = (\S+)",), min_runs=3, max_runs=3, seed=1)
    with pytest.raises(TunempiError, match="fails under the library's default.*energy"):
        run_compare(missing)


def test_a_default_that_fails_first_ends_the_comparison(tmp_path):
    def broken(variant: Variant, timeout: float | None) -> RunOutcome:
        return RunOutcome("failed", 0.1, "", "exit status 1: cannot open input")

    session = prepare_compare(CompareRequest(["./app"], [env_file(tmp_path / "a.env", X="1")],
                                             db=str(tmp_path / "db.sqlite")), launch=broken)
    with pytest.raises(TunempiError, match="cannot open input"):
        run_compare(session)


# -- nothing lost, bounded -----------------------------------------------------------------------------------

def test_an_interrupted_comparison_continues_where_it_stopped(tmp_path):
    variants = {"fast": {"FACTOR": "0.9"}}
    first = Application(interrupt_at=7)
    with pytest.raises(KeyboardInterrupt):
        run_compare(session_for(tmp_path, first, variants, min_runs=8, max_runs=8))
    assert len(first.calls) == 7
    second = Application(seed=1)
    outcome = run_compare(session_for(tmp_path, second, variants, min_runs=8, max_runs=8))
    assert len(second.calls) == 16 - 7  # only what was missing
    assert first.calls + second.calls == [arm for b in range(8) for arm in block_order(["default", "fast"], 0, b)]
    assert outcome.verdicts[0].pairs == 8
    with ResultStore(tmp_path / "db.sqlite") as store:
        assert len(ComparisonLog(store, prepare_compare(
            CompareRequest(["./app"], [f"fast={tmp_path / 'fast.env'}"], db=str(tmp_path / "db.sqlite"),
                           min_runs=8, max_runs=8), launch=second).header).runs()) == 16


def test_the_time_budget_is_checked_between_blocks(tmp_path):
    ticks = iter(range(0, 1000, 10))  # every reading 10 s later
    app = Application()
    session = session_for(tmp_path, app, {"a": {"FACTOR": "1"}}, min_runs=10, max_runs=30, budget_s=35)
    outcome = run_compare(session, clock=lambda: float(next(ticks)))
    assert "time budget" in outcome.stop_reason and outcome.blocks < 10


# -- inputs -------------------------------------------------------------------------------------------------

def test_env_files_and_variant_names(tmp_path):
    assert parse_env_lines("# c\nexport A=1\nB='two words'\n\nC=\n", "f") == {"A": "1", "B": "two words", "C": ""}
    with pytest.raises(UsageError, match="f:1: not a NAME=value line"):
        parse_env_lines("mpiexec -n 2\n", "f")
    empty = tmp_path / "best.env"
    empty.write_text("# tunempi search: keep the defaults\n")
    with pytest.raises(UsageError, match="sets no variable"):
        load_variant(str(empty))
    with pytest.raises(UsageError, match="is the library's default run"):
        load_variant(f"default={env_file(tmp_path / 'x.env', A='1')}")
    with pytest.raises(UsageError, match="neither a tuning directory nor an env file"):
        load_variant(str(tmp_path / "missing"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="not a tuning directory"):
        load_variant(str(tmp_path / "plain"))
    variant, manifest = load_variant(f"mine={env_file(tmp_path / 'y.env', A='1')}")
    assert variant.name == "mine" and dict(variant.env) == {"A": "1"} and manifest is None
    with pytest.raises(UsageError, match="two variants are named"):
        prepare_compare(CompareRequest(["./app"], [str(tmp_path / "y.env"), str(tmp_path / "y.env")]),
                        launch=Application())
    with pytest.raises(UsageError, match="--higher-is-better needs --metric"):
        prepare_compare(CompareRequest(["./app"], [str(tmp_path / "y.env")], higher_is_better=True),
                        launch=Application())


def test_result_tokens_and_differences():
    assert tokens("E = -6.77e-1 (step 50)") == ["E", "=", -0.677, "(step", 50.0, ")"]
    assert difference("E = 1.0000001 ok", "E = 1.0000002 ok", 1e-6) is None
    assert "instead of" in difference("E = 1.0 ok", "E = 1.1 ok", 1e-6)
    assert "'FAILED' instead of 'PASSED'" in difference("PASSED", "FAILED", 1e-6)
    assert "tokens" in difference("1 2 3", "1 2", 1e-6)
    check = ResultCheck((r"^E = (\S+)",), tolerance=1e-3)
    assert check.extract("E = 1\nx\nE = 2\n") == "1\n2"
    with pytest.raises(ResultUnavailable):
        check.extract("nothing here")
    command = ResultCheck(command="grep -c line \"$TUNEMPI_RUN_OUTPUT\"")
    assert command.extract("line\nline\n") == "2"
    with pytest.raises(UsageError, match="not a valid regular expression"):
        ResultCheck(("(",))


# -- the record ---------------------------------------------------------------------------------------------

def test_a_slower_verdict_is_recorded_in_the_manifest_and_warned_about(tmp_path):
    directory = tmp_path / "tuned"
    manifest = Manifest(directory, LibraryRecord("lib-1.0"), env={"SOME_TUNING": "1"})
    manifest.save()
    app = Application(sigma=0.01)

    def slower_when_tuned(variant: Variant, timeout: float | None) -> RunOutcome:
        return app(Variant(variant.name, variant.source, {"FACTOR": "1.2"} if variant.env else {}), timeout)

    import tunempi.compare.session as compare_session

    request = CompareRequest(["./app", "-n", "2"], [str(directory)], db=str(tmp_path / "db.sqlite"),
                             min_runs=5, max_runs=5)
    real_check = compare_session.check_tuning_variants
    compare_session.check_tuning_variants = lambda manifests, mpi: None  # no library behind this manifest
    try:
        session = prepare_compare(request, launch=slower_when_tuned)
    finally:
        compare_session.check_tuning_variants = real_check
    outcome = run_compare(session)
    assert outcome.verdicts[0].verdict == "slower"
    assert outcome.recorded == [directory / "manifest.json"]
    reloaded = Manifest.load(directory)
    check = reloaded.applications[-1]
    assert check.verdict == "slower" and check.command == ("./app", "-n", "2") and check.pairs == 5
    assert check.high is not None and check.high < 1.0
    warnings = application_warnings(reloaded)
    assert len(warnings) == 1 and "slower for `./app -n 2`" in warnings[0]
    later = ApplicationCheck(at="later", command=("./app", "-n", "2"), verdict="faster")
    assert application_warnings(Manifest(directory, LibraryRecord("x"), applications=(check, later))) == []


def test_assess_judges_nothing_when_the_defaults_own_results_vary(tmp_path):
    app = Application()
    session = session_for(tmp_path, app, {"a": {"FACTOR": "1"}}, results=(r"checksum = (\S+)",))
    from tunempi.store.comparisons import ComparisonRun

    runs = [ComparisonRun(0, "default", 0, "ok", 1.0, 1.0, "42"), ComparisonRun(0, "a", 1, "ok", 1.0, 1.0, "41"),
            ComparisonRun(1, "default", 0, "ok", 1.0, 1.0, "43")]
    verdicts, varies = assess(session, runs)
    assert varies is not None and "block 2 differs from block 1" in varies
    assert verdicts[0].results == "unknown" and verdicts[0].verdict != "wrong results"


def test_an_online_best_directory_is_compared_through_its_env_file(tmp_path):
    best = tmp_path / "online-best"
    best.mkdir()
    (best / "tuning.env").write_text("# tunempi online best\nexport MPIR_CVAR_ALLTOALL_INTRA_ALGORITHM=pairwise\n")
    variant, manifest = load_variant(str(best))
    assert variant.name == "online-best" and manifest is None
    assert dict(variant.env) == {"MPIR_CVAR_ALLTOALL_INTRA_ALGORITHM": "pairwise"}
    (best / "tuning.env").write_text("# allreduce: the library's own choice everywhere (nothing to set)\n")
    with pytest.raises(UsageError, match="sets nothing"):
        load_variant(str(best))


def test_a_version_2_database_gains_the_comparison_tables_and_keeps_its_rows(tmp_path):
    import sqlite3

    import tunempi.store.schema as schema_module
    from tunempi.store.comparisons import ComparisonRun
    from tunempi.store.searches import SearchLog, search_id_of

    # a search of one trial as version 2 stored it
    search = search_id_of({"x": 1})
    path = store_at_version(
        tmp_path / "v2.sqlite", 2,
        ("INSERT INTO searches (search_id, header, created) VALUES (?, '{\"x\": 1}', '2026-11-22T01:00:00Z')",
         (search,)),
        ("INSERT INTO search_runs (search_id, kind, number, params, status, value, timestamp) "
         "VALUES (?, 'trial', 0, '{}', 'ok', 1.0, '2026-11-22T01:00:00Z')", (search,)))
    with ResultStore(path) as store:
        assert [run.value for run in SearchLog(store, {"x": 1}).runs()] == [1.0]
        log = ComparisonLog(store, {"command": ["./app"]})
        log.add(ComparisonRun(0, "default", 0, "ok", 2.0, 2.0))
        assert [run.value for run in log.runs()] == [2.0]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == schema_module.SCHEMA_VERSION >= 3
    conn.close()


def test_compare_progress_shows_each_run_in_a_log():
    """Rich's bar draws nothing where stderr is a file: a log of `compare` (or autotune's compare step) showed
    no progress at all until the end (issue 58). There every run is a line."""
    import io

    from rich.console import Console

    from tunempi.cli.compare import _Progress
    from tunempi.store.comparisons import ComparisonRun

    log = io.StringIO()
    progress = _Progress(Console(file=log, width=200))
    with progress:
        progress.ran(ComparisonRun(0, "tuned", 1, "ok", value=12.5, wall_s=12.5), 1, 12)
        progress.ran(ComparisonRun(0, "default", 0, "failed", reason="exit status 1"), 2, 12)
    lines = log.getvalue().splitlines()
    assert "run 1/12: block 1 tuned: ok, 12.5 s" in lines
    assert any(line.startswith("run 2/12: block 1 default: failed: exit status 1") for line in lines)
