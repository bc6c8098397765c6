"""Shared memory a killed MPI job leaves behind, removed when its launch ends.

MPI libraries keep a job's intra-node shared memory as a named file under /dev/shm for the whole job and
unlink it in MPI_Finalize: a job that is killed (a point that hangs, an engine that crashes and is
relaunched, Ctrl-C) leaves it, and /dev/shm is RAM. Measured (2026-11-29): MPICH 5.0.2 leaves one
`mpich_shm_<hash>_0` of 2 MiB per killed 2-rank job; a day of tuning here had left 11,181 of them, 23 GiB,
/dev/shm full and the next test run killed by the kernel's OOM killer.

Whenever an MPI job tunempi started ends (a launch, launch/process.py; a singleton probe, mpi/probe.py and
mpi/discovery.py: Open MPI 5.0.11 singletons left a 16 MiB `sm_segment.*` each, even after MPI_Finalize), and
when tunempi exits, the files such jobs may have left are removed: under /dev/shm, named as an MPI library
names them, owned by this user, created since this process started its first MPI job, and held by no live
process (neither mapped nor open). A file another job still uses is always held by one of its processes, so
it stays, whoever started that job. Not only the ending job's own: a rank killed as its launch ends can still
hold its file for a moment, and the next job's end (or the exit) finds it released.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

SHM_DIR = Path("/dev/shm")
#: The names MPI libraries give their job's shared-memory files (each seen left behind here): MPICH 5.0.2,
#: Open MPI 5.0.11's sm transport, Open MPI 4.1.4's vader, UCX's posix transport. Intel MPI 2021.19 unlinks
#: its `Intel_MPI_*` files while the job runs, and leaves none.
MPI_SHM_PREFIXES: tuple[str, ...] = ("mpich_shm_", "sm_segment.", "vader_segment.", "ucx_shm_posix_")
#: Creation times are compared with the launch's start with this slack (file systems round times).
_SLACK_S = 1.0


def _candidates(directory: Path, since: float) -> list[Path]:
    """MPI shared-memory files of this user in `directory` changed at or after `since` (wall clock)."""
    found = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.startswith(MPI_SHM_PREFIXES):
                continue
            with contextlib.suppress(OSError):
                status = entry.stat(follow_symlinks=False)
                if status.st_uid == os.geteuid() and status.st_ctime >= since - _SLACK_S:
                    found.append(Path(entry.path))
    return found


def held_paths(proc: Path = Path("/proc"), pids: Iterable[int] | None = None) -> set[str]:
    """Every file path some live process (or one of `pids`) maps or has open (those whose /proc entries this
    user may read)."""
    held: set[str] = set()
    names = [str(pid) for pid in pids] if pids is not None else []
    if pids is None:  # every process
        with contextlib.suppress(OSError), os.scandir(proc) as entries:
            names = [entry.name for entry in entries if entry.name.isdigit()]
    for pid in names:
        with contextlib.suppress(OSError), open(proc / pid / "maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6:
                    held.add(fields[5].strip().removesuffix(" (deleted)"))
        with contextlib.suppress(OSError), os.scandir(proc / pid / "fd") as fds:
            for fd in fds:
                with contextlib.suppress(OSError):
                    held.add(os.readlink(fd.path))
    return held


def remove_left_behind(since: float, directory: Path = SHM_DIR, held: Iterable[str] | None = None) -> list[Path]:
    """Remove the MPI shared-memory files of this user created since `since` (time.time()) that no live
    process holds (`held`: default, read from /proc); returns what was removed."""
    candidates = _candidates(directory, since)
    if not candidates:
        return []
    still_held = set(held) if held is not None else held_paths()
    removed = []
    for path in candidates:
        if str(path) not in still_held:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


# When this process started its first MPI job (time.time()): what its jobs may leave is looked for from then on.
_FIRST_JOB: list[float] = []
_FIRST_JOB_LOCK = threading.Lock()


def mpi_job_starting() -> None:
    """Before starting an MPI job (a launch or a singleton): from the first one on, what such jobs leave
    behind is removed as they end and when this process exits."""
    with _FIRST_JOB_LOCK:
        if not _FIRST_JOB:
            _FIRST_JOB.append(time.time())
            atexit.register(mpi_job_ended)


def mpi_job_ended() -> list[Path]:
    """After an MPI job ended: remove what this process's jobs left (remove_left_behind since the first)."""
    return remove_left_behind(_FIRST_JOB[0]) if _FIRST_JOB else []


@contextmanager
def mpi_job() -> Iterator[None]:
    """An MPI job run inside the block (a singleton probe): mpi_job_starting before, mpi_job_ended after."""
    mpi_job_starting()
    try:
        yield
    finally:
        mpi_job_ended()
