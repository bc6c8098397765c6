"""`tunempi search` end to end, with tiny Python 'applications' (no MPI needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tunempi.cli.main import main
from tunempi.search.base import TrialStatus
from tunempi.search.command import CommandObjective
from tunempi.store.results import ResultStore
from tunempi.store.searches import SearchLog, list_searches

APP = textwrap.dedent("""
    import os, signal, sys, time
    x = int(os.environ.get("X", "0"))
    if os.environ.get("INTERRUPT_AT") == f"{x}/{os.environ.get('MODE')}" and not os.path.exists("interrupted"):
        open("interrupted", "w").close()
        os.kill(os.getppid(), signal.SIGINT)  # Ctrl-C of tunempi while this trial runs
        time.sleep(30)
    if x >= 40:
        print("fatal [/mpich/x.c:36] [0x7f00]"); sys.exit(3)  # the cliff, with Rich-hostile output
    if os.environ.get("MODE") == "hang" and x == 10 and not os.environ.get("NO_HANG"):
        time.sleep(60)
    print(f"Time in seconds = {1.0 + abs(x - 20) / 10:.3f}")
""")

SPACE = textwrap.dedent("""
    [[param]]
    name = "X"
    range = "0:10:40"

    [[param]]
    name = "MODE"
    values = ["fast", "hang"]
