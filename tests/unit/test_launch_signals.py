"""Stopping without MPI (launch/signals.py, process.run_in_foreground): SIGTERM, SIGINT and SIGHUP end the
whole job, a second signal while stopping does not cut the cleanup short, the status is 128 + N.

A small entry point (`STOPPABLE`) runs under run_stoppable in a subprocess and starts a job whose child
puts a grandchild in a session of its own (as Hydra's proxy does with its ranks), then waits forever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tunempi.launch import LaunchError, run_in_foreground
from tunempi.launch.signals import Stopped, StopSignals, interrupt_status, run_stoppable

PY = sys.executable
WITHIN_S = 60  # a bound on a broken test, not a timing an outcome depends on

# argv: PIDFILE [NOTE]: writes "child grandchild" pids to PIDFILE; with NOTE, a SIGTERM only creates NOTE.
JOB = """
import os, signal, subprocess, sys, time
if len(sys.argv) > 2:
    signal.signal(signal.SIGTERM, lambda *_: open(sys.argv[2], "w").close())
grandchild = subprocess.Popen(["sleep", "300"], start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(f"{os.getpid()} {grandchild.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(1)
"""

# argv: HOW (launch|foreground) GRACE_S JOB PIDFILE [NOTE]
STOPPABLE = """
import sys
from tunempi.launch import run_in_foreground, run_launch
from tunempi.launch.signals import run_stoppable

how, grace, job = sys.argv[1], float(sys.argv[2]), sys.argv[3:]

def main():
    if how == "launch":
        return run_launch([sys.executable, *job], grace_s=grace).exit_status
    return run_in_foreground([sys.executable, *job], grace_s=grace)

sys.exit(run_stoppable(main, name="stoppable"))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WITHIN_S
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.exists(), proc.communicate(timeout=WITHIN_S) if proc.poll() is not None else "not started"


def _start(tmp_path: Path, how: str, grace_s: float, *, note: bool = False,
           ignore: tuple[int, ...] = ()) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "stoppable.py").write_text(STOPPABLE)
    pids = tmp_path / "pids"
    job = [str(tmp_path / "job.py"), str(pids), *([str(tmp_path / "note")] if note else [])]

    def ignoring() -> None:
        for signum in ignore:
            signal.signal(signum, signal.SIG_IGN)

    proc = subprocess.Popen([PY, str(tmp_path / "stoppable.py"), how, str(grace_s), *job], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=ignoring)
    _wait_for(pids, proc)
    return proc, pids


def _job_pids(pids: Path) -> list[int]:
    return [int(pid) for pid in pids.read_text().split()]


def _gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + WITHIN_S
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(pid) for pid in pids)


@pytest.mark.parametrize("how", ["launch", "foreground"])
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_stop_signal_ends_the_whole_job_and_sets_the_status(tmp_path: Path, how: str, signum: int,
                                                              status: int) -> None:
    proc, pids = _start(tmp_path, how, grace_s=5)
    job = _job_pids(pids)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=WITHIN_S)
    assert proc.returncode == status, err
    name = signal.Signals(signum).name
    assert err.strip().splitlines()[-1] == f"stoppable: stopped by {name}; nothing it started is left running " \
                                           f"(exit status {status})"
    assert _gone(job), "the child or its grandchild (a session of its own) is still running"


@pytest.mark.parametrize("how", ["launch", "foreground"])
def test_a_second_signal_while_stopping_kills_at_once_and_the_cleanup_still_completes(tmp_path: Path,
                                                                                    how: str) -> None:
    proc, pids = _start(tmp_path, how, grace_s=600, note=True)  # the child survives SIGTERM: only SIGKILL ends it
    job = _job_pids(pids)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _wait_for(tmp_path / "note", proc)  # the job got its SIGTERM: tunempi is stopping, waiting out the grace
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WITHIN_S)
    assert time.monotonic() - started < WITHIN_S  # not the 600 s grace
    assert proc.returncode == 143, err  # the first signal decides
    assert "stoppable: SIGINT while stopping: killing what is left now" in err
    assert err.strip().splitlines()[-1].startswith("stoppable: stopped by SIGTERM; nothing it started is left")
    assert _gone(job)


def test_a_signal_ignored_at_start_stays_ignored(tmp_path: Path) -> None:
    proc, pids = _start(tmp_path, "launch", grace_s=5, ignore=(signal.SIGHUP,))  # as under nohup
    handlers = Path(f"/proc/{proc.pid}/status").read_text()
    ignored = int(next(line for line in handlers.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    caught = int(next(line for line in handlers.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    assert ignored & (1 << (signal.SIGHUP - 1)) and caught & (1 << (signal.SIGTERM - 1))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=WITHIN_S)
    assert proc.returncode == 143 and _gone(_job_pids(pids))


def test_statuses_without_a_signal() -> None:
    assert run_stoppable(lambda: None) == 0 and run_stoppable(lambda: 3) == 3
    assert run_stoppable(lambda: sys.exit(4)) == 4 and run_stoppable(lambda: sys.exit("message")) == 1
    assert interrupt_status(Stopped(signal.SIGTERM)) == 143 and interrupt_status(Stopped(signal.SIGHUP)) == 129
    assert interrupt_status(KeyboardInterrupt()) == 130
    assert isinstance(Stopped(signal.SIGTERM), KeyboardInterrupt)  # every Ctrl-C path runs for it


def test_handlers_are_restored_and_only_set_in_the_main_thread() -> None:
    before = signal.getsignal(signal.SIGTERM)
    assert run_stoppable(lambda: 0) == 0
    assert signal.getsignal(signal.SIGTERM) is before
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(StopSignals().install()._previous))
    thread.start()
    thread.join()
    assert seen == [{}]


def test_in_foreground_the_status_is_the_commands() -> None:
    assert run_in_foreground([PY, "-c", "import sys; sys.exit(3)"]) == 3
    assert run_in_foreground([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]) == -9
    marker = run_in_foreground([PY, "-c", "import os, sys; sys.exit(0 if os.environ['TUNEMPI_LAUNCH_ID'] else 1)"],
                               {**os.environ})
    assert marker == 0
    with pytest.raises(LaunchError, match="cannot start"):
        run_in_foreground(["/nonexistent/mpiexec", "-n", "2"])
