"""Build and run the C probe (c/mpi_probe.c): what a library says about itself through MPI and MPI_T.

The probe runs as ONE process with singleton MPI_Init (no launcher): measured to work for MPICH 5.0.2
and Open MPI 5.0.11. It prints JSON lines and flushes after each, so a crash part-way (Open MPI 4.1.4
crashes reading some control variables) loses nothing before it: `probe_library` resumes after the
variable that crashed, without reading that variable's value, until the listing is complete.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tunempi.errors import MPIError
from tunempi.mpi.build import build_c
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.shared_memory import mpi_job

PROBE_SOURCE = Path(__file__).parent / "c" / "mpi_probe.c"
PROBE_TIMEOUT_S = 120.0
MAX_RESUMES = 20

# Environment variables that would change what the probe reports as a variable's default value, or
# (MPICH, unknown algorithm name) crash MPI_Init. The probe runs without them.
_SCRUBBED_ENV = re.compile(
    r"^(MPIR_CVAR_|MPICH_).*(ALGORITHM|COMPOSITION|TUNING_JSON_FILE)|^OMPI_MCA_coll_"
)
_PARTIAL_INDEX = re.compile(r'"kind":"cvar","index":(\d+)')


@dataclass
class ProbeOutput:
    """What one library said about itself."""

    version_string: str
    mpi_version: tuple[int, int]
    cvars: list[dict] = field(default_factory=list)
    pvars: list[dict] = field(default_factory=list)
    writes: list[dict] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # --only names the library does not have
    unreadable: list[int] = field(default_factory=list)  # cvar indices whose reading crashed the probe


class ProbeCrash(MPIError):
    """The probe died before printing its last line; `records` holds what it printed before."""

    def __init__(self, message: str, records: list[dict], partial_index: int | None) -> None:
        super().__init__(message)
        self.records = records
        self.partial_index = partial_index


def probe_build_library(library: MPILibrary) -> MPILibrary:
    """The library as the probe's build cache sees it: only its mpicc and prefix count, because the probe
    is compiled before we know vendor and version (both come from running it)."""
    return MPILibrary(vendor="unknown", version="probe", version_string="", device="", prefix=library.prefix,
                      mpicc=library.mpicc, mpiexec=Path(), embedded=library.embedded)


def build_probe(library: MPILibrary) -> Path:
    """Compile the probe with the library's own mpicc (cached per mpicc and libmpi)."""
    return build_c(probe_build_library(library), [PROBE_SOURCE], "mpi_probe")


