"""`tunempi autotune` for real (issue 40): an allreduce-bound program of the suite, the embedded MPICH at 2
ranks, a small budget. The pipeline profiles it, the plan picks tune and online (collectives are nearly all
of its time; no point-to-point: no search), compares the application under what they produced against the
default with its result checked, and writes one report; the same command again skips every finished step
(its state file unchanged, the report rewritten from it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tunempi.cli.main import app
from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "c" / "allreduce_loop.c"


def test_autotune_runs_the_pipeline_writes_one_report_and_resumes(tmp_path: Path, monkeypatch) -> None:
    """In the process (CliRunner), with tune's directory counted as a tuning even where it kept the default
    everywhere: whether tune or online find a faster algorithm on a loaded 2-core machine is a measurement, not
    what this test checks; that compare runs the application under it with its result checked is."""
    import tunempi.autotune.steps as steps

    monkeypatch.setattr(steps, "tuning_sets_something", lambda manifest: True)
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("TUNEMPI_")]:
        monkeypatch.delenv(name)
    library = resolve_library("mpich")
    program = build_c(library, [SOURCE], "allreduce_loop", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program),), 2)).argv
    args = ["autotune", "--budget", "60s", "--out", "work", "--check", r"bad=(\d+)", "--min-runs", "3",
            "--max-runs", "3", "--", *line]
    runner = CliRunner()
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output[-3000:]
    state = json.loads((tmp_path / "work" / "autotune-state.json").read_text())
    finished = list(state["steps"])
    assert finished[:4] == ["profile", "plan", "tune", "verify"] and finished[-1] == "compare"
    assert "search" not in finished  # no point-to-point: the plan leaves it out
    assert state["steps"]["plan"]["steps"] == ["tune", "online", "compare"]
    compared = state["steps"]["compare"]["outcome"]
    assert "tuned" in [v["variant"]["name"] for v in compared["variants"]]
    assert all(v["results"] == "unchanged" for v in compared["variants"])

    page = (tmp_path / "work" / "report.html").read_text()
    assert "<h2>Where the application spends its time</h2>" in page and "<td>allreduce</td>" in page
    assert "<tr class='speedup'><td>tuned</td>" in page and "95% interval" in page
    assert "id='results-check'" in page and "unchanged in every run of every tuning" in page
    assert "tunempi run --tuning" in page
    at_sizes = state["steps"]["tune"]["at_application_sizes"]  # what tune measured at the loop's size
    assert at_sizes and at_sizes[0]["collective"] == "allreduce" and at_sizes[0]["default_us"] > 0
    assert "what tune measured at the nearest size it measured" in page
    # what the tuning can give at most from tune's measurements (of verify's files), in the report and summary
    expected = state["steps"]["verify"]["expected"]
    assert state["steps"]["tune"]["expected"]["tuned_share"] == expected["tuned_share"] > 0.2
    assert expected["speedup"] > 0 and expected["best_speedup"] >= 1.0
    assert expected["rows"][0]["collective"] == "allreduce"
    assert "id='expected-gain'" in page and "id='expected-vs-compare'" in page
    assert "From tune's measurements: the calls tune's files change take" in first.output

    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output[-3000:]
    assert json.loads((tmp_path / "work" / "autotune-state.json").read_text())["steps"] == state["steps"]
    assert (tmp_path / "work" / "report.html").read_text().count("(an earlier run)") == len(finished)


@pytest.mark.full
def test_a_stopped_autotune_continues_with_the_same_command(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) once tune has finished: exit 130 with the finished steps recorded; the same command then
    skips them and finishes the rest (the stopped step resumes from its own store)."""
    library = resolve_library("mpich")
    program = build_c(library, [SOURCE], "allreduce_loop", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program),), 2)).argv
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}
    env["COLUMNS"] = "250"
    argv = [sys.executable, "-m", "tunempi", "autotune", "--budget", "90s", "--out", "work", "--check", r"bad=(\d+)",
            "--min-runs", "3", "--max-runs", "3", "--", *line]
    state_file = tmp_path / "work" / "autotune-state.json"
    first = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while first.poll() is None and time.monotonic() < deadline:  # wait for a finished step, not for time
        time.sleep(0.2)
        if state_file.exists() and "tune" in json.loads(state_file.read_text())["steps"]:
            break
    assert first.poll() is None, "autotune ended before it could be stopped"
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err[-3000:]
    assert "rerun the same command to continue" in err
    stopped = json.loads(state_file.read_text())["steps"]
    assert list(stopped)[:3] == ["profile", "plan", "tune"] and "compare" not in stopped

    second = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    for name in stopped:
        assert f"{name} finished in an earlier run: skipped" in second.stderr
    finished = json.loads(state_file.read_text())["steps"]
    assert {name: finished[name] for name in stopped} == stopped and "online" in finished
    assert (tmp_path / "work" / "report.html").is_file()
