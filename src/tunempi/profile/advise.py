"""Advice for an application from its profile: which collectives are worth tuning, and the eager verdict.

The profile says what the application does (`Profile.usage()`); a PerformanceSource says, per cell
(collective, ranks, nodes, ppn, message size), how fast the library default is and which algorithm is
best. That interface is all advice needs: the results store (measured cells) and the model (cells never
measured) implement it (profile/sources.py); `DatasetSource` implements it from a benchmark dataset file.

Savings are per run: a rank that makes N calls of a cell saves N x (default - best) seconds; calls in a
profile are summed over ranks, so N = calls / ranks that made them.
"""

from __future__ import annotations

import json
import math
import shlex
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tunempi.bench.validate import ENGINE_COLLECTIVES
from tunempi.collectives import ONLINE_SWITCHABLE, VECTOR_COLLECTIVES
from tunempi.errors import UsageError
from tunempi.mpi.vendor import ThresholdKnob, VendorAdapter
from tunempi.profile.reader import (
    COUNT_SHAPES,
    CollectiveRecord,
    P2PBucket,
    Profile,
    UsageRow,
    dominant_shape,
)
from tunempi.space.feature import Cell, is_power_of_two, power_of_two_ceil, power_of_two_floor
from tunempi.store.dataset import DatasetRow


@dataclass(frozen=True)
class CellPerformance:
    """How one cell performs: the library default and the best known algorithm (latencies in us)."""

    default_us: float
    best_algorithm: str
    best_us: float
    source: str  # "measured", "predicted", or "nearest measured size <n>B" (DatasetSource's fallback)
    default_algorithm: str | None = None  # what the library's own selection picks, when that can be known
    log_std: float | None = None  # predictions: the model's standard deviation of log latency

    @property
    def best_is_default(self) -> bool:
        """No saving: the default is as fast, or the best algorithm is what the default itself runs
        (a difference between the two is then noise, not something a tuning file could gain)."""
        return self.best_us >= self.default_us or (self.default_algorithm is not None
                                                   and self.best_algorithm == self.default_algorithm)


class PerformanceSource(Protocol):
    """Per-cell performance for advice. Implemented by the store (measured) and the model (predicted)."""

    def performance(self, cell: Cell) -> CellPerformance | None:
        """None when nothing is known about the cell."""
        ...


@dataclass(frozen=True)
class CellAdvice:
    usage: UsageRow
    ranks: int  # ranks that made these calls
    share_of_run: float  # time in these calls / the ranks' run time
    performance: CellPerformance | None
    saving_s: float  # predicted saving per run (seconds), 0 when unknown or the default is already best

    @property
    def calls_per_rank(self) -> float:
        return self.usage.calls / self.ranks if self.ranks else 0.0


@dataclass(frozen=True)
class EagerVerdict:
    """Whether the eager/rendezvous threshold is worth searching (PTF's rule, tunempi's buckets).

    fraction: share of point-to-point bytes sent in the sizes where a threshold applies (2 KiB - 64 KiB);
    the search range spans the busiest bucket of that range and its neighbours.
    """

    fraction: float
    search: bool
    busiest: P2PBucket | None
    low: int = 0
    high: int = 0
    threshold: float = 0.3


@dataclass(frozen=True)
class Advice:
    cells: tuple[CellAdvice, ...]
    worth_tuning: tuple[str, ...]  # collectives, most saving first
    saving_by_collective: dict[str, float] = field(default_factory=dict)
    eager: EagerVerdict | None = None
    elapsed_s: float = 0.0


#: The sizes where an eager/rendezvous threshold applies: between the first and the last histogram bound.
EAGER_RANGE = (2048, 65536)


