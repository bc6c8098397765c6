"""Driver of the collective conformance suite (coll_conformance.c): build, launch, resume after a crash.

One launch runs every case of the chosen collectives; world rank 0 prints one verdict line per case as
it finishes. A launch that dies (segfault, abort) or hangs loses only the case it was in: that case is
recorded as CRASH (or HANG) and the launch is restarted after it.

`python tests/conformance/suite.py` prints the suite's counts per library x mode (docs/conformance.md).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.errors import MPIError
from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.launch.process import run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.library import MPILibrary

SOURCE = Path(__file__).with_name("coll_conformance.c")
RESULT = re.compile(r"^R (\d+) (\S+) (.*) (ok|FAIL|ERROR)$")
LISTED = re.compile(r"^L (\d+) (\S+) (.*)$")
#: The collectives the suite covers (every one tunempi can switch or write a tuning file for).
COLLECTIVES: tuple[str, ...] = ("allreduce", "bcast", "allgather", "alltoall", "reduce", "reduce_scatter",
                                "reduce_scatter_block", "gather", "scatter", "barrier", "allgatherv", "alltoallv",
                                "gatherv", "scatterv", "alltoallw")
#: The non-blocking collectives (issue 41): their cases run only when a launch names them (`colls`), so the
#: blocking suite's runs are what they were.
NONBLOCKING_COLLECTIVES: tuple[str, ...] = ("iallreduce", "ibcast", "iallgather", "ialltoall")


@dataclass(frozen=True)
class Outcome:
    index: int
    collective: str
    case: str  # "<comm> <inplace|copy> <types/op> <count> <root>"
    verdict: str  # ok | FAIL | ERROR | CRASH | HANG | SETUP (the launch died before its first case) |
    #               OWN (not run: it crashes or hangs the library on its own, see run_suite's skip) |
    #               SKIP (not run: its class crashed earlier in the launch, see run_suite's skip_class_after)

    @property
    def passed(self) -> bool:
        return self.verdict == "ok"

    @property
    def key(self) -> tuple[str, str]:
        """What the case is (indexes depend on which collectives a launch runs)."""
        return (self.collective, self.case)

    def __str__(self) -> str:
        return f"{self.collective} {self.case}: {self.verdict}"


#: glibc's heap checking (libc_malloc_debug linked in, MALLOC_CHECK_=3 set by the program itself): a library
#: that writes past or before a buffer it allocated (Open MPI 5.0.11's ring allreduce does, for a datatype
#: whose true lower bound is not 0) aborts when it frees that buffer, inside the case at fault, instead of
#: corrupting the heap for a later case to crash on. (glibc's mcheck, which can check every block after each
#: case, is not thread-safe: Open MPI's PMIx thread made it report clobbered blocks that were not.)
HEAP_CHECK = ("-DTUNEMPI_HEAP_CHECK", "-Wl,--no-as-needed", "-l:libc_malloc_debug.so.0")


def build_program(library: MPILibrary) -> Path:
    try:
        return build_c(library, [SOURCE], "coll_conformance", werror=True, extra_flags=HEAP_CHECK)
    except MPIError:  # no glibc mcheck here (another C library): the suite runs without it
        return build_c(library, [SOURCE], "coll_conformance", werror=True)


def launch_command(library: MPILibrary, ranks: int, program: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(argv, launcher environment) for `program` on `ranks` ranks of this machine (flags as environment,
    so the same argv can be given to `tunempi online run` / `tunempi profile`)."""
    launcher = launcher_for(library, **({"flags_as_env": True} if library.vendor == "openmpi" else {}))
    command = launcher.command(LaunchSpec(command=tuple(program), ranks=ranks))
    return list(command.argv), dict(command.env)


