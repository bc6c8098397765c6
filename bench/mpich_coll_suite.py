"""MPICH's own collective tests (test/mpi/coll of MPICH 4.0.2, with DTPools' derived datatypes) under tunempi:
each test program of the suite's test lists, at 2 ranks (or 4), in four modes, against the library on its own.

Modes:
- plain: the test as the library runs it, nothing of tunempi (the reference);
- tuning files: in rounds, the files `tunempi tune` writes (tune/files.py's `write_tuning_files`, the
  conformance suite's path: tests/conformance/modes.py) selecting, in round k, the k-th algorithm a file may
  select of every collective at every size; a test runs in every round that selects an algorithm of a
  collective it calls (read from its source), and every test in round 0;
- online: as `tunempi online run --state <fresh> --collectives <all 11>` (uniform draws, every call switched);
- profile: as `tunempi profile`.
Online and profile go through the commands' entry points (online.run.open_state + run_online; the interposer
preloaded as profile.run.interposer_env says) in this process: the `tunempi` command's start-up costs 2-4 s a
run on this VM. `--cli` runs every one of them through the command itself, as a user types it.

A test passes when it exits 0 and prints MPICH's " No Errors". A run past its time limit (--timeout, at least
4x the plain run's time; in plain the test list's timeLimit where it is longer) is a HANG. A test that fails
or hangs in a mode but passed plain is run again once in that mode and once plain: "new" when it fails again
and passes plain again, "not reproduced" when it passes in the mode, "library's own" when it fails plain too
(as is every failure of a test that fails plain). Issue 38 (Open MPI's bcast split by element counts, hung
online by DTP's per-rank types) is the kind of failure this looks for; the goal is 0 new failures and 0 new
hangs in every row.

    .venv/bin/python bench/mpich_coll_suite.py [--quick] [--cli] [--modes plain,online] [LIBRARY:RANKS ...]
    (default: mpich:2 openmpi:2 openmpi:4 impi:2 /usr/bin/mpicc.mpich:2 /usr/bin/mpicc.openmpi:2)

The tests are built by tools/build-mpich-coll-tests.sh (Debian's mpich_4.0.2 source, checksum-checked) into
~/.cache/tunempi/build/mpich-coll-tests/<library fingerprint>/, once per library. Exit status 1 when any row
has a new failure or hang.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tunempi.config import cache_dir
from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.launch.process import run_launch
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "tools" / "build-mpich-coll-tests.sh"
TUNEMPI = str(Path(sys.executable).with_name("tunempi"))
MODES = ("plain", "tuning files", "online", "profile")
DEFAULT_LAYOUTS = ("mpich:2", "openmpi:2", "openmpi:4", "impi:2", "/usr/bin/mpicc.mpich:2",
                   "/usr/bin/mpicc.openmpi:2")
#: The collectives tunempi switches or writes files for (tests/conformance/suite.py COLLECTIVES).
COLLECTIVES = ("allreduce", "bcast", "allgather", "alltoall", "reduce", "reduce_scatter", "reduce_scatter_block",
               "gather", "scatter", "barrier", "allgatherv")
#: MPI (or MTest wrapper) name -> collective; longest names first so Allgatherv is not read as Allgather.
_CALL = re.compile(r"\b(?:MPI|MTest)_(Allreduce|Bcast|Allgatherv|Allgather|Alltoall|Reduce_scatter_block|"
                   r"Reduce_scatter|Reduce|Gather|Scatter|Barrier)\s*\(")
PASSED = re.compile(r"^\s*No Errors\s*$", re.MULTILINE)

#: --quick and tests/integration/test_mpich_coll_suite.py: the heaviest derived-type cases. MPICH 4.0.2's
#: DTPools generator covers bcast only (test/mpi/maint/dtp-test-config.txt: coll/bcast and its
#: comm-world-only twin): its cases at count 512 (a basic type and a struct-like one, seeds 4 and 6), one at
#: count 1, and issue 38's reproducer (seed 12); in each, ranks build their types from seed + rank, so they
#: pass different types (and counts) of one signature. For allreduce, alltoall and allgather the suite has no
#: DTPools test: the ones with derived types and user ops on them.
QUICK: tuple[tuple[str, ...], ...] = (
    ("bcast", "-type=MPI_INT", "-count=512", "-seed=4", "-testsize=16"),
    ("bcast", "-type=MPI_INT:4+MPI_DOUBLE:8", "-count=512", "-seed=6", "-testsize=16"),
    ("bcast", "-type=MPI_INT:4+MPI_DOUBLE:8", "-count=1", "-seed=5", "-testsize=1024"),
    ("bcast", "-type=MPI_INT", "-count=512", "-seed=12", "-testsize=16"),  # issue 38's reproducer
    ("allred3",),  # non-commutative user op on a contiguous matrix type
    ("allred4",),  # the same, 3x3 matrix rotations
    ("alltoall1",),
    ("allgather_struct",),  # a struct type
)


@dataclass(frozen=True)
class Case:
    program: str
    args: tuple[str, ...] = ()
    time_limit: float | None = None  # the test list's timeLimit=

    @property
    def name(self) -> str:
        return " ".join((self.program, *self.args))


@dataclass(frozen=True)
class Result:
    case: Case
    verdict: str  # ok | FAIL | HANG
    seconds: float
    tail: str = ""  # the last output lines (failures only)

    @property
    def passed(self) -> bool:
        return self.verdict == "ok"


@dataclass
class ModeReport:
    """One mode's results. `note`: what the run needs to be told apart (tuning-file round and selection)."""

    mode: str
    results: list[tuple[Result, str]] = field(default_factory=list)  # (result, note)
    new: list[str] = field(default_factory=list)
    new_hangs: list[str] = field(default_factory=list)
    not_reproduced: list[str] = field(default_factory=list)
    own: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def run(self) -> int:
        return len(self.results)

    @property
    def passed(self) -> int:
        return sum(r.passed for r, _ in self.results)