def eager_verdict(buckets: Sequence[P2PBucket], threshold: float = 0.3) -> EagerVerdict:
    total = sum(b.bytes for b in buckets)
    lo, hi = EAGER_RANGE
    inside = [b for b in buckets if b.lo >= lo and b.hi is not None and b.hi <= hi]
    in_range = sum(b.bytes for b in inside)
    fraction = in_range / total if total else 0.0
    if not inside or in_range == 0:
        return EagerVerdict(fraction, False, None, threshold=threshold)
    busiest = max(inside, key=lambda b: b.bytes)
    # Search one bucket either side of the busiest: a threshold just below or above it changes its protocol.
    low, high = max(lo // 2, busiest.lo // 2), min(hi * 2, (busiest.hi or hi) * 2)
    return EagerVerdict(fraction, fraction >= threshold, busiest, low, high, threshold)


def advise(profile: Profile, source: PerformanceSource, *, min_saving_fraction: float = 0.01) -> Advice:
    """Advice for every (collective, scale, size) the application uses.

    A collective is worth tuning when its predicted saving is at least `min_saving_fraction` of the run
    time (the longest rank's, from MPI_Init to MPI_Finalize). Non-blocking collectives are reported
    with the algorithms of their blocking form only if the source knows them under their own name.
    """
    cells = []
    for row in profile.usage():
        ranks = max(row.ranks, 1)
        perf = source.performance(Cell(row.collective, row.comm_size, row.nodes, row.ppn, row.msg_size))
        saving = 0.0
        if perf is not None and not perf.best_is_default:
            saving = (row.calls / ranks) * (perf.default_us - perf.best_us) * 1e-6
        share = row.time_s / profile.wall_s if profile.wall_s else 0.0
        cells.append(CellAdvice(row, ranks, share, perf, saving))
    by_collective: dict[str, float] = defaultdict(float)
    for cell in cells:
        by_collective[cell.usage.collective] += cell.saving_s
    limit = min_saving_fraction * profile.elapsed_s
    worth = tuple(name for name, saving in sorted(by_collective.items(), key=lambda kv: -kv[1])
                  if saving > 0 and saving >= limit)
    cells.sort(key=lambda c: (-c.saving_s, -c.share_of_run))
    return Advice(tuple(cells), worth, dict(by_collective), eager_verdict(profile.p2p), profile.elapsed_s)


#: The collectives `tunempi tune` takes: the benchmark engine's (bench.validate), without barrier, which
#: has no message size to tune (tune refuses it). The non-blocking ones the engine measures (iallreduce,
#: ibcast, ialltoall, iallgather: issue 41) are tuned for the objective the profile implies (profile/nonblocking.py:
#: time with the application's computation between start and wait, or latency); the profile's time of one is the
#: application's (start + waits), its sizes those it was started with.
TUNABLE_COLLECTIVES: tuple[str, ...] = tuple(c for c in ENGINE_COLLECTIVES if c != "barrier")


@dataclass(frozen=True)
class TuneCommand:
    """`tunempi tune` restricted to what the application uses; `left_out` names what tune cannot take."""

    argv: tuple[str, ...]
    collectives: tuple[str, ...]
    left_out: tuple[str, ...]

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


def tune_command(advice: Advice, mpi_spec: str, *, db: str | None = None, out: str = "tuned",
                 profile: str | None = None) -> TuneCommand | None:
    """The `tunempi tune` command for the collectives worth tuning, restricted to the scales and sizes the
    application uses them at: one node -> `--ranks` = the largest communicator (tune covers 2, 4, ...
    and that size); several nodes -> `--nodes`/`--ppn` = the largest used; `--min-msg`/`--max-msg` = the
    smallest/largest size rounded down/up to a power of two (at least 4 bytes: one reduction element).
    `profile`: the profile's path, given as `--from-profile` too, so that tune takes from it what these flags
    do not say (the non-blocking collectives' objective and computations, count shapes, commutative ops)."""
    chosen = [c for c in advice.cells if c.usage.collective in advice.worth_tuning
              and c.usage.collective in TUNABLE_COLLECTIVES and c.usage.nodes >= 1]
    collectives = tuple(dict.fromkeys(c.usage.collective for c in chosen))
    left_out = tuple(name for name in advice.worth_tuning if name not in collectives)
    if not collectives:
        return None
    nodes = max(c.usage.nodes for c in chosen)
    argv = ["tunempi", "tune", "--mpi", mpi_spec, "--collectives", ",".join(collectives)]
    if nodes == 1:
        argv += ["--ranks", str(max(c.usage.comm_size for c in chosen))]
    else:
        argv += ["--nodes", str(nodes), "--ppn", str(max(c.usage.ppn for c in chosen))]
    sizes = [c.usage.msg_size for c in chosen]
    argv += ["--min-msg", str(max(4, power_of_two_floor(min(sizes)))),
             "--max-msg", str(max(4, power_of_two_ceil(max(sizes))))]
    if profile:
        argv += ["--from-profile", profile]
    if db:
        argv += ["--db", db]
    argv += ["--out", out]
    return TuneCommand(tuple(argv), collectives, left_out)


# ------------------------------------------------------------------------- from a profile, no measurements

#: A kind of tuning is worth trying where what it acts on takes at least this share of the ranks' time: a
#: collective algorithm can save at most the time spent in collectives (and a runtime parameter search at
#: most the time in MPI), so below 5 % the best outcome is smaller than the run-to-run noise of most codes.
WORTH_SHARE = 0.05


@dataclass(frozen=True)
class ProfileScope:
    """What `tune --from-profile` measures: the tunable collectives the application uses (most time first),
    the largest layout it used them at, and the range of sizes (powers of two around what it sent)."""

    collectives: tuple[str, ...]
    untunable: tuple[str, ...]  # used, but `tune` benchmarks no algorithms for them
    ranks: int
    nodes: int
    ppn: int
    min_msg: int
    max_msg: int


def profile_scope(profile: Profile) -> ProfileScope:
    """The tuning scope of an application (UsageError when it makes no collective call tune can take)."""
    rows = profile.usage()
    by_time: dict[str, float] = defaultdict(float)
    for row in rows:
        by_time[row.collective] += row.time_s
    used = sorted(by_time, key=lambda name: -by_time[name])
    tunable = [name for name in used if name in TUNABLE_COLLECTIVES]
    if not tunable:
        raise UsageError("the profile holds no call of a collective `tunempi tune` takes (" +
                         (", ".join(used) or "no collective at all") + "): nothing to tune from it")
    chosen = [row for row in rows if row.collective in tunable]
    nodes = max(max(row.nodes for row in chosen), 1)
    ranks = max(row.comm_size for row in chosen)
    ppn = max((row.ppn for row in chosen if row.ppn > 0), default=max(1, ranks // nodes))
    sizes = [row.msg_size for row in chosen]
    return ProfileScope(tuple(tunable), tuple(name for name in used if name not in tunable), ranks, nodes, ppn,
                        max(4, power_of_two_floor(max(1, min(sizes)))), max(4, power_of_two_ceil(max(1, max(sizes)))))


@dataclass(frozen=True)
class NotTunable:
    """A collective the application spends time in that `tune --from-profile` does not tune, and why."""

    collective: str
    share_of_mpi: float  # its time / the ranks' MPI time
    reason: str

    @property
    def text(self) -> str:
        return f"{self.collective}: {100 * self.share_of_mpi:.0f}% of MPI time; {self.reason}"


def engine_reason(collective: str) -> str | None:
    """Why `tune` cannot take `collective` whatever the library (None: it can)."""
    if collective in TUNABLE_COLLECTIVES:
        return None
    if collective == "barrier":
        return "barrier moves no data: tune has no message size to select its algorithm by"
    if collective.startswith("i") and collective[1:] in ENGINE_COLLECTIVES:
        return f"non-blocking: the bench engine measures only the blocking {collective[1:]}"
    return "the bench engine cannot measure it yet"


def not_tunable(profile: Profile, library_reasons: Mapping[str, str] | None = None, *,
                min_share: float = WORTH_SHARE) -> tuple[NotTunable, ...]:
    """Every collective with at least `min_share` of the profile's MPI time that `tune --from-profile` leaves
    untuned, most time first: the engine cannot measure it (`engine_reason`), or the library cannot select
    an algorithm for it (`library_reasons`: collective -> why, see `unselectable_by_library`)."""
    mpi = profile.mpi_s
    if mpi <= 0:
        return ()
    found = []
    for name, _, time_s in profile.time_by_collective():
        share = time_s / mpi
        reason = engine_reason(name) or (library_reasons or {}).get(name)
        if reason is not None and share >= min_share:
            found.append(NotTunable(name, share, reason))
    return tuple(sorted(found, key=lambda n: -n.share_of_mpi))


def unselectable_by_library(collectives: Iterable[str], algorithms: Callable[[str], Sequence[str]],
                    selectable: Callable[[str], Sequence[str]], library: str) -> dict[str, str]:
    """Why the library cannot select an algorithm for each of `collectives` the engine measures: it offers
    none to choose from (`algorithms`), or no tuning file of it can select one (`selectable`)."""
    reasons = {}
    for name in collectives:
        if engine_reason(name) is not None:
            continue
        if not algorithms(name):
            reasons[name] = f"{library} offers no algorithms to choose from for it"
        elif not selectable(name):
            reasons[name] = f"{library}'s tuning files cannot select an algorithm for it"
    return reasons


def unselectable_here(adapter: VendorAdapter, library: str, collectives: Iterable[str]) -> dict[str, str]:
    """`unselectable_by_library` with the adapter's catalog: why `library` cannot select an algorithm for
    each of `collectives` (advise, `tune --from-profile` and autotune say the same)."""
    known = set(adapter.collectives())
    return unselectable_by_library(
        sorted(collectives), lambda name: [a.name for a in adapter.algorithms(name)] if name in known else [],
        lambda name: adapter.tuning_file_algorithms(name).selectable if name in known else (), library)


@dataclass(frozen=True)
class TuneScope:
    """What `tune --from-profile` tunes for one library: the profile's tunable collectives the library can
    select an algorithm for (most time first), the others with the reason, the layout (the profile's, unless
    one was given) and the sizes."""

    collectives: tuple[str, ...]
    left_out: Mapping[str, str]  # collective -> why the library cannot select an algorithm for it
    untunable: tuple[str, ...]  # used, but `tune` benchmarks no algorithms for them
    nodes: int
    ranks: int | None
    ppn: int | None
    min_msg: int
    max_msg: int
    #: the vector collectives of `collectives` whose counts the profile classified -> their dominant shape
    #: (uniform included): the count distribution `tune` measures them with unless told otherwise
    count_shapes: Mapping[str, str] = field(default_factory=dict)
    #: every reduction the profile recorded passed a commutative operation: tune may select algorithms that
    #: need one (Open MPI's ring allreduce), as with --assume-commutative-ops (mpi/restrictions.COMMUTATIVE_OPS)
    commutative_ops: bool = False
    #: every collective call the profile recorded passed predefined datatypes (reader.predefined_types_only): tune
    #: may select algorithms that need contiguous, same-count datatypes, as with --assume-contiguous-datatypes
    #: --assume-same-counts
    predefined_types: bool = False

    def vouched_flags(self) -> tuple[str, ...]:
        """The tune --assume flags the profile's calls vouch for (mpi/restrictions.ASSUME_FLAGS)."""
        return (("--assume-commutative-ops",) if self.commutative_ops else ()) + (
            ("--assume-contiguous-datatypes", "--assume-same-counts") if self.predefined_types else ())


def vouched_evidence(profile: Profile) -> dict[str, str]:
    """Each tune --assume flag the profile's calls vouch for (TuneScope.vouched_flags) -> what the profile recorded
    that vouches for it, so a tune that takes the flag on its own can say why."""
    def calls(rows: Sequence[CollectiveRecord]) -> str:
        by: dict[str, int] = defaultdict(int)
        for row in rows:
            by[row.collective] += row.calls
        return f"{sum(by.values())} calls of {', '.join(sorted(by))}" if by else "none recorded"

    found: dict[str, str] = {}
    if profile.commutative_ops_only():
        found["--assume-commutative-ops"] = ("every reduction the profile recorded passed a commutative operation "
                                             f"({calls(profile.reduction_rows())})")
    if profile.predefined_types_only():
        typed = ("every collective call the profile recorded passed predefined datatypes "
                 f"({calls(profile.typed_rows())}): contiguous, lower bound 0, counting alike on every rank")
        found.update({"--assume-contiguous-datatypes": typed, "--assume-same-counts": typed})
    return found


def count_shape_text(collective: str, shapes: Mapping[str, int]) -> str:
    """'alltoallv: sparse (24 of 48 calls classified; uniform 16, skewed 8)': a collective's dominant count
    shape (reader.dominant_shape) and how its classified calls split."""
    dominant = dominant_shape(shapes)
    if dominant is None:
        return f"{collective}: no call classified"
    others = ", ".join(f"{s} {shapes[s]}" for s in COUNT_SHAPES if s != dominant and shapes.get(s))
    return (f"{collective}: {dominant} ({shapes[dominant]} of {sum(shapes.values())} calls classified"
            f"{'; ' + others if others else ''})")


def tune_scope(profile: Profile, adapter: VendorAdapter, library: str, *, nodes: int | None = None,
               ranks: int | None = None, ppn: int | None = None) -> TuneScope:
    """The scope of `tune --from-profile` (UsageError, from profile_scope, when there is nothing to tune)."""
    scope = profile_scope(profile)
    reasons = unselectable_here(adapter, library, scope.collectives)
    if nodes is None and ranks is None and ppn is None:
        nodes = scope.nodes
        ranks, ppn = (scope.ranks, None) if scope.nodes == 1 else (None, scope.ppn)
    nodes = nodes or 1
    if ranks is None and ppn is None and nodes == 1:
        ranks = 2
    taken = tuple(c for c in scope.collectives if c not in reasons)
    shapes = {c: s for c, s in profile.dominant_shapes().items() if c in taken and c in VECTOR_COLLECTIVES}
    return TuneScope(taken, reasons, scope.untunable, nodes, ranks, ppn, scope.min_msg, scope.max_msg, shapes,
                     commutative_ops=profile.commutative_ops_only(),
                     predefined_types=profile.predefined_types_only())


@dataclass(frozen=True)
class PlanStep:
    """One step of the plan for an application: what, whether it is worth it and why, the command."""

    kind: str  # tune / online / search / compare
    worth: bool
    why: str
    commands: tuple[str, ...]


#: Below this share of its run on a CPU a rank was descheduled (or slept): MPI libraries poll while they wait.
ON_CPU_SHARE = 0.8


def shares_caveat(profile: Profile) -> str | None:
    """Why the profile's time shares may be inflated, or None: a rank that was off the CPU for much of its
    run (a machine shared with other jobs) makes the other ranks wait for it inside MPI, and that waiting is
    counted as MPI and collective time (measured: a Quantum ESPRESSO input read 93.5 % collectives on a loaded
    machine and 17.7 % on a quiet one, docs/measurements/applications.md)."""
    rank = profile.least_on_cpu()
    if rank is None or rank.on_cpu is None or rank.on_cpu >= ON_CPU_SHARE:
        return None
    return (f"rank {rank.rank} was on a CPU for {100 * rank.on_cpu:.0f}% of its run (MPI libraries poll while "
            "they wait, so expect close to 100%): the machine was probably shared with other jobs (or the "
            "program sleeps or waits for I/O); waiting for a descheduled rank counts as MPI time, so the MPI "
            "and collective shares may be inflated: profile again on an idle machine before trusting them")


def application_plan(profile: Profile, profile_path: str, mpi_spec: str, *, switches_per_call: bool = True,
                     library_reasons: Mapping[str, str] | None = None) -> list[PlanStep]:
    """Which of tune / online / search is worth it for this application, from its profile alone (the shares
    of its time), with the commands; then the comparison that decides on the application itself.
    switches_per_call: the library can switch algorithms per call (the adapter's switches_at_run_time: not
    Intel MPI), which the online mode needs. library_reasons: collective -> why the library cannot select an
    algorithm for it (`unselectable_by_library`); every collective with >= WORTH_SHARE of the MPI time that
    tune leaves is named in the tune step, with its reason (`not_tunable`)."""
    wall = profile.wall_s or 1.0
    collective_share, p2p_share, mpi_share = profile.collective_s / wall, profile.p2p_s / wall, profile.mpi_s / wall
    ranks = profile.header.get("ranks", "N")
    program = shlex.join(str(a) for a in profile.header.get("command", ["./app"]))
    launch = f"mpiexec -n {ranks} {program}"
    mpi = shlex.quote(mpi_spec)
    steps = []
    try:
        scope: ProfileScope | None = profile_scope(profile)
    except UsageError:
        scope = None
    collective_worth = scope is not None and collective_share >= WORTH_SHARE
    said = f"collectives take {100 * collective_share:.1f}% of the ranks' time"
    if scope is None:
        why = f"{said}, none of them one `tune` takes"
    elif collective_worth:
        why = f"{said} ({', '.join(scope.collectives)}): better algorithms can save up to that"
    else:
        why = f"{said}: below {100 * WORTH_SHARE:g}%, the most algorithm tuning could save"
    left = not_tunable(profile, library_reasons)
    if left:
        why += "; not tuned: " + "; ".join(n.text for n in left)
    steps.append(PlanStep("tune", collective_worth, why, (
        f"tunempi tune --from-profile {shlex.quote(profile_path)} --mpi {mpi} --out tuned",)))
    # online switches only the collectives every rank of a call sees at one size (collectives.ONLINE_SWITCHABLE)
    switchable = [c for c in scope.collectives if c in ONLINE_SWITCHABLE] if scope is not None else []
    unswitched = [c for c in scope.collectives if c not in ONLINE_SWITCHABLE] if scope is not None else []
    # ... and it can pay only as far as those take time (LAMMPS' PPPM: 42 % in collectives, 1 % switchable)
    switchable_share = sum(t for name, _, t in profile.time_by_collective() if name in switchable) / wall
    online_worth = collective_worth and switches_per_call and switchable_share >= WORTH_SHARE
    if not switches_per_call:
        online_why = "not for this library: it reads its algorithm choice at MPI_Init only, so it cannot switch per call"
    elif collective_worth and not online_worth:
        online_why = (f"{said}, but those online switches ({', '.join(switchable) or 'none'}) only "
                      f"{100 * switchable_share:.1f}%, below {100 * WORTH_SHARE:g}%: online cannot switch "
                      f"{', '.join(unswitched)} per call (each rank's size is its own blocks', so ranks of one call "
                      "would draw in different cells); tune writes files for them")
    else:
        online_why = why + "; online tunes inside the application's own runs (for an application run often)"
        if online_worth:
            online_why += f"; it switches {', '.join(switchable)}"
            if unswitched:
                online_why += f", not {', '.join(unswitched)} (each rank's size is its own blocks')"
    steps.append(PlanStep("online", online_worth, online_why, (
                              f"tunempi online run --from-profile {shlex.quote(profile_path)} --mpi {mpi} --runs 10 "
                              f"--update -- {launch}",
                              f"tunempi online best --mpi {mpi} --out online-best")))
    search_worth = p2p_share >= WORTH_SHARE or mpi_share - collective_share >= WORTH_SHARE
    steps.append(PlanStep("search", search_worth, f"point-to-point takes {100 * p2p_share:.1f}% of the ranks' time "
                          f"(MPI {100 * mpi_share:.1f}%): runtime parameters (eager limits, transports) act on it"
                          + ("" if search_worth else f"; below {100 * WORTH_SHARE:g}%"), (
                              f"tunempi search --space auto --mpi {mpi} --budget 30 -- {launch}",)))
    variants = [v for v, worth in (("tuned", collective_worth), ("online-best", online_worth),
                                   ("tunempi-search/best.env", search_worth)) if worth]
    steps.append(PlanStep("compare", bool(variants), "decides on the application itself: speedup with its 95% "
                          "interval, results checked unchanged (give --result REGEX for what it computes)", (
                              "tunempi compare " + " ".join(f"--variant {v}" for v in variants or ["DIR"])
                              + f" --result REGEX -- {launch}",)))
    return steps


# -------------------------------------------------------------------------------------- eager space


def eager_search_space(verdict: EagerVerdict, knobs: Sequence[ThresholdKnob], *, library: str,
                       note: str = "") -> str | None:
    """The eager verdict as a ready `tunempi search` space (TOML, docs/search.md), or None when the
    threshold is not worth searching or no knob fits. Every knob gets the verdict's range (a log range; a
    list of powers of two where the library only accepts those), cut at the knob's maximum (a knob whose
    range is then empty is left out, with a comment), and its default when inside."""
    if not verdict.search or not knobs:
        return None
    lines = [f"# eager/rendezvous threshold search for {library}, written by `tunempi advise`",
             f"# {100 * verdict.fraction:.0f}% of point-to-point bytes are sent in 2 KiB - 64 KiB "
             f"(busiest: {verdict.busiest.label if verdict.busiest else '-'})"]
    if note:
        lines.append(f"# {note}")
    lines += ["", "[space]", f"library = {_toml_str(library)}"]
    kept = 0
    for knob in knobs:
        high = min(verdict.high, knob.maximum) if knob.maximum is not None else verdict.high
        low = verdict.low
        if knob.powers_of_two:
            low, high = power_of_two_floor(low), power_of_two_floor(high)
        if low > high:
            lines += ["", f"# {knob.name} left out: the library does not start with values above {knob.maximum}"]
            continue
        kept += 1
        lines += ["", f"# {knob.transport} ({knob.locality})"
                  + (f"; at most {knob.maximum}, the library's limit" if high < verdict.high else ""),
                  "[[param]]", f"name = {_toml_str(knob.name)}", "kind = \"int\""]
        if knob.powers_of_two:
            lines.append(f"range = \"{low}:*2:{high}\"")
            inside = knob.default is not None and low <= knob.default <= high and is_power_of_two(knob.default)
        else:
            lines += [f"low = {low}", f"high = {high}", "log = true"]
            inside = knob.default is not None and low <= knob.default <= high
        if inside:
            lines.append(f"default = {knob.default}")
    if not kept:
        return None
    return "\n".join(lines) + "\n"


def _toml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


class DatasetSource:
    """PerformanceSource over benchmark dataset rows (docs/dataset-format.md): mean latency per cell.

    A cell that was not measured borrows the nearest measured message size of the same collective and
    scale within a factor of two (labelled as such); farther than that, it is unknown.
    """

    def __init__(self, rows: Iterable[DatasetRow], default_name: str = "default") -> None:
        sums: dict[tuple[str, int, int, int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for row in rows:
            sums[(row.collective, row.ranks, row.nodes, row.ppn, row.msg_bytes)][row.algorithm].append(
                row.latency_us)
        self.default_name = default_name
        self.cells_ = {key: {alg: sum(v) / len(v) for alg, v in algs.items()} for key, algs in sums.items()}
        self.sizes_: dict[tuple[str, int, int, int], list[int]] = defaultdict(list)
        for collective, ranks, nodes, ppn, size in self.cells_:
            self.sizes_[(collective, ranks, nodes, ppn)].append(size)

    def _at(self, key: tuple[str, int, int, int, int], source: str) -> CellPerformance | None:
        latencies = self.cells_[key]
        default = latencies.get(self.default_name)
        others = {a: t for a, t in latencies.items() if a != self.default_name}
        if default is None or not others:
            return None
        best = min(others, key=lambda a: others[a])
        return CellPerformance(default, best, others[best], source)

    def performance(self, cell: Cell) -> CellPerformance | None:
        key = (cell.collective, cell.ranks, cell.nodes, cell.ppn, cell.msg_bytes)
        if key in self.cells_:
            return self._at(key, "measured")
        sizes = self.sizes_.get(key[:4], [])
        if not sizes or cell.msg_bytes <= 0:
            return None
        nearest = min(sizes, key=lambda s: abs(math.log2(max(s, 1)) - math.log2(cell.msg_bytes)))
        if abs(math.log2(max(nearest, 1)) - math.log2(cell.msg_bytes)) > 1:
            return None
        return self._at((*key[:4], nearest), f"nearest measured size {nearest}B")