def list_cases(library: MPILibrary, program: Path, colls: Iterable[str] | None = None, ranks: int = 2
               ) -> dict[int, tuple[str, str]]:
    """index -> (collective, case) without running anything (roots depend on the number of ranks)."""
    argv, env = launch_command(library, ranks, [str(program), "--list", *_colls_args(colls)])
    result = run_launch(argv, {**os.environ, **env, **library_env(library)}, timeout=120)
    cases = {}
    for line in result.stdout.splitlines():
        m = LISTED.match(line)
        if m:
            cases[int(m.group(1))] = (m.group(2), m.group(3))
    return cases


def library_env(library: MPILibrary) -> dict[str, str]:
    """What every launch of the library needs here (Open MPI: its prefix; one node: no fabric btl)."""
    from tunempi.mpi.discovery import adapter_for

    adapter = adapter_for(library)
    # A crashed rank dies at once instead of printing a backtrace from its signal handler: after a heap
    # corruption that printing allocates, and hung on the allocator's lock (UCX's handler under Debian's
    # MPICH 4.0.2, whose Hydra passes the environment on; Open MPI's own), so a 1-second crash cost the
    # launch's 120-second timeout. (Open MPI's mca_base_env_list cannot carry the UCX one: tunempi's
    # wrappers pass their variables with -x, and Open MPI refuses the two together.)
    env = {**adapter.single_node_env(), "UCX_HANDLE_ERRORS": "none", "OMPI_MCA_opal_signal": ""}
    if library.vendor == "openmpi" and library.embedded:
        env["OPAL_PREFIX"] = str(library.prefix)
    return env


def _colls_args(colls: Iterable[str] | None) -> list[str]:
    return ["--colls", ",".join(colls)] if colls is not None else []


#: A launch that reports no case for this long is hung in its case (each takes milliseconds, seconds with busy
#: loops beside it): MPICH 5.0.2's reduce_scatter pairwise forced on a non-commutative op in place crashes a
#: rank, but now and then the other rank hangs instead, and waiting out the launch's 120 s cost make test
#: two minutes. Before its first line (MPI_Init, `tunempi online run` building its interposer) the launch
#: has its whole timeout.
CASE_IDLE_S = 30.0
#: The same for the library's reference runs: a hang there only marks the case's class as the library's own
#: (every mode skips it), so a case slowed past this by a loaded machine costs coverage, never a failure.
#: Intel MPI 2021.19.0's default hangs in a bcast after its own gather crash in every whole-suite launch.
REFERENCE_IDLE_S = 10.0


