"""Exhaustive sweeps: every (collective, algorithm, size, repetition) point of a layout, into the store.

Two ways to select the algorithm of a point (`mode`):
- "mpit" (default): ONE launch measures every point; the engine switches algorithms between points by
  writing the library's algorithm cvar through MPI_T (adapter.runtime_switch).
- "env": one launch per (collective, algorithm) with the algorithm forced through the environment
  (adapter.force_env): the classic way, kept to cross-check the MPI_T path. A library that reads its
  choice at MPI_Init only (adapter.switches_at_run_time() false: Intel MPI) is measured this way in
  both modes.
In both modes the engine reads the cvar back and reports it; a point whose library did not take the
asked-for algorithm is recorded as failed, never stored as that algorithm.

Strict selection (mode "mpit", on by default): where the library can be told to fail a call instead of
silently running another algorithm when the forced one cannot take the call's arguments
(adapter.strict_selection_switch: MPICH), every launch turns that on, so what is stored under an
algorithm's name was measured with that algorithm. Not in mode "env": measured on MPICH 5.0.2, with the
algorithm forced through the environment its shared-memory layer reports the algorithm as unusable
after a few calls even where it runs fine (docs/bench.md).

Points are ordered size by size with every algorithm of a size next to each other, so that in "mpit"
mode candidates are compared within one process, seconds apart.

Non-blocking collectives (collectives.NONBLOCKING) are points like the others; what their stored time is
depends on the point's objective (collectives.OBJECTIVES, `figure_request` / `figure_samples`): the pure time
(start + MPI_Wait: latency), start + a computation of the point's `compute_us` + MPI_Wait (time), or the time not
hidden behind a computation as long as the point's own latency (overlap). With `overlap` (bench --overlap), the
engine also measures each of them with a computation between start and wait (protocol.NB_OVERLAP); the
overlap figures come back in the outcome's reply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tunempi.bench.engine import EngineSession, Layout, PointOutcome
from tunempi.bench.protocol import (
    NB_OVERLAP,
    NB_TIME,
    SET_DEFAULT,
    SET_KEEP,
    MeasureSettings,
    PointReply,
    PointRequest,
)
from tunempi.bench.stats import summarize
from tunempi.bench.validate import check_size
from tunempi.collectives import (
    DEFAULT_ALGORITHM,
    DEFAULT_DISTRIBUTION,
    DISTRIBUTIONS,
    LATENCY_OBJECTIVE,
    OBJECTIVES,
    VECTOR_COLLECTIVES,
    is_nonblocking,
)
from tunempi.errors import TunempiError, UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import VendorAdapter
from tunempi.store.results import Measurement, PointKey, ResultStore

MODES: tuple[str, ...] = ("mpit", "env")

#: A point whose median is this many times its minimum (and over CONTENTION_MIN_US above it) was mostly
#: measured while ranks were descheduled by other work on the node: MPICH busy-polls, and on a shared
#: 2-core machine its iterations then take whole 4-8 ms scheduler ticks (docs/bench.md). Such a point is
#: measured again (up to `retries` times) and the attempt with the lowest median is kept: interference
#: only ever adds time.
CONTENTION_RATIO = 20.0
CONTENTION_MIN_US = 200.0


def contended(outcome: PointOutcome) -> bool:
    stats = outcome.statistics
    return (
        outcome.ok and stats is not None and stats.median_us > CONTENTION_RATIO * stats.min_us
        and stats.median_us - stats.min_us > CONTENTION_MIN_US
    )


@dataclass(frozen=True)
class BenchPoint:
    """One repetition of one point of a sweep (the layout is the sweep's)."""

    collective: str
    algorithm: str  # the library's own name, or "default" for the library's own choice
    msg_bytes: int
    run: int = 0
    distribution: str = DEFAULT_DISTRIBUTION  # a vector collective's blocks across ranks (collectives.DISTRIBUTIONS)
    #: What is measured (collectives.OBJECTIVES; a blocking collective's is always latency) and, for `time`,
    #: the computation between start and wait in microseconds (the same for every algorithm of a cell).
    objective: str = LATENCY_OBJECTIVE
    compute_us: float | None = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise UsageError(f"unknown objective {self.objective!r}; valid: {', '.join(OBJECTIVES)}")
        if self.objective != LATENCY_OBJECTIVE and not is_nonblocking(self.collective):
            raise UsageError(f"objective {self.objective} applies to non-blocking collectives, not {self.collective}")
        if (self.objective == NB_TIME) != (self.compute_us is not None):
            raise UsageError("objective time needs the computation's length (compute_us), the others none")


def figure_request(point: BenchPoint, nb: str = "") -> tuple[str, float | None]:
    """The engine's `nb=` mode and computation (seconds) that measure `point`'s objective: time -> nb=time with
    the point's computation; overlap -> nb=overlap (its own latency, then the computation as long as it);
    latency -> `nb` as the caller asks (bench --overlap adds the overlap phase to latency points)."""
    if point.objective == NB_TIME:
        assert point.compute_us is not None
        return NB_TIME, point.compute_us / 1e6
    if point.objective == NB_OVERLAP:
        return NB_OVERLAP, None
    return nb, None


def computations(store: ResultStore, fingerprint: str, layout: Layout, cells: Iterable[tuple[str, int]], *,
                 system: str = "") -> dict[tuple[str, int], float]:
    """(collective, msg_bytes) -> the computation (us) that `time` points of that cell at `layout` were measured
    with, for the cells in `cells` the store has such points of (the latest): a cell keeps its computation
    across runs, so its stored time figures are all on the same work."""
    wanted = set(cells)
    found: dict[tuple[str, int], float] = {}
    for m in store.iter_measurements(library_fingerprint=fingerprint, system=system, objective=NB_TIME, status="ok",
                                     ranks=layout.ranks, nodes=layout.nodes, ppn=layout.ppn_or_derived,
                                     collective=sorted({c for c, _ in wanted})):
        if (m.collective, m.msg_bytes) in wanted and m.compute_us is not None:
            found[(m.collective, m.msg_bytes)] = m.compute_us
    return found


def figure_samples(reply: PointReply, objective: str) -> tuple[float, ...]:
    """The per-iteration figures a point of `objective` is judged by, smaller is better: the time of each
    iteration (latency: start + wait; time: start + computation + wait), or for overlap the time each iteration
    did NOT hide behind its computation (overlapped - computation, the slowest rank's of each)."""
    return reply.unhidden_samples_us if objective == NB_OVERLAP else reply.samples_us


def plan_points(
    algorithms: Mapping[str, Sequence[str]], sizes: Sequence[int], *, ranks: int, repeat: int = 1,
    distributions: Sequence[str] = (DEFAULT_DISTRIBUTION,),
) -> list[BenchPoint]:
    """Every point of a sweep: for each repetition, collective, size and distribution, every algorithm.

    algorithms: collective -> validated algorithm names. Barrier moves no data and gets the one size 0.
    Sizes that a collective cannot take raise UsageError (see validate.size_problem). `distributions` apply
    to the vector collectives (collectives.VECTOR_COLLECTIVES); the others are measured uniform only.
    """
    for distribution in distributions:
        if distribution not in DISTRIBUTIONS:
            raise UsageError(f"unknown count distribution {distribution!r}; valid: {', '.join(DISTRIBUTIONS)}")
    if repeat < 1:
        raise UsageError(f"repeat must be at least 1, got {repeat}")
    points: list[BenchPoint] = []
    for run in range(repeat):
        for collective, names in algorithms.items():
            for size in [0] if collective == "barrier" else sizes:
                check_size(collective, size, ranks)
                shapes = distributions if collective in VECTOR_COLLECTIVES else (DEFAULT_DISTRIBUTION,)
                for distribution in dict.fromkeys(shapes):
                    points.extend(BenchPoint(collective, name, size, run, distribution) for name in names)
    return points


@dataclass(frozen=True)
class Selection:
    """How one point's algorithm is selected: the cvar to write/read back, and the launch environment."""

    cvar: str | None
    set_value: int | str
    new_communicator: bool
    env: Mapping[str, str] = field(default_factory=dict)
    expected_value: int | None = None  # what the cvar must read back as (None: not checked)
    #: Further (cvar, int) writes made with the point's (CvarSwitch.also: MPICH's shared-memory level
    #: pinned to "mpir" beside a forced algorithm), undone by the next point that does not make them.
    also: tuple[tuple[str, int], ...] = ()


def selection_for(adapter: VendorAdapter, point: BenchPoint, mode: str) -> Selection:
    """The cvar write (mode "mpit") or environment (mode "env") that selects `point.algorithm`."""
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    collective = point.collective
    if not adapter.switches_at_run_time():
        # The library reads its choice at MPI_Init only (Intel MPI): every algorithm is forced through the
        # environment of its own launch, in both modes; there is no cvar that reads back the choice.
        name = adapter.default_name() if point.algorithm == DEFAULT_ALGORITHM else point.algorithm
        return Selection(None, SET_KEEP, False, adapter.force_env(collective, name))
    if not adapter.switches_collective_at_run_time(collective):
        # The library switches other collectives at run time, not this one (Open MPI 5.0.11's allgatherv
        # cvar is a constant to MPI_T): forced per launch as in mode "env", its cvar still read back.
        mode = "env"
    if point.algorithm == DEFAULT_ALGORITHM:
        try:  # the cvar is only read back for the library's own choice
            switch = adapter.runtime_switch(collective, adapter.default_name())
        except TunempiError:
            switch = None
        if switch is None:
            return Selection(None, SET_KEEP, False)
        if mode == "mpit":
            return Selection(switch.cvar, SET_DEFAULT, switch.needs_new_communicator)
        return Selection(switch.cvar, SET_KEEP, False)
    expected = adapter.check_algorithm(collective, point.algorithm).value
    switch = adapter.runtime_switch(collective, point.algorithm)
    if mode == "mpit":
        # The further writes go with the point, not with its launch: the default and every contender of a
        # cell are then measured in one launch, so a launch that favours one side cannot decide (issue 39).
        return Selection(switch.cvar, switch.value, switch.needs_new_communicator, expected_value=expected,
                         also=switch.also)
    return Selection(switch.cvar, SET_KEEP, False, adapter.force_env(collective, point.algorithm), expected)


def to_measurement(
    library: MPILibrary, layout: Layout, point: BenchPoint, outcome: PointOutcome, *, system: str = ""
) -> Measurement:
    stats = outcome.statistics if outcome.ok else None
    reply = outcome.reply
    return Measurement(
        library_fingerprint=library.fingerprint, library=library.name, collective=point.collective,
        algorithm=point.algorithm, ranks=layout.ranks, msg_bytes=point.msg_bytes, nodes=layout.nodes,
        ppn=layout.ppn_or_derived, run=point.run, distribution=point.distribution, objective=point.objective,
        compute_us=point.compute_us,
        status=outcome.status,
        reason=outcome.reason,
        median_us=stats.median_us if stats else None, min_us=stats.min_us if stats else None,
        p90_us=stats.p90_us if stats else None, mean_us=stats.mean_us if stats else None,
        ci_low_us=stats.ci_low_us if stats else None, ci_high_us=stats.ci_high_us if stats else None,
        iterations=stats.iterations if stats else None, errors=reply.errors if reply and reply.ok else 0,
        hosts=outcome.hosts, launch_argv=outcome.launch_argv, env=dict(outcome.env), system=system,
        run_s=outcome.run_s or None,
    )


OnResult = Callable[[BenchPoint, PointOutcome, Measurement], None]


class Sweep:
    """Runs points of one library and layout through the engine, writing each result as it arrives.

    store: where results go (None: nowhere; the measurements are still returned). Points already in
    the store (status ok) are skipped by `pending` unless force.
    """

    def __init__(
        self,
        library: MPILibrary,
        adapter: VendorAdapter,
        layout: Layout,
        *,
        mode: str = "mpit",
        settings: MeasureSettings | None = None,
        store: ResultStore | None = None,
        system: str = "",
        allocation: NodeAllocation | None = None,
        bind: str | None = "auto",
        executable: Path | None = None,
        point_timeout_s: float | None = None,
        strict: bool = True,
        retries: int = 2,
        overlap: bool = False,
    ) -> None:
        if mode not in MODES:
            raise UsageError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        self.library = library
        self.adapter = adapter
        self.layout = layout
        self.mode = mode
        self.settings = settings or MeasureSettings()
        self.store = store
        self.system = system
        self.allocation = allocation
        self.bind = bind
        self.executable = executable
        self.point_timeout_s = point_timeout_s
        self.strict = strict and mode == "mpit"
        self.retries = retries
        self.overlap = overlap  # non-blocking collectives: measure the overlap too (protocol.NB_OVERLAP)
        self.launches = 0
        self._next_id = 0

    def key(self, point: BenchPoint) -> PointKey:
        return PointKey(
            point.collective, point.algorithm, self.layout.ranks, self.layout.nodes,
            self.layout.ppn_or_derived, point.msg_bytes, point.run, point.distribution, point.objective,
        )

    def pending(self, points: Iterable[BenchPoint], *, force: bool = False) -> list[BenchPoint]:
        """The points still to measure: all when force or without a store, else those not stored as ok."""
        points = list(points)
        if force or self.store is None:
            return points
        done = self.store.measured_points(
            self.library.fingerprint, system=self.system, ranks=self.layout.ranks, nodes=self.layout.nodes,
            ppn=self.layout.ppn_or_derived,
        )
        return [p for p in points if self.key(p) not in done]

    def run(self, points: Sequence[BenchPoint], on_result: OnResult | None = None) -> list[Measurement]:
        """Measure `points` (in "env" mode grouped into one launch per collective and algorithm)."""
        base_env = dict(self.adapter.launch_env())
        if self.layout.nodes == 1 and self.allocation is None:
            base_env.update(self.adapter.single_node_env())  # faster start-up, same collectives
        strict = self.adapter.strict_selection_switch() if self.strict else None
        groups: dict[tuple[str, ...], list[tuple[BenchPoint, Selection]]] = {}
        for point in points:
            selection = selection_for(self.adapter, point, self.mode)
            launch_key = tuple(sorted(f"{k}={v}" for k, v in selection.env.items()))
            groups.setdefault(launch_key, []).append((point, selection))
        measurements: list[Measurement] = []
        for group in groups.values():
            env = {**base_env, **group[0][1].env}
            session = EngineSession(
                self.library, self.layout, env=env, setup=(strict,) if strict is not None else (),
                executable=self.executable, allocation=self.allocation,
                bind=self.bind, point_timeout_s=self.point_timeout_s,
            )
            try:
                with session:
                    for point, selection in group:
                        outcome = self._measure(session, point, selection)
                        measurement = to_measurement(self.library, self.layout, point, outcome, system=self.system)
                        if self.store is not None:
                            self.store.add(measurement)
                        measurements.append(measurement)
                        if on_result is not None:
                            on_result(point, outcome, measurement)
            finally:
                self.launches += session.launches
        return measurements

    def _measure(self, session: EngineSession, point: BenchPoint, selection: Selection) -> PointOutcome:
        return measure_point(session, point, selection, self.settings, next_id=self._take_id, retries=self.retries,
                             says_not_usable=self.adapter.says_not_usable,
                             nb=NB_OVERLAP if self.overlap and is_nonblocking(point.collective) else "")

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id


def measure_point(
    session: EngineSession,
    point: BenchPoint,
    selection: Selection,
    settings: MeasureSettings,
    *,
    next_id: Callable[[], int],
    retries: int,
    says_not_usable: Callable[[str], bool],
    nb: str = "",
) -> PointOutcome:
    """One point as every caller measures it (bench's Sweep, tune's runner): the request, the checks that
    the algorithm asked for really ran, and up to `retries` re-measurements of a disturbed point, the
    attempt with the lowest median kept and noted in `reason`. A failure the library states as "not usable
    for this call" (`says_not_usable`, the adapter's) is marked `not_usable`."""
    outcome = _measure_once(session, point, selection, settings, next_id(), nb)
    if not outcome.ok:
        return replace(outcome, not_usable=says_not_usable(outcome.reason))
    attempts, run_s = 1, outcome.run_s
    while attempts <= retries and contended(outcome):
        again = _measure_once(session, point, selection, settings, next_id(), nb)
        attempts += 1
        run_s += again.run_s  # the point cost every attempt
        if not again.ok:
            break
        assert again.statistics is not None and outcome.statistics is not None
        if again.statistics.median_us < outcome.statistics.median_us:
            outcome = again
    outcome = replace(outcome, run_s=run_s)
    if attempts > 1 and outcome.statistics is not None:
        stats = outcome.statistics
        note = (f"best of {attempts} attempts (others disturbed); kept median {stats.median_us:.2f} us, "
                f"min {stats.min_us:.2f} us")
        outcome = replace(outcome, reason=note)
    return outcome


def _measure_once(session: EngineSession, point: BenchPoint, selection: Selection, settings: MeasureSettings,
                  request_id: int, nb: str = "") -> PointOutcome:
    mode, compute_s = figure_request(point, nb)
    request = PointRequest(
        id=request_id, collective=point.collective, msg_bytes=point.msg_bytes, cvar=selection.cvar,
        set_value=selection.set_value, new_communicator=selection.new_communicator, also=selection.also,
        settings=settings,
        distribution=point.distribution, nb=mode, compute_s=compute_s,
    )
    outcome = session.measure(request)
    reply = outcome.reply
    if outcome.ok and reply is not None and point.objective == NB_OVERLAP:
        samples = figure_samples(reply, point.objective)
        if not samples:
            return _failed(outcome, "the overlap phase measured no iteration")
        outcome = replace(outcome, statistics=summarize(samples))
    if outcome.ok and reply is not None:
        if not reply.cvar_consistent:
            return _failed(outcome, f"ranks disagree on {reply.cvar}")
        if selection.expected_value is not None and reply.cvar_value != selection.expected_value:
            return _failed(
                outcome,
                f"{point.algorithm} not selected: {reply.cvar} reads {reply.cvar_value}, "
                f"expected {selection.expected_value}",
            )
    return outcome


def _failed(outcome: PointOutcome, reason: str) -> PointOutcome:
    return PointOutcome(
        request=outcome.request, status="failed", reason=reason, reply=outcome.reply,
        hosts=outcome.hosts, launch_argv=outcome.launch_argv, env=outcome.env,
    )
