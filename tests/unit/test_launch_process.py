"""Process control without MPI: capture, timeouts that kill whole process trees, orphans, interactive mode."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tunempi.launch import InteractiveLaunch, LaunchError, LaunchResult, LaunchTimeout, run_launch
from tunempi.launch.process import LAUNCH_ID_VAR, job_processes

PY = sys.executable

# Starts a grandchild in a session of its own (as Hydra's proxy does with its ranks), prints its pid.
ESCAPING_CHILD = (
    "import subprocess, sys\n"
    "child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_capture_streaming_and_failure_reason() -> None:
    seen: list[str] = []
    result = run_launch(
        [PY, "-c", "import sys; print('out1'); print('out2'); print('bad thing', file=sys.stderr); sys.exit(3)"],
        timeout=60, on_stdout=seen.append,
    )
    assert result.status == "failed" and not result.ok and result.returncode == 3
    assert result.stdout == "out1\nout2\n" and seen == ["out1", "out2"]
    assert result.reason == "exit status 3: bad thing"
    assert result.killed == 0


def test_input_and_environment_reach_the_program() -> None:
    result = run_launch(
        [PY, "-c", f"import os, sys; print(sys.stdin.read().upper(), os.environ['X'], '{LAUNCH_ID_VAR}' in os.environ)"],
        env={"X": "42", "PATH": "/usr/bin:/bin"}, timeout=60, input="hello",
    )
    assert result.ok and result.reason == ""
    assert result.stdout == "HELLO 42 True\n"


def test_timeout_kills_the_whole_tree_including_escaped_sessions() -> None:
    script = ESCAPING_CHILD + "import time\ntime.sleep(300)\n"
    result = run_launch([PY, "-c", script], timeout=2, grace_s=2)
    assert result.status == "timeout" and result.timed_out
    assert result.killed >= 2 and "timed out" in result.reason
    grandchild = int(result.stdout.split()[0])
    assert not _alive(grandchild)


def test_program_ignoring_sigterm_is_killed() -> None:
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(300)\n"
    started = time.monotonic()
    result = run_launch([PY, "-c", script], timeout=2, grace_s=1)
    assert result.status == "timeout" and result.returncode == -9
    assert time.monotonic() - started < 60  # bounded: it did not wait for the sleep


def test_a_launch_silent_on_stdout_for_idle_timeout_is_killed_one_that_keeps_writing_is_not() -> None:
    started = time.monotonic()
    stalled = run_launch([PY, "-c", "import time\nprint('case 1', flush=True)\ntime.sleep(300)\n"],
                         timeout=250, idle_timeout=2, grace_s=1)
    assert stalled.status == "timeout" and stalled.stdout == "case 1\n"
    assert time.monotonic() - started < 200  # the idle limit, not the launch's
    writing = "import time\nfor i in range(8):\n    print(i, flush=True)\n    time.sleep(0.25)\n"
    steady = run_launch([PY, "-c", writing], timeout=250, idle_timeout=30)
    assert steady.ok and steady.stdout.split() == [str(i) for i in range(8)]
    # Before its first line (a build, MPI_Init) only the launch's timeout applies.
    slow_start = run_launch([PY, "-c", "import time\ntime.sleep(3)\nprint('ready')\n"], timeout=250, idle_timeout=1)
    assert slow_start.ok and slow_start.stdout == "ready\n"


def test_orphans_left_after_a_normal_exit_are_killed() -> None:
    result = run_launch([PY, "-c", ESCAPING_CHILD], timeout=60, grace_s=2)
    assert result.ok and result.killed == 1
    assert not _alive(int(result.stdout.split()[0]))


def test_missing_executable_is_a_launch_error() -> None:
    with pytest.raises(LaunchError, match="cannot start"):
        run_launch(["/nonexistent/mpiexec", "-n", "2"], timeout=5)


def test_reason_names_the_signal() -> None:
    result = LaunchResult(("x",), -11, "", "", False, 0.1)
    assert result.status == "failed" and result.reason == "killed by SIGSEGV"


ECHO_SERVER = (
    "import sys\n"
    "for line in sys.stdin:\n"
    "    line = line.strip()\n"
    "    if line == 'quit':\n"
    "        break\n"
    "    if line != 'silent':\n"
    "        print(line.upper(), flush=True)\n"
    "print('bye', flush=True)\n"
)


def test_interactive_round_trips_then_quit() -> None:
    with InteractiveLaunch([PY, "-c", ECHO_SERVER], quit_line="quit") as job:
        assert job.running
        job.send_line("allreduce")
        assert job.read_line(timeout=30) == "ALLREDUCE"
        job.send_line("silent")
        with pytest.raises(LaunchTimeout):
            job.read_line(timeout=0.3)
        job.send_line("bcast")
        assert job.read_line(timeout=30) == "BCAST"
    assert job.result is not None and job.result.ok
    assert job.result.stdout == "bye\n"  # unread output is kept in the result
    assert job.read_line(timeout=1) is None


def test_interactive_end_of_output_and_dead_input() -> None:
    job = InteractiveLaunch([PY, "-c", "print('one', flush=True)"]).start()
    assert job.read_line(timeout=30) == "one"
    assert job.read_line(timeout=30) is None  # the program ended
    time.sleep(0.2)
    with pytest.raises(LaunchError):
        for _ in range(100):  # the pipe may take a write or two to report the closed reader
            job.send_line("x" * 65536)
    assert job.close().ok


def test_interactive_kill_and_exception_in_block() -> None:
    with pytest.raises(RuntimeError), InteractiveLaunch([PY, "-c", ESCAPING_CHILD + "input()\n"]) as job:
        grandchild = int(job.read_line(timeout=30) or "0")
        raise RuntimeError("driver failed")
    assert job.result is not None and job.result.killed >= 2
    assert not _alive(grandchild)
    assert job_processes(job.launch_id) == {}


def test_interactive_close_timeout_kills() -> None:
    script = "import time\nprint('up', flush=True)\ntime.sleep(300)\n"
    job = InteractiveLaunch([PY, "-c", script], grace_s=1).start()
    assert job.read_line(timeout=30) == "up"
    result = job.close(timeout=0.5)
    assert result.status == "timeout" and result.killed >= 1
    with pytest.raises(LaunchError, match="not started"):
        InteractiveLaunch(["true"]).send_line("x")