def run_suite(
    library: MPILibrary,
    ranks: int,
    *,
    program: Path,
    env: Mapping[str, str] | None = None,
    colls: Iterable[str] | None = None,
    program_args: Sequence[str] = (),
    wrap: Callable[[list[str]], list[str]] | None = None,
    skip: Iterable[tuple[str, str]] = (),
    timeout: float = 120.0,
    idle_timeout: float = CASE_IDLE_S,
    max_restarts: int = 400,
    skip_class_after: Callable[[Outcome], bool] | None = None,
) -> dict[int, Outcome]:
    """Run every case (of `colls`), restarting after a crashed or hung case. `wrap` turns the launch argv
    into the command actually run (e.g. under `tunempi online run`). `skip`: cases (Outcome.key) not to run,
    recorded as OWN: those that crash the library on its own (each crash costs a relaunch).
    `skip_class_after(crashed)`: whether the rest of a crashed or hung case's class (case_class) is left out
    too, recorded as SKIP (a forced algorithm that crashes on a datatype or op it cannot take does so at
    every count, root and communicator: a relaunch each, nine in ten of the forced check's launches)."""
    colls = list(colls) if colls is not None else None
    if colls == []:
        return {}
    setup_retries = 2
    listed = list_cases(library, program, colls, ranks)
    skipped = set(skip)
    outcomes: dict[int, Outcome] = {i: Outcome(i, c, case, "OWN") for i, (c, case) in listed.items()
                                    if (c, case) in skipped}
    start = 0
    with tempfile.TemporaryDirectory(prefix="conformance-") as logs_dir:
        logs = Path(logs_dir)
        for launch in range(max_restarts):
            not_run = sorted(i for i, o in outcomes.items() if o.verdict in ("OWN", "SKIP"))
            skip_args = ["--skip", ",".join(str(i) for i in not_run)] if not_run else []
            log = logs / f"launch-{launch}.log"
            args = [str(program), *_colls_args(colls), "--start", str(start), *skip_args, "--log", str(log),
                    *program_args]
            argv, launch_env = launch_command(library, ranks, args)
            if wrap is not None:
                argv = wrap(argv)
            result = run_launch(argv, {**os.environ, **launch_env, **library_env(library), **(env or {})},
                                timeout=timeout, idle_timeout=idle_timeout)
            done = ready = False
            for line in reported_lines(result.stdout, log):
                ready = ready or line == "READY"
                m = RESULT.match(line)
                if m:
                    index = int(m.group(1))
                    outcomes[index] = Outcome(index, m.group(2), m.group(3), m.group(4))
                elif line.startswith("DONE "):
                    done = True
            if done and result.returncode == 0:
                break
            remaining = [i for i in sorted(listed) if i >= start and i not in outcomes]
            if not remaining:
                if not done:
                    raise RuntimeError(f"launch failed after its last case: {' '.join(argv)}\n{result.stderr[-3000:]}")
                break
            if not ready:  # died before the first case: the set-up (communicator constructors) failed
                if "cannot write control variable" in result.stderr:
                    raise RuntimeError(result.stderr[-2000:])
                if setup_retries > 0:
                    # Right after a crashed launch, Debian's MPICH 4.0.2 sometimes fails to start the next one
                    # (1 run in 2 lost ~1500 cases that way): start it again before calling it the set-up's.
                    setup_retries -= 1
                    continue
                for i in remaining:
                    outcomes[i] = Outcome(i, listed[i][0], listed[i][1], "SETUP")
                break
            lost = remaining[0]
            collective, case = listed[lost]
            outcomes[lost] = Outcome(lost, collective, case, "HANG" if result.timed_out else "CRASH")
            if skip_class_after is not None and skip_class_after(outcomes[lost]):
                lost_class = case_class(outcomes[lost])
                for i in remaining[1:]:
                    other = Outcome(i, *listed[i], "SKIP")
                    if case_class(other) == lost_class:
                        outcomes[i] = other
            start = lost + 1
        else:
            raise RuntimeError(f"more than {max_restarts} crashed launches: {' '.join(argv)}")
    return outcomes


def reported_lines(stdout: str, log: Path) -> list[str]:
    """Rank 0's report of one launch: its --log file, then what reached stdout (the same lines, or fewer:
    MPICH 5.0.2's Hydra at 8 ranks dropped READY when the first case crashed at once, and every case after it
    counted as a set-up failure). Reading a line twice is harmless."""
    try:
        written = log.read_text(errors="replace").splitlines()
    except FileNotFoundError:  # the launch died before rank 0 got through its set-up
        written = []
    return written + stdout.splitlines()


def case_class(outcome: Outcome) -> tuple[str, str]:
    """(collective, datatypes/op): a class of calls, whatever the communicator, count and root."""
    return outcome.collective, outcome.case.split()[2]


def type_classes(outcome: Outcome) -> set[tuple[str, str]]:
    """Its case_class, and for ranks with different types of one signature (`neglb|int`, issue 38) each type's:
    half the ranks pass that type to the library. (Intel MPI 2021.19.0's gather corrupts its root's heap on the
    negative-lower-bound type on its own; at 4 ranks the profiler's allocations made that show in `gather world
    copy neglb|int 33 0`, every launch, never without the interposer, which passes the arguments through.)"""
    collective, types = case_class(outcome)
    return {(collective, types), *((collective, t) for t in types.split("|"))}