""")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def tunempi(*args: str, cwd: Path) -> Result:
    """Run the CLI in a subprocess: the real entry point, exit statuses and all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}
    env["COLUMNS"] = "250"  # keep Rich from wrapping messages the tests look for
    done = subprocess.run([sys.executable, "-m", "tunempi", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    return Result(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run the CLI in this process (saves an interpreter start per call): main(), exit status mapping."""
    monkeypatch.setenv("COLUMNS", "250")
    for key in [k for k in os.environ if k.startswith("TUNEMPI_")]:
        monkeypatch.delenv(key)

    def run(*args: str, cwd: Path) -> Result:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["tunempi", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "space.toml").write_text(SPACE)
    return tmp_path


def search_args(budget: int, repeats: int = 0, timeout: str = "1.5") -> list[str]:
    return ["search", "--space", "space.toml", "--strategy", "exhaustive", "--budget", str(budget),
            "--repeats", str(repeats), "--timeout", timeout, "--metric", r"Time in seconds = (\S+)", "--out", "out",
            "--mpi", "none", "--db", "db.sqlite", "--", sys.executable, "app.py"]


def journal(workdir: Path) -> list[dict]:
    """Every search in the store (its header first, then its runs), in order."""
    with ResultStore(workdir / "db.sqlite") as store:
        records: list[dict] = []
        for search_id, header, _ in list_searches(store):
            records.append({"kind": "header", "search_id": search_id, **header})
            log = SearchLog(store, header)
            records += [{"kind": r.kind, "number": r.number, "role": r.role, "params": dict(r.params),
                         "status": r.status, "value": r.value, "reason": r.reason} for r in log.runs()]
        return records


def test_real_search_records_failures_timeouts_and_writes_outputs(workdir):
    result = tunempi(*search_args(10, repeats=3), cwd=workdir)
    assert result.returncode == 0, result.stderr
    records = journal(workdir)
    assert records[0]["kind"] == "header" and records[0]["strategy"] == "exhaustive"
    trials = [r for r in records if r["kind"] == "trial"]
    assert len(trials) == 10  # the whole grid: 5 X values x 2 modes
    by_status = {(t["params"]["X"], t["params"]["MODE"]): t for t in trials}
    assert by_status[(40, "fast")]["status"] == "failed" and "exit status 3" in by_status[(40, "fast")]["reason"]
    assert by_status[(10, "hang")]["status"] == "timeout"
    assert by_status[(20, "fast")]["value"] == pytest.approx(1.0)
    # Verification: X=20 (1.0 s metric) vs defaults (X unset -> 0: 3.0 s), deterministic -> recommended.
    assert sum(1 for r in records if r["kind"] == "verify") == 6
    env = (workdir / "out" / "best.env").read_text()
    assert "X=20\nMODE=" in env and "recommend" in env
    summary = json.loads((workdir / "out" / "summary.json").read_text())
    assert summary["verdict"]["recommend"] and summary["best"]["X"] == 20
    assert (workdir / "out" / "report.png").stat().st_size > 1000


def test_interrupted_search_resumes_from_the_store_without_losing_a_trial(workdir):
    # Ctrl-C arrives while the third trial (X=10, fast) runs: its job is killed, the first two are stored.
    # No trial hangs here and the time-out is long: the trial that sends Ctrl-C must get to send it however
    # slowly a loaded machine starts it (issue 28: at 1.5 s the time-out killed it first).
    os.environ["INTERRUPT_AT"] = "10/fast"
    os.environ["NO_HANG"] = "1"
    try:
        result = tunempi(*search_args(5, timeout="120"), cwd=workdir)
    finally:
        del os.environ["INTERRUPT_AT"]
    assert result.returncode == 130, result.stderr
    assert "2 trials are recorded" in result.stderr.replace("\n", " ")
    first = [r for r in journal(workdir) if r["kind"] == "trial"]
    assert [t["number"] for t in first] == [0, 1]
    try:
        result = tunempi(*search_args(5, timeout="120"), cwd=workdir)
    finally:
        del os.environ["NO_HANG"]
    assert result.returncode == 0, result.stderr
    assert "resuming" in result.stderr and "2 trials already recorded" in result.stderr.replace("\n", " ")
    trials = [r for r in journal(workdir) if r["kind"] == "trial"]
    assert trials[:2] == first and [t["number"] for t in trials] == [0, 1, 2, 3, 4]
    assert trials[2]["params"] == {"X": 10, "MODE": "fast"} and trials[2]["status"] == "ok"  # rerun, not lost


def test_another_search_gets_its_own_record_in_the_same_store(cli, workdir):
    assert cli(*search_args(2), cwd=workdir).returncode == 0
    args = search_args(2)
    args[args.index("exhaustive")] = "random"
    result = cli(*args, cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "resuming" not in result.stderr
    headers = [r for r in journal(workdir) if r["kind"] == "header"]
    assert [h["strategy"] for h in headers] == ["exhaustive", "random"]
    assert len({h["search_id"] for h in headers}) == 2


@pytest.mark.parametrize(
    ("space_text", "expected"),
    [
        ('[[param]]\nname = "X"\nrange = "0:10"\n', "space.toml:1:"),
        ('[[param]]\nname = "X"\nrange = 0:10:40\n', "line 3"),
    ],
)
def test_malformed_space_exits_2_with_line_and_reason(cli, workdir, space_text, expected):
    (workdir / "space.toml").write_text(space_text)
    result = cli(*search_args(2), cwd=workdir)
    assert result.returncode == 2 and expected in result.stderr.replace("\n", "")
    assert not (workdir / "out").exists()  # nothing ran


def test_usage_errors_name_the_choices(cli, workdir):
    result = cli("search", "--simulate", "parabola", "--strategy", "annealing", cwd=workdir)
    assert result.returncode == 2 and "exhaustive, individual, random, gde3, bayes, rl" in result.stderr
    result = cli("search", "--space", "space.toml", cwd=workdir)
    assert result.returncode == 2 and "after '--'" in result.stderr
    result = cli("search", "--space", "auto", "--mpi", "none", "--", "true", cwd=workdir)
    assert result.returncode == 2 and "give --mpi SPEC" in result.stderr


def test_simulate_compare_json(cli, workdir):
    result = cli("search", "--simulate", "parabola", "--compare", "all", "--budget", "12", "--seeds", "2",
                     "--format", "json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [s["strategy"] for s in doc["summaries"]] == ["exhaustive", "individual", "random", "gde3", "bayes", "rl"]
    assert len(doc["outcomes"]) == 12 and doc["optima"]["parabola"]["config"] == {"CVAR": 200}


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; " \
             f"time.sleep(60)']); open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    objective = CommandObjective([sys.executable, "-c", script], apply=lambda params: {}, timeout=1.0, grace_s=1.0)
    result = objective({})
    assert result.status is TrialStatus.TIMEOUT and "timeout" in result.reason
    child = int(pidfile.read_text())
    for _ in range(50):  # the grandchild must be gone (reaped by init once killed)
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {child} survived the timeout")


def test_failure_reason_is_the_cause_not_the_backtrace():
    from tunempi.launch.process import failure_summary

    out = ("Assertion failed in file mpidig_init.c at line 36: PACK_BUFFER_SIZE >= buf_size_limit\n"
           "/lib/libmpi.so.12(+0x4627a1) [0x7fa4dc8627a1]\n/lib/libc.so.6(__libc_start_main+0x85)\n")
    assert failure_summary(out).startswith("Assertion failed in file mpidig_init.c")
    assert failure_summary("a\nlast words\n") == "last words"
    assert failure_summary("") == "(no output)"


def test_ptf_file_directives_pick_strategy_population_and_budget(cli, workdir):
    (workdir / "space.conf").write_text(
        "MPIPO_BEGIN\nX=0:1:39;\nSEARCH=gde3;\nGDE3_POP_SIZE=4;\nSAMPLE_COUNT=5;\nMPIPO_END\n")
    result = cli("search", "--space", "space.conf", "--repeats", "0", "--out", "out", "--mpi", "none", "--db",
                 "db.sqlite", "--", sys.executable, "app.py", cwd=workdir)
    assert result.returncode == 0, result.stderr
    records = journal(workdir)
    assert records[0]["strategy"] == "gde3"
    assert sum(1 for r in records if r["kind"] == "trial") == 5
    assert "NOT verified" in (workdir / "out" / "best.env").read_text()