def probe_env(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the probe runs in: ours without algorithm-forcing variables, plus overrides."""
    env = {key: value for key, value in os.environ.items() if not _SCRUBBED_ENV.match(key)}
    env.update(overrides or {})
    return env


def _no_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.communicate()


def run_probe(
    library: MPILibrary,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> list[dict]:
    """Run the probe once (1 process, singleton init) and return its JSON records.

    `env` is added to the scrubbed environment (see probe_env). Raises ProbeCrash when the probe dies
    without its closing record, MPIError when it cannot be run at all.
    """
    binary = build_probe(library)
    argv = [str(binary), *args]
    with mpi_job():  # a singleton can leave its shared memory behind (mpi/shared_memory.py)
        try:
            # Own session: a hung probe is killed with everything it started (Open MPI 4 singletons start an
            # orted). No core files: discovery deliberately runs names and variables that may crash MPI.
            process = subprocess.Popen(
                argv, env=probe_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_no_core_dumps,
            )
        except OSError as exc:
            raise MPIError(f"cannot run the MPI probe built with {library.mpicc}: {exc}") from exc
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_session(process)
            raise MPIError(f"the MPI probe of {library.mpicc} hung for {timeout:.0f} s: {' '.join(argv)}") from exc
        except BaseException:  # Ctrl-C, or tunempi stopped by a signal (launch/signals.py): the probe goes too
            _kill_session(process)
            raise
    result = subprocess.CompletedProcess(argv, process.returncode, out, err)
    stdout = result.stdout.decode("utf-8", errors="replace")
    records: list[dict] = []
    partial_index: int | None = None
    for line in stdout.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            match = _PARTIAL_INDEX.search(line)  # a cvar line cut short by a crash while reading its value
            if match:
                partial_index = int(match.group(1))
    if result.returncode == 0 and records and records[-1].get("kind") == "done":
        return records
    stderr = result.stderr.decode("utf-8", errors="replace").strip()
    how = f"signal {-result.returncode}" if result.returncode < 0 else f"exit {result.returncode}"
    raise ProbeCrash(
        f"the MPI probe built with {library.mpicc} failed ({how}): {' '.join(argv)}\n{stderr[-2000:]}",
        records,
        partial_index,
    )


def probe_library(
    library: MPILibrary,
    *,
    read_values: bool = True,
    prefixes: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ProbeOutput:
    """List the library's version, control and performance variables, surviving crashing variables.

    With read_values=False no value is read (the safe mode on libraries whose MPI_T reads crash).
    `prefixes` limits the control variables listed to names starting with one of them.
    """
    base_args: list[str] = [] if read_values else ["--no-values"]
    for prefix in prefixes:
        base_args += ["--prefix", prefix]
    cvars: dict[int, dict] = {}
    pvars: list[dict] = []
    skip_values: list[int] = []
    skipped_info: list[int] = []
    library_record: dict | None = None
    start = 0
    list_pvars = True
    for _attempt in range(MAX_RESUMES + 1):
        args = list(base_args) + ["--start", str(start)]
        for index in skip_values:
            args += ["--skip-value", str(index)]
        if not list_pvars:
            args.append("--no-pvars")
        try:
            records = run_probe(library, args, env=env)
            crash: ProbeCrash | None = None
        except ProbeCrash as exc:
            records, crash = exc.records, exc
        for record in records:
            kind = record.get("kind")
            if kind == "library":
                library_record = record
            elif kind == "cvar":
                cvars[record["index"]] = record
            elif kind == "pvar":
                pvars.append(record)
        if crash is None:
            break
        if library_record is None:
            raise crash  # died in MPI_Init or before: nothing to resume
        if pvars:
            list_pvars = False  # died listing performance variables: keep what we have
            start = library_record["num_cvars"]
            continue
        if crash.partial_index is not None:
            # Died reading this variable's value: list it again, without its value.
            skip_values.append(crash.partial_index)
            start = crash.partial_index
        else:
            # Died in MPI_T_cvar_get_info, presumably of the variable after the last one printed: skip it.
            printed = [r["index"] for r in records if r.get("kind") == "cvar"]
            crashed = max(printed, default=start - 1) + 1
            skipped_info.append(crashed)
            start = crashed + 1
            if start >= library_record["num_cvars"]:
                list_pvars = False
    else:
        raise MPIError(f"the MPI probe built with {library.mpicc} kept crashing after {MAX_RESUMES} resumes")
    assert library_record is not None
    return ProbeOutput(
        version_string=library_record["version_string"],
        mpi_version=tuple(library_record["mpi_version"]),
        cvars=[cvars[i] for i in sorted(cvars)],
        pvars=pvars,
        unreadable=sorted(set(skip_values) | set(skipped_info)),
    )


def read_cvars(
    library: MPILibrary,
    names: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    writes: Mapping[str, int] | None = None,
) -> ProbeOutput:
    """Read just these control variables (one probe run), optionally after writing ints through MPI_T.

    Used to verify algorithm ints (set the env var, read the value back) and to check run-time writes.
    """
    args: list[str] = ["--no-pvars"]
    for name in names:
        args += ["--only", name]
    for name, value in (writes or {}).items():
        args += ["--write", f"{name}={int(value)}"]
    records = run_probe(library, args, env=env)
    head = records[0]
    return ProbeOutput(
        version_string=head["version_string"],
        mpi_version=tuple(head["mpi_version"]),
        cvars=[r for r in records if r.get("kind") == "cvar"],
        writes=[r for r in records if r.get("kind") == "write"],
        missing=[r["name"] for r in records if r.get("kind") == "missing"],
    )
