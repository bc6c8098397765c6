"""`tunempi compare` through real launchers: a program of our own whose cost and result are set by
environment variables (c/slow_app.c) under the embedded MPICH and Open MPI; a real tuning directory
compared and its verdict read back by `tunempi run`; Ctrl-C and continue.

The program waits (it does not spin) for a time the variant sets, so the differences asserted here are
the program's, not the machine's load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library
from tunempi.store.comparisons import list_comparisons
from tunempi.store.results import ResultStore
from tunempi.tune.manifest import Manifest

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "c" / "slow_app.c"
TUNEMPI = [sys.executable, "-m", "tunempi"]


def app_command(vendor: str) -> list[str]:
    library = resolve_library(vendor)
    binary = build_c(library, [SOURCE], "slow_app", werror=True)
    return [str(library.mpiexec), "-n", "2", str(binary)]


def tunempi(*args: str, cwd: Path, wait: bool = True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_") and not k.startswith("SLOW_APP")}
    env["COLUMNS"] = "250"
    # Every arm waits 400 ms (x its factor): differences of 320 ms and more, far above what a loaded machine's
    # launch jitter does to one pair.
    env["SLOW_APP_BASE_MS"] = "400"
    argv = [*TUNEMPI, *args]
    if not wait:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("vendor", ["mpich", pytest.param("openmpi", marks=pytest.mark.full),
                                    pytest.param("impi", marks=pytest.mark.full)])  # the same checks: make test-all
def test_compare_tells_faster_slower_and_a_changed_result_apart(tmp_path: Path, vendor: str) -> None:
    (tmp_path / "fast.env").write_text("SLOW_APP_FACTOR=0.2\n")
    (tmp_path / "slow.env").write_text("export SLOW_APP_FACTOR=2.0\n")
    (tmp_path / "wrong.env").write_text("SLOW_APP_WRONG=1\n")
    # 10 blocks on a quiet machine (each interval narrower than 0.6 by then); up to 30 where the machine's load
    # widens them: beside busy loops and the other test worker, two fast runs of 10 took 2.1 and 1.7 s against
    # the default's 0.6-0.9 s, and 10 blocks said "no difference"
    result = tunempi("compare", "--variant", "fast.env", "--variant", "slow.env", "--variant", "wrong.env",
                     "--result", r"checksum = (\S+)", "--min-runs", "10", "--max-runs", "30", "--width", "0.6",
                     "--db", "db.sqlite", "--format", "json", "--", *app_command(vendor), cwd=tmp_path)
    assert result.returncode == 3, result.stderr  # a variant changed the result
    doc = json.loads(result.stdout)
    verdicts = {v["variant"]["name"]: v for v in doc["variants"]}
    assert verdicts["fast.env"]["verdict"] == "faster" and verdicts["fast.env"]["comparison"]["low"] > 1.0
    assert verdicts["slow.env"]["verdict"] == "slower" and verdicts["slow.env"]["comparison"]["high"] < 1.0
    assert verdicts["fast.env"]["results"] == verdicts["slow.env"]["results"] == "unchanged"
    assert verdicts["wrong.env"]["verdict"] == "wrong results" and verdicts["wrong.env"]["runs"] == 1
    blocks = doc["default"]["runs"]
    assert 10 <= blocks <= 30 and verdicts["fast.env"]["pairs"] == verdicts["slow.env"]["pairs"] == blocks
    with ResultStore(tmp_path / "db.sqlite") as store:
        (_, header, runs), = list_comparisons(store)
    assert runs == 3 * blocks + 1 and header["results"] == [r"checksum = (\S+)"]


def test_a_crashing_variant_fails_and_the_default_is_never_given_its_variables(tmp_path: Path) -> None:
    (tmp_path / "crash.env").write_text("SLOW_APP_FAIL=1\n")
    env = {"SLOW_APP_FAIL": "1"}  # set in the caller's environment: the default runs must not inherit it
    result = subprocess.run([*TUNEMPI, "compare", "--variant", "crash.env", "--min-runs", "3", "--max-runs", "3",
                             "--db", "db.sqlite", "--", *app_command("mpich")], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env={**os.environ, **env, "COLUMNS": "250"})
    assert result.returncode == 3, result.stderr
    assert "crash.env (env file crash.env): failed: run in block 1 failed" in " ".join(result.stdout.split())


def test_ctrl_c_keeps_the_finished_runs_and_the_same_command_continues(tmp_path: Path) -> None:
    (tmp_path / "fast.env").write_text("SLOW_APP_FACTOR=0.5\n")
    # Ctrl-C lands during the fourth run: a gate holds that launch (its rank 0 sleeps; rank 1 waits for it
    # inside MPI) and says so, and the test signals only then, however fast or loaded the machine is (polling
    # the store for three runs let a loaded test process see them only after the whole comparison ended).
    (tmp_path / "gate.sh").write_text(textwrap.dedent("""\
        #!/bin/sh
        here=$(dirname "$0")
        if [ "${PMI_RANK:-0}" = 0 ] && [ ! -e "$here/open" ]; then
          mkdir -p "$here/launches"; n=$(ls "$here/launches" | wc -l); touch "$here/launches/$n"
          if [ "$n" -eq 3 ]; then touch "$here/held"; exec sleep 300; fi
        fi
        exec "$@"
    """))
    mpiexec, *rest = app_command("mpich")
    command = [mpiexec, *rest[:-1], "sh", str(tmp_path / "gate.sh"), rest[-1]]
    args = ["compare", "--variant", "fast.env", "--min-runs", "6", "--max-runs", "6", "--db", "db.sqlite",
            "--format", "json", "--", *command]
    first = tunempi(*args, cwd=tmp_path, wait=False)
    deadline = time.monotonic() + 300  # a bound on a hung test, not a timing the outcome depends on
    while not (tmp_path / "held").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "held").exists(), first.communicate(timeout=60)[1] if first.poll() is not None else "not held"
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert "rerun the same command to continue" in err
    with ResultStore(tmp_path / "db.sqlite") as store:
        assert [n for _, _, n in list_comparisons(store)] == [3]  # the three runs before the held one
    (tmp_path / "open").touch()
    second = tunempi(*args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "runs already recorded" in second.stderr
    doc = json.loads(second.stdout)
    # The six pairs span both commands (the resumed three and three more). Their verdict is not this test's:
    # at six pairs a busy machine's noise can hide the factor 0.5 (seen: "no difference" with three busy
    # loops beside the suite); telling faster from slower is test_compare_tells_faster_slower_... 's.
    assert doc["variants"][0]["pairs"] == 6
    assert doc["variants"][0]["verdict"] in ("faster", "no difference", "slower")
    with ResultStore(tmp_path / "db.sqlite") as store:
        assert [n for _, _, n in list_comparisons(store)] == [12]


def test_a_tuning_directory_is_compared_its_verdict_recorded_and_run_warns_about_a_bad_one(tmp_path: Path) -> None:
    from tunempi.bench.protocol import MeasureSettings
    from tunempi.tune.job import TuneOptions, run_tune

    fast = MeasureSettings(warmup=1, min_iters=5, max_iters=100, rel_ci=0.2, time_cap_s=0.01)
    report = run_tune(TuneOptions(out=tmp_path / "tuned", collectives="allreduce", mpi="mpich", ranks=2,
                                  max_msg=512, timeout_s=20.0, db=tmp_path / "results.sqlite", settings=fast))
    assert report.manifest is not None
    command = ["mpiexec", "-n", "2", app_command("mpich")[-1]]  # a bare mpiexec: the tuned library's own
    result = tunempi("compare", "--variant", "tuned", "--result", r"checksum = (\S+)", "--min-runs", "4",
                     "--max-runs", "4", "--db", "db.sqlite", "--", *command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = Manifest.load(tmp_path / "tuned")
    check = manifest.applications[-1]
    assert check.command == tuple(command) and check.results == "unchanged" and check.pairs == 4
    assert check.verdict in ("faster", "no difference", "slower")
    assert "recorded the verdict in" in result.stdout

    # A verdict of "slower" (as compare writes it) makes `tunempi run` warn before it runs anything.
    data = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    data["applications"][-1]["verdict"] = "slower"
    (tmp_path / "tuned" / "manifest.json").write_text(json.dumps(data))
    warned = tunempi("run", "--tuning", "tuned", "--", "true", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert "warning: `tunempi compare` found this tuning slower for `mpiexec -n 2" in warned.stderr

    # Another library's launcher would run the ranks untuned: refused before anything runs.
    other = tunempi("compare", "--variant", "tuned", "--db", "db.sqlite", "--", str(resolve_library("openmpi").mpiexec),
                    "-n", "2", "true", cwd=tmp_path)
    assert other.returncode == 2 and "is not the launcher of mpich-5.0.2" in " ".join(other.stderr.split())
