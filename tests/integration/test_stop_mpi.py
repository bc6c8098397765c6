"""Stopping tunempi while the application it launched hangs (issue 38): every command that launches the
application (`online run`, `profile`, `compare`, `search`, `run`) ends the whole job when tunempi alone
gets SIGTERM (SIGINT, SIGHUP), keeps what it recorded, and exits 128 + N; for MPICH, Open MPI and Intel MPI.

The job (c/hung_allreduce.c, 2 ranks): rank 0 writes a ready file after a barrier and sleeps forever, rank 1
waits for it in MPI_Allreduce. Before the fix a SIGTERM ended tunempi at once and left the launcher and
both ranks spinning. Each test waits for the ready file (the event, not a time), signals the tunempi process
only (it runs in a session of its own), and then no live process may be left whose command line names the
test's own copy of the program or whose environment carries the test's tag (launchers and proxies too).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library
from tunempi.store.comparisons import list_comparisons
from tunempi.store.results import ResultStore
from tunempi.store.searches import list_searches
from tunempi.tune.manifest import LibraryRecord, Manifest

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "c" / "hung_allreduce.c"
VENDORS = ("mpich", "openmpi", "impi")
TAG = "TUNEMPI_TEST_STOP_TAG"
#: A run-time parameter each library knows (search checks names against the library before any run).
SEARCH_PARAMETER = {"mpich": "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", "openmpi": "btl_sm_eager_limit",
                    "impi": "MPIR_CVAR_CH4_XPMEM_COOP_COPY_THRESHOLD"}
# Bounds on a broken run, never timings an outcome depends on.
READY_WITHIN_S = 180
EXIT_WITHIN_S = 60
GONE_WITHIN_S = 30
STOPPED = "stopped by {}; nothing it started is left running"


@functools.cache
def _built(vendor: str) -> Path:
    return build_c(resolve_library(vendor), [SOURCE], "hung_allreduce", werror=True)


class HungJob:
    """One test's hung application: its own copy of the program, a ready file, a tag in the environment."""

    def __init__(self, root: Path, vendor: str) -> None:
        self.root = root
        self.vendor = vendor
        self.library = resolve_library(vendor)
        self.program = root / "bin" / f"hung-{vendor}-{uuid.uuid4().hex[:8]}"
        self.program.parent.mkdir()
        shutil.copy2(_built(vendor), self.program)
        self.ready = root / "ready"
        self.tag = uuid.uuid4().hex
        self.proc: subprocess.Popen[str] | None = None

    @property
    def command(self) -> list[str]:
        return [str(self.library.mpiexec), "-n", "2", str(self.program), str(self.ready)]

    def start(self, args: list[str]) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNEMPI_", "UCX_"))}
        env.update({TAG: self.tag, "COLUMNS": "250"})
        self.proc = subprocess.Popen([sys.executable, "-m", "tunempi", *args], cwd=self.root, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        return self.proc

    def wait_until_hung(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + READY_WITHIN_S
        while not self.ready.exists() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.ready.exists():
            if self.proc.poll() is None:
                self.proc.kill()
            out, err = self.proc.communicate(timeout=EXIT_WITHIN_S)
            pytest.fail(f"the job never hung (exit {self.proc.returncode}):\n{out}\n{err}")

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Signal the tunempi process (only it), wait for it; (exit status, stdout, stderr)."""
        assert self.proc is not None
        self.proc.send_signal(signum)
        try:
            out, err = self.proc.communicate(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # a failing test leaves nothing spinning beside the rest of the suite
            out, err = self.proc.communicate()
            left = self.left_behind()
            pytest.fail(f"tunempi did not stop within {EXIT_WITHIN_S} s of {signal.Signals(signum).name} "
                        f"(killed with {len(left)} process(es) of its job):\n{out}\n{err}")
        return self.proc.returncode, out, err

    def left_behind(self) -> list[str]:
        """Live processes of this job (command line names the program, or environment has the tag), once
        they have had GONE_WITHIN_S to die."""
        deadline = time.monotonic() + GONE_WITHIN_S
        while True:
            found = self._live()
            if not found or time.monotonic() > deadline:
                for pid in found:  # a failing test still cleans up after itself
                    with contextlib.suppress(OSError):
                        os.kill(int(pid.split()[0]), signal.SIGKILL)
                return found
            time.sleep(0.1)

    def _live(self) -> list[str]:
        path, tag = str(self.program).encode(), f"{TAG}={self.tag}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if state not in ("Z", "X") and (path in cmdline or tag in environ):
                shown = cmdline.replace(b"\0", b" ").decode(errors="replace")[:160]
                found.append(f"{entry} {shown}")
        return found


# --- each command: its arguments, and what it must still have after the stop -------------------------
def online_args(job: HungJob) -> list[str]:
    return ["online", "run", "--mpi", job.vendor, "--state", "state", "--collectives", "allreduce", "--",
            *job.command]


def online_kept(job: HungJob, err: str) -> None:
    from tunempi.online.state import OnlineState

    state = OnlineState(job.root / "state")
    if job.vendor == "impi":  # Intel MPI cannot switch per call: the command ran untouched, no state
        assert "running the command untouched" in " ".join(err.split()) and not state.exists()
        return
    assert state.exists() and state.config.collectives == ["allreduce"]
    assert state.runs_in_batch == 1  # the stopped run is counted; the state reads back whole


def profile_args(job: HungJob) -> list[str]:
    (job.root / "app.json").write_text('{"an earlier profile": true}\n')
    return ["profile", "--mpi", job.vendor, "-o", "app.json", "--", *job.command]


def profile_kept(job: HungJob, err: str) -> None:
    assert (job.root / "app.json").read_text() == '{"an earlier profile": true}\n'  # the last good one stays
    assert not list(job.root.glob(".app.json.*"))  # no partial profile left


def compare_args(job: HungJob) -> list[str]:
    (job.root / "v.env").write_text("HUNG_ALLREDUCE_VARIANT=1\n")
    return ["compare", "--mpi", job.vendor, "--variant", "v.env", "--min-runs", "3", "--db", "db.sqlite", "--",
            *job.command]


def compare_kept(job: HungJob, err: str) -> None:
    with ResultStore(job.root / "db.sqlite") as store:
        ((_, header, runs),) = list_comparisons(store)
    assert header["variants"] == [["v.env", {"HUNG_ALLREDUCE_VARIANT": "1"}]] and runs == 0
    assert "rerun the same command to continue" in " ".join(err.split())


def search_args(job: HungJob) -> list[str]:
    (job.root / "space.toml").write_text(f'[[param]]\nname = "{SEARCH_PARAMETER[job.vendor]}"\n'
                                         "values = [2048, 16384]\n")
    return ["search", "--space", "space.toml", "--mpi", job.vendor, "--strategy", "random", "--budget", "2",
            "--db", "db.sqlite", "--out", "out", "--", *job.command]


def search_kept(job: HungJob, err: str) -> None:
    with ResultStore(job.root / "db.sqlite") as store:
        ((_, header, runs),) = list_searches(store)
    assert runs == 0 and header
    assert "rerun the same command to resume" in " ".join(err.split())


def run_args(job: HungJob) -> list[str]:
    Manifest(job.root / "tuned", LibraryRecord.of(job.library)).save()  # a tuning that kept every default
    return ["run", "--tuning", "tuned", "--", *job.command]


def run_kept(job: HungJob, err: str) -> None:
    assert Manifest.load(job.root / "tuned").library.fingerprint == job.library.fingerprint


COMMANDS: dict[str, tuple[Callable[[HungJob], list[str]], Callable[[HungJob, str], None]]] = {
    "online": (online_args, online_kept), "profile": (profile_args, profile_kept),
    "compare": (compare_args, compare_kept), "search": (search_args, search_kept), "run": (run_args, run_kept),
}


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_sigterm_ends_the_whole_job_keeps_the_record_and_exits_143(tmp_path: Path, command: str, vendor: str) -> None:
    args, kept = COMMANDS[command]
    job = HungJob(tmp_path, vendor)
    job.start(args(job))
    job.wait_until_hung()
    status, _, err = job.stop(signal.SIGTERM)
    left = job.left_behind()
    assert status == 143, err
    assert STOPPED.format("SIGTERM") in err
    assert not left, f"left running after tunempi {command} stopped:\n" + "\n".join(left)
    kept(job, err)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_sigint_and_sighup_end_an_online_run_likewise(tmp_path: Path, signum: int, status: int) -> None:
    job = HungJob(tmp_path, "mpich")
    job.start(online_args(job))
    job.wait_until_hung()
    code, _, err = job.stop(signum)
    left = job.left_behind()
    assert code == status, err
    assert STOPPED.format(signal.Signals(signum).name) in err
    assert not left, "left running:\n" + "\n".join(left)
    online_kept(job, err)