#: What each of the program's datatypes is not (coll_conformance.c, make_layouts): vec and matv are strided
#: vectors, nest an hindexed of a subarray whose first value sits 40 ints past the buffer pointer, struct an
#: hindexed of {int, double} with a gap in each element, neglb an hindexed reaching below the pointer.
TYPE_BREAKS: dict[str, frozenset[str]] = {
    "int": frozenset(), "mat": frozenset(),
    "vec": frozenset({"contiguous"}), "matv": frozenset({"contiguous"}), "struct": frozenset({"contiguous"}),
    "nest": frozenset({"contiguous", "true-lb-zero"}), "neglb": frozenset({"contiguous", "true-lb-zero"}),
}
#: Requirements no case states one way or the other: MPICH's node-level sub-communicators are the library's own.
UNREADABLE_REQUIREMENTS: frozenset[str] = frozenset({"parent-comm"})


def broken_requirements(outcome: Outcome, ranks: int) -> frozenset[str]:
    """The requirements of tunempi.mpi.restrictions this case breaks on `ranks` world ranks, plus those no
    case states (UNREADABLE_REQUIREMENTS): a failure of a restricted algorithm is the restriction's only where
    the case breaks one of them (test_conformance's forced check). The case reads "<comm> <inplace|copy>
    <types[/op]> <count> <root>": `half` splits the world by rank parity and `inter` joins those halves, so
    their sizes are the halves'; `a|b` gives half the ranks type b and another count, `a>b` sends a and
    receives b; the user sum is commutative, the matrix product not; reduce_scatter's counts alternate n, n+1."""
    comm, mode, types_op, count = outcome.case.split()[:4]
    types, _, op = types_op.partition("/")
    sizes = {ranks} if comm in ("world", "rev") else {(ranks + 1) // 2, ranks // 2} - {0}
    names = re.split(r"[|>]", types)
    broken = set(UNREADABLE_REQUIREMENTS)
    for name in names:
        broken |= TYPE_BREAKS[name]
    if len(names) > 1:
        broken.add("same-types")
    if "|" in types:
        broken.add("same-counts")
    if op and op != "sum":
        broken.add("builtin-op")
    if op == "matmul":
        broken.add("commutative")
    broken.add("not-inplace" if mode == "inplace" else "inplace")
    if any(size & (size - 1) for size in sizes):
        broken.add("power-of-two")
    if sizes != {2}:
        broken.add("two-ranks")
    if max(sizes) > 4:
        broken.add("at-most-four-ranks")
    if "|" in types or any(int(count) < 1 << (size.bit_length() - 1) for size in sizes):
        broken.add("count-ge-pow2")  # half the ranks of a|b pass another count
    if outcome.collective.endswith("reduce_scatter") and int(count) > 0 and max(sizes) > 1:
        broken.add("block-regular")
    return frozenset(broken)


def worst_of(*runs: Mapping[int, Outcome]) -> dict[int, Outcome]:
    """Several runs of the same cases as one: a case passes only if it passed in every run. The library's
    own failures come and go (heap corruption shows in a different case from launch to launch), and a case
    it fails now and then is its own, not the mode's that happened to meet it."""
    merged: dict[int, Outcome] = {}
    for run in runs:
        for index, outcome in run.items():
            if index not in merged or (merged[index].passed and not outcome.passed):
                merged[index] = outcome
    return merged


def library_reference(library: MPILibrary, ranks: int, program: Path, colls: Iterable[str] | None = None
                      ) -> dict[int, Outcome]:
    """The library on its own, the reference every mode is compared with: the whole suite twice (issue 25:
    a case the library fails now and then is its own), and each collective's cases once more in a launch of
    their own. Intel MPI 2021.19.0's default gather crashes on a negative-lower-bound type at count 1 in
    every launch of gather alone, but after the other collectives' cases it passes: its heap corruption
    shows only in some layouts of the heap, so a mode that allocates (the profiler) meets it.
    The later runs skip what the first crashed or hung on (`crashing`: every mode skips those classes too):
    Intel MPI's default hangs in a bcast after its own gather crash (REFERENCE_IDLE_S), and each crash costs
    a relaunch."""
    first = run_suite(library, ranks, program=program, colls=colls, idle_timeout=REFERENCE_IDLE_S)
    again = run_suite(library, ranks, program=program, colls=colls, skip=crashing(first),
                      idle_timeout=REFERENCE_IDLE_S)
    merged = worst_of(first, {i: o for i, o in again.items() if o.verdict != "OWN"})  # skipped: the first's
    by_key = {o.key: index for index, o in merged.items()}
    lost = crashing(merged)
    for collective in sorted({o.collective for o in merged.values()}):
        for outcome in failures(run_suite(library, ranks, program=program, colls=[collective], skip=lost,
                                          idle_timeout=REFERENCE_IDLE_S)):
            index = by_key.get(outcome.key)
            if index is not None and merged[index].passed and outcome.verdict != "OWN":
                merged[index] = Outcome(index, outcome.collective, outcome.case, outcome.verdict)
    return merged


def crashing(outcomes: Mapping[int, Outcome]) -> list[tuple[str, str]]:
    """What later runs skip: the cases that crashed or hung the library on its own, and every other case of
    their class, and the calls it refused. A library that corrupts its heap in one case of a class does so in others now and then
    (MPICH 5.0.2's reduce with a user op on a type with a negative true lower bound aborts at a different
    count or root from launch to launch, whichever algorithm runs): run again, such a case would be charged
    to whatever mode happened to meet it."""
    lost = ("CRASH", "HANG", "OWN")
    classes = {case_class(o) for o in outcomes.values() if o.verdict in lost}
    # A call the library fails on its own (an MPI error) is not run again either: it says nothing about
    # tunempi. (Debian's MPICH 4.0.2 returns an error to rank 0 alone for 33 elements of the struct type
    # scattered from the last rank; the online mode used to rerun it there and hang: it reruns only the
    # library's refusals now, tests/integration/test_online_mpi.py, issue 38.)
    # A mixed-type case (`neglb|int`) is in each of its types' classes (type_classes).
    return [o.key for o in outcomes.values()
            if o.verdict in (*lost, "ERROR") or classes & type_classes(o)]


def failures(outcomes: Mapping[int, Outcome]) -> list[Outcome]:
    return [o for _, o in sorted(outcomes.items()) if not o.passed]


def passes_in(reference: Mapping[int, Outcome], outcome: Outcome) -> bool:
    """Whether the same case passes in `reference` (matched by what the case is, not its index)."""
    for other in reference.values():
        if other.key == outcome.key:
            return other.passed
    raise KeyError(f"{outcome} is not in the reference run")


def new_failures(outcomes: Mapping[int, Outcome], reference: Mapping[int, Outcome]) -> list[Outcome]:
    """Cases that fail here but pass in `reference` (the library on its own); skipped ones (OWN) are not."""
    return [o for _, o in sorted(outcomes.items())
            if not o.passed and o.verdict != "OWN" and passes_in(reference, o)]


def summary(outcomes: Mapping[int, Outcome], reference: Mapping[int, Outcome] | None = None) -> str:
    """'run N, pass P, fail F (of which L also fail in the library on its own)'."""
    bad = failures(outcomes)
    text = f"run {len(outcomes)}, pass {len(outcomes) - len(bad)}, fail {len(bad)}"
    if reference is not None:
        own = [o for o in bad if o.verdict == "OWN" or not passes_in(reference, o)]
        text += f" (library's own: {len(own)})"
    return text


if __name__ == "__main__":  # pragma: no cover - a reporting entry point, see docs/conformance.md
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from modes import main

    raise SystemExit(main(sys.argv[1:]))