# -- building and reading the suite --------------------------------------------------------------------------

def tests_dir(library: MPILibrary) -> Path:
    return cache_dir() / "build" / "mpich-coll-tests" / library.fingerprint


def build_tests(library: MPILibrary, programs: Iterable[str] = ()) -> Path:
    """The suite's programs built against `library` (all of them when `programs` is empty), cached."""
    out = tests_dir(library)
    argv = ["bash", str(BUILD_SCRIPT), str(library.mpicc), str(out), *programs]
    done = subprocess.run(argv, env={**os.environ, **library.wrapper_env}, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return out


def read_cases(directory: Path) -> list[Case]:
    """Every distinct (program, arguments) of testlist and testlist.dtp (process counts are ours)."""
    cases: dict[tuple[str, tuple[str, ...]], Case] = {}
    for name in ("testlist", "testlist.dtp"):
        for line in (directory / name).read_text().splitlines():
            fields = line.split()
            if not fields or fields[0].startswith("#") or "@" in fields[0]:
                continue
            args = tuple(f.removeprefix("arg=") for f in fields[2:] if f.startswith("arg="))
            limit = next((float(f.split("=", 1)[1]) for f in fields[2:] if f.startswith("timeLimit=")), None)
            cases.setdefault((fields[0], args), Case(fields[0], args, limit))
    return list(cases.values())


def collectives_called(directory: Path) -> dict[str, tuple[str, ...]]:
    """program -> the blocking collectives (of COLLECTIVES) its source calls. Programs built from another
    program's source (Makefile.am's X_SOURCES) read that source; those built with -DUSE_MTEST_NBC call the
    nonblocking versions, which no tuning file or online draw touches: none."""
    makefile = (directory / "src" / "Makefile.am").read_text()
    sources = dict(re.findall(r"^(\w+)_SOURCES\s*=\s*(\S+)\.c", makefile, re.MULTILINE))
    nbc = set(re.findall(r"^(\w+)_CPPFLAGS\s*=.*USE_MTEST_NBC", makefile, re.MULTILINE))
    out: dict[str, tuple[str, ...]] = {}
    for source in (directory / "src").glob("*.c"):
        calls = {m.lower() for m in _CALL.findall(source.read_text(errors="replace"))}
        out[source.stem] = tuple(c for c in COLLECTIVES if c in calls)
    for program, source_name in sources.items():
        out[program] = () if program in nbc else out.get(source_name, ())
    return out


# -- running one test ----------------------------------------------------------------------------------------

def library_env(library: MPILibrary) -> dict[str, str]:
    """What every launch needs here (as tests/conformance/suite.py library_env): the one-node settings, no
    backtrace handlers (they hung on the allocator's lock after a heap corruption), Open MPI's prefix."""
    env = {**adapter_for(library).single_node_env(), "UCX_HANDLE_ERRORS": "none", "OMPI_MCA_opal_signal": "",
           "TUNEMPI_LOG": "warning"}
    if library.vendor == "openmpi" and library.embedded:
        env["OPAL_PREFIX"] = str(library.prefix)
    return env


def launch_command(library: MPILibrary, ranks: int, argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The launcher's argv with its flags as environment (Open MPI: run as root, oversubscribe), so the same
    argv runs under `tunempi online run` and `tunempi profile`."""
    options = {"flags_as_env": True} if library.vendor == "openmpi" else {}
    command = launcher_for(library, **options).command(LaunchSpec(command=tuple(argv), ranks=ranks))
    return list(command.argv), dict(command.env)


@dataclass(frozen=True)
class Launched:
    """How one launch ended."""

    returncode: int | None
    output: str  # stdout and stderr
    timed_out: bool
    seconds: float


#: Runs a launch: (argv, environment, timeout, working directory) -> how it ended.
Runner = Callable[[list[str], dict[str, str], float, Path], Launched]


def plain_runner(argv: list[str], env: dict[str, str], timeout: float, cwd: Path) -> Launched:
    result = run_launch(argv, env, timeout=timeout, cwd=cwd)
    return Launched(result.returncode, result.stdout + result.stderr, result.timed_out, result.duration_s)


def cli_runner(wrap: Callable[[list[str]], list[str]]) -> Runner:
    """The launch under a `tunempi` command (`wrap` puts it after the command's --)."""
    def run(argv: list[str], env: dict[str, str], timeout: float, cwd: Path) -> Launched:
        return plain_runner(wrap(argv), env, timeout, cwd)
    return run


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """os.environ as `env` for the duration (tunempi's online entry point launches with this process's)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def online_runner(library: MPILibrary, state: Path) -> Runner:
    """`tunempi online run --state STATE --collectives <all> -- argv` as the command does it (open_state, then
    run_online; a library that cannot switch runs the command untouched), without the command's start-up
    (2-4 s of imports a run on this VM)."""
    from tunempi.online.run import CannotSwitch, open_state, run_online
    from tunempi.online.state import OnlineConfig

    def run(argv: list[str], env: dict[str, str], timeout: float, cwd: Path) -> Launched:
        output = io.StringIO()
        with environment(env), contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            try:
                online = open_state(state, library, OnlineConfig(collectives=list(COLLECTIVES)))
            except CannotSwitch:  # Intel MPI reads its choice at MPI_Init only: the command runs untouched
                return plain_runner(argv, env, timeout, cwd)
            done = run_online(online, library, argv, timeout=timeout)
        return Launched(done.returncode, output.getvalue(), done.timed_out, done.duration_s)
    return run


def profile_runner(library: MPILibrary, output: Path) -> Runner:
    """The profiling interposer preloaded into the ranks as `tunempi profile -o OUTPUT` does it
    (profile.run.interposer_env through the launcher's own syntax), launched with a timeout."""
    from tunempi.launch import rank_env_command
    from tunempi.profile.build import build_interposer
    from tunempi.profile.run import interposer_env

    def run(argv: list[str], env: dict[str, str], timeout: float, cwd: Path) -> Launched:
        command = rank_env_command(argv, interposer_env(build_interposer(library), output), library)
        return plain_runner(list(command.argv), command.full_env(env), timeout, cwd)
    return run


def run_case(library: MPILibrary, ranks: int, directory: Path, case: Case, *, timeout: float, cwd: Path,
             env: Mapping[str, str] | None = None, runner: Runner = plain_runner) -> Result:
    argv, launch_env = launch_command(library, ranks, [str(directory / case.program), *case.args])
    done = runner(argv, {**os.environ, **launch_env, **library_env(library), **(env or {})}, timeout, cwd)
    if done.timed_out:
        verdict = "HANG"
    elif done.returncode == 0 and PASSED.search(done.output):
        verdict = "ok"
    else:
        verdict = "FAIL"
    return Result(case, verdict, done.seconds, "" if verdict == "ok" else what_failed(done.output))


def what_failed(output: str) -> str:
    """The test's own error lines (the first three), else the output's last three lines."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"error|found \d+|abort|signal|assert", line, re.IGNORECASE)]
    return " | ".join(errors[:3] or lines[-3:])[:400]


# -- modes ---------------------------------------------------------------------------------------------------

def selectable_rounds(library: MPILibrary, collectives: Iterable[str]) -> list[dict[str, str]]:
    """Round k: collective -> the k-th algorithm a tuning file may select for it (tune.job's selectable
    algorithms; the others would leave the library's default, which plain runs)."""
    adapter = adapter_for(library)
    names = {c: list(adapter.tuning_file_algorithms(c).selectable) for c in collectives
             if c != "barrier" and adapter.algorithms(c)}
    names = {c: v for c, v in names.items() if v}
    longest = max((len(v) for v in names.values()), default=0)
    return [{c: v[k] for c, v in names.items() if k < len(v)} for k in range(longest)]


def rule_sets_selecting(selected: Mapping[str, str], ranks: int):
    """Rule sets choosing one algorithm per collective at every size, at this communicator size (as
    tests/conformance/modes.py rule_sets_selecting)."""
    from tunempi.rules import ScaledChoice, SelectionTable, build_rule_sets

    choices = [ScaledChoice(c, 1, ranks, size, name) for c, name in selected.items() for size in (8, 65536)]
    return build_rule_sets(SelectionTable.from_scaled(choices))


def tuning_file_env(library: MPILibrary, ranks: int, selected: Mapping[str, str], directory: Path) -> dict[str, str]:
    from tunempi.tune.files import write_tuning_files

    written = write_tuning_files(directory, library, adapter_for(library), rule_sets_selecting(selected, ranks),
                                 smoke_ranks=(ranks,), smoke=False)
    return written.activation_env(directory)


@dataclass(frozen=True)
class Variant:
    """How one run of a mode is made: its environment, its runner, and a note for the report."""

    env: Mapping[str, str]
    runner: Runner
    note: str


def mode_variants(mode: str, library: MPILibrary, ranks: int, cases: Sequence[Case],
                  called: Mapping[str, tuple[str, ...]], work: Path, *, cli: bool = False
                  ) -> list[tuple[Variant, list[Case]]]:
    """The runs of a mode: (variant, the cases it runs). cli: online and profile through the `tunempi`
    command itself (as a user types it) rather than its entry points."""
    if mode == "plain":
        return [(Variant({}, plain_runner, ""), list(cases))]
    if mode == "online":
        state = work / "online-state"
        runner = online_runner(library, state)
        if cli:
            runner = cli_runner(lambda argv: [TUNEMPI, "online", "run", "--state", str(state), "--mpi", library.spec,
                                              "--collectives", ",".join(COLLECTIVES), "--", *argv])
        return [(Variant({}, runner, ""), list(cases))]
    if mode == "profile":
        out = work / "profile.json"
        runner = profile_runner(library, out)
        if cli:
            runner = cli_runner(lambda argv: [TUNEMPI, "profile", "-o", str(out), "--mpi", library.spec, "--", *argv])
        return [(Variant({}, runner, ""), list(cases))]
    if mode == "tuning files":
        variants = []
        for k, selected in enumerate(selectable_rounds(library, COLLECTIVES)):
            env = tuning_file_env(library, ranks, selected, work / f"round{k}")
            chosen = [c for c in cases if k == 0 or set(called.get(c.program, ())) & set(selected)]
            note = f"round {k}: " + ", ".join(f"{c} {a}" for c, a in selected.items())
            variants.append((Variant(env, plain_runner, note), chosen))
        return variants
    raise ValueError(f"unknown mode {mode!r}")


def run_mode(mode: str, library: MPILibrary, ranks: int, directory: Path, cases: Sequence[Case],
             plain: Mapping[Case, Result] | None, *, timeout: float, work: Path,
             called: Mapping[str, tuple[str, ...]], cli: bool = False,
             progress: Callable[[str], None] = lambda line: None) -> ModeReport:
    """Run every case of a mode; failures of cases that pass plain are rechecked (module docstring)."""
    started = time.monotonic()
    report = ModeReport(mode)
    for variant, chosen in mode_variants(mode, library, ranks, cases, called, work, cli=cli):
        for case in chosen:
            if plain is None:
                limit = max(timeout, case.time_limit or 0.0)
            else:
                limit = max(timeout, 4 * plain[case].seconds)
            result = run_case(library, ranks, directory, case, timeout=limit, env=variant.env,
                              runner=variant.runner, cwd=work)
            report.results.append((result, variant.note))
            if result.passed:
                continue
            where = f"{case.name}" + (f" [{variant.note}]" if variant.note else "")
            if plain is None or not plain[case].passed:
                report.own.append(f"{where}: {result.verdict}: {result.tail}")
                continue
            again = run_case(library, ranks, directory, case, timeout=limit, env=variant.env,
                             runner=variant.runner, cwd=work)
            reference = run_case(library, ranks, directory, case, timeout=max(timeout, case.time_limit or 0.0),
                                 cwd=work)
            line = (f"{where}: {result.verdict} ({result.seconds:.1f} s), recheck {again.verdict}, "
                    f"plain again {reference.verdict}: {result.tail}")
            if not reference.passed:
                report.own.append(line + " (fails plain on recheck)")
            elif again.passed:
                report.not_reproduced.append(line)
            elif result.verdict == "HANG" or again.verdict == "HANG":
                report.new_hangs.append(line)
            else:
                report.new.append(line)
            progress(f"    {line}")
    report.wall_s = time.monotonic() - started
    return report


# -- the whole run -------------------------------------------------------------------------------------------

@dataclass
class LayoutReport:
    library: MPILibrary
    ranks: int
    modes: list[ModeReport]
    unbuilt: list[str]
    build_s: float


def run_layout(library: MPILibrary, ranks: int, *, quick: bool, modes: Sequence[str], timeout: float,
               cli: bool = False, progress: Callable[[str], None] = lambda line: None) -> LayoutReport:
    started = time.monotonic()
    wanted = sorted({c[0] for c in QUICK}) if quick else []
    directory = build_tests(library, wanted)
    build_s = time.monotonic() - started
    progress(f"tests ready in {build_s:.0f} s (built, or found in the cache)")
    unbuilt_file = directory / "unbuilt.txt"
    unbuilt = unbuilt_file.read_text().split() if unbuilt_file.exists() else []
    if quick:
        cases = [Case(c[0], tuple(c[1:])) for c in QUICK]
    else:
        cases = [c for c in read_cases(directory) if (directory / c.program).exists()]
    called = collectives_called(directory)
    reports: list[ModeReport] = []
    with tempfile.TemporaryDirectory(prefix="mpich-coll-") as tmp:
        plain_report = run_mode("plain", library, ranks, directory, cases, None, timeout=timeout,
                                work=Path(tmp), called=called, progress=progress)
        plain = {r.case: r for r, _ in plain_report.results}
        reports.append(plain_report)
        progress(row(library, ranks, plain_report))
        for mode in modes:
            if mode == "plain":
                continue
            work = Path(tmp) / mode.replace(" ", "-")
            work.mkdir()
            report = run_mode(mode, library, ranks, directory, cases, plain, timeout=timeout, work=work,
                              called=called, cli=cli, progress=progress)
            reports.append(report)
            progress(row(library, ranks, report))
    return LayoutReport(library, ranks, reports, unbuilt, build_s)


HEADER = ("| library, ranks | mode | run | pass | new failures | new hangs | not reproduced | library's own | wall |\n"
          "|---|---|---|---|---|---|---|---|---|")


def row(library: MPILibrary, ranks: int, report: ModeReport) -> str:
    against_plain = [str(len(x)) if report.mode != "plain" else "-"
                     for x in (report.new, report.new_hangs, report.not_reproduced)]
    return (f"| {library.name}{'' if library.embedded else ' (Debian)'}, {ranks} | {report.mode} | {report.run} | "
            f"{report.passed} | {' | '.join(against_plain)} | {len(report.own)} | {report.wall_s:.0f} s |")


def print_report(layouts: Sequence[LayoutReport]) -> None:
    print(HEADER)
    for layout in layouts:
        for report in layout.modes:
            print(row(layout.library, layout.ranks, report))
    for layout in layouts:
        head = f"{layout.library.name} at {layout.ranks} ranks"
        print(f"\n{head}: tests ready in {layout.build_s:.0f} s (built, or found in the cache)")
        if layout.unbuilt:
            print(f"\n{head}: not built against this library: {', '.join(layout.unbuilt)}")
        for report in layout.modes:
            for title, lines in (("NEW failure", report.new), ("NEW hang", report.new_hangs),
                                 ("not reproduced on recheck", report.not_reproduced),
                                 ("library's own", report.own)):
                for line in lines:
                    print(f"{head} | {report.mode} | {title}: {line}")


def parse_layout(text: str) -> tuple[str, int]:
    spec, _, ranks = text.rpartition(":")
    if not spec or not ranks.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected LIBRARY:RANKS, e.g. openmpi:4")
    return spec, int(ranks)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("layouts", nargs="*", type=parse_layout, metavar="LIBRARY:RANKS",
                        help=f"--mpi SPEC and ranks (default: {' '.join(DEFAULT_LAYOUTS)}; missing site "
                             "libraries are skipped)")
    parser.add_argument("--quick", action="store_true", help="only the heaviest derived-type cases (QUICK)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma list of: " + ", ".join(MODES))
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds before a run is a HANG (at least 4x the plain run's time; default 60)")
    parser.add_argument("--cli", action="store_true",
                        help="online and profile through the `tunempi` command (as typed; adds its start-up, "
                             "2-4 s, to every run) instead of its entry points")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(unknown)}")
    layouts = args.layouts or [parse_layout(t) for t in DEFAULT_LAYOUTS
                               if not t.startswith("/") or Path(t.rpartition(":")[0]).exists()]

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    reports = []
    for spec, ranks in layouts:
        library = resolve_library(spec)
        progress(f"{library.name} at {ranks} ranks ({tests_dir(library)})")
        reports.append(run_layout(library, ranks, quick=args.quick, modes=modes, timeout=args.timeout,
                                  cli=args.cli, progress=progress))
    print_report(reports)
    bad = sum(len(m.new) + len(m.new_hangs) for layout in reports for m in layout.modes)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
