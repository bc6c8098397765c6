"""`tunempi bench` as a library call: validate, sweep the points not measured yet into the store, summarise.

Progress goes to a BenchListener (the CLI draws a bar from it); the result is a BenchReport. Nothing here
prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tunempi.bench.engine import Layout, PointOutcome
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.summary import FastestRow, fastest_table
from tunempi.bench.sweep import MODES, BenchPoint, Sweep, computations, plan_points
from tunempi.bench.validate import check_engine_collective, check_ranks, check_size, parse_algorithms
from tunempi.collectives import (
    DEFAULT_ALGORITHM,
    DEFAULT_DISTRIBUTION,
    DISTRIBUTIONS,
    LATENCY_OBJECTIVE,
    NONBLOCKING,
    VECTOR_COLLECTIVES,
    check_objective,
    is_nonblocking,
    objective_of,
)
from tunempi.config import resolve_db
from tunempi.errors import UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.launch.launchers import BINDINGS
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.store.results import Measurement, ResultStore
from tunempi.units import parse_sizes

DEFAULT_SIZES = "8,1KiB,64KiB,1MiB"
BIND_CHOICES: tuple[str, ...] = ("auto", *BINDINGS)


@dataclass(frozen=True)
class BenchOptions:
    """Everything `tunempi bench` was asked to do, as given (validated by run_bench)."""

    mpi: str | None = None
    collectives: str = "allreduce"
    algorithms: str = "all"
    sizes: str = DEFAULT_SIZES
    ranks: int | None = None
    nodes: int | None = None
    ppn: int | None = None
    repeat: int = 1
    db: str | None = None
    force: bool = False
    mode: str = "mpit"
    settings: MeasureSettings = MeasureSettings()
    point_timeout_s: float | None = None
    bind: str = "auto"
    strict: bool = True
    hostfile: str | None = None
    distributions: str = DEFAULT_DISTRIBUTION  # comma list, for the vector collectives
    #: Non-blocking collectives: measure the overlap too (OSU's method, protocol.NB_OVERLAP). Its figures are
    #: not stored, so every non-blocking point is measured again (its pure time replaces the stored one).
    overlap: bool = False
    #: What a non-blocking collective's point measures (collectives.OBJECTIVES): latency (bench's default:
    #: start + wait, OSU's pure time), time (start + a computation as long as the default's latency at that
    #: size + wait, the same for every algorithm) or overlap (the time not hidden behind a computation as long
    #: as the point's own latency). Blocking collectives ignore it.
    objective: str = LATENCY_OBJECTIVE


@dataclass(frozen=True)
class BenchPlan:
    """What the sweep will do: `points` asked for, `todo` of them not in the store yet."""

    library: MPILibrary
    layout: Layout
    mode: str
    db: Path
    points: list[BenchPoint]
    todo: list[BenchPoint]


class BenchListener:
    """Progress of `run_bench`; every method does nothing here (a front end overrides what it shows)."""

    def started(self, plan: BenchPlan) -> None:
        """The options are checked and the library found; measuring starts."""

    def measured(self, point: BenchPoint, outcome: PointOutcome, measurement: Measurement) -> None:
        """One point done (failed, wrong results, or measured)."""


@dataclass(frozen=True)
class OverlapRow:
    """One non-blocking point measured with --overlap (medians over iterations, microseconds)."""

    collective: str
    algorithm: str
    msg_bytes: int
    run: int
    pure_us: float  # start + MPI_Wait alone (each iteration's slowest rank)
    overlapped_us: float  # start + a computation + MPI_Wait (each iteration's slowest rank)
    compute_us: float  # the computation alone (each rank computes for its own pure time)
    overlap_pct: float  # the mean over ranks of each rank's own share of its pure time hidden (0-100)
    # Each rank's own share, by rank: the peers aggregate differently (OSU averages over ranks, IMB-NBC prints
    # the rank with the longest overlapped time), and at a rooted collective the ranks differ by tens of points.
    overlap_pct_ranks: tuple[float, ...] = ()


@dataclass
class BenchReport:
    plan: BenchPlan
    rows: list[FastestRow]  # the fastest algorithm per (collective, size), from the store
    overlap: list[OverlapRow] = field(default_factory=list)  # this run's overlap points (with --overlap)
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "wrong": 0, "failed": 0})  # this run
    launches: int = 0
    interrupted: bool = False


def check_layout(options: BenchOptions) -> Layout:
    ranks = options.ranks
    if ranks is None:
        ranks = options.nodes * options.ppn if options.nodes and options.ppn else 2
    check_ranks(ranks)
    if options.nodes is not None and options.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {options.nodes}")
    if options.ppn is not None and options.ppn < 1:
        raise UsageError(f"--ppn must be at least 1, got {options.ppn}")
    if options.nodes is not None and options.ppn is not None and ranks > options.nodes * options.ppn:
        raise UsageError(f"{ranks} ranks do not fit on {options.nodes} node(s) x {options.ppn} per node")
    return Layout(ranks=ranks, nodes=options.nodes or 1, ppn=options.ppn)


def _allocation(options: BenchOptions, layout: Layout) -> NodeAllocation | None:
    allocation = (
        NodeAllocation.given_or_found(options.hostfile) if options.hostfile or layout.nodes > 1 else None
    )
    if layout.nodes > 1 and allocation is None:
        raise UsageError(
            f"--nodes {layout.nodes} needs a host list: run inside a Slurm or PBS job, or give --hostfile"
        )
    if allocation is not None and layout.nodes > allocation.nodes:
        raise UsageError(f"--nodes {layout.nodes} but the allocation has {allocation.nodes} node(s)")
    return allocation


def run_bench(options: BenchOptions, listener: BenchListener | None = None) -> BenchReport:
    """Validate (everything typed is checked before a library is probed or launched), sweep the points
    not measured yet (each stored as it arrives), and summarise the fastest algorithms from the store.

    Ctrl-C stops the sweep; what was measured is kept and summarised, and the report says `interrupted`.
    """
    listener = listener or BenchListener()
    if options.mode not in MODES:
        raise UsageError(f"unknown --mode {options.mode!r}; valid: {', '.join(MODES)}")
    if options.bind not in BIND_CHOICES:
        raise UsageError(f"unknown --bind {options.bind!r}; valid: {', '.join(BIND_CHOICES)}")
    if options.repeat < 1:
        raise UsageError(f"--repeat must be at least 1, got {options.repeat}")
    collectives = [check_engine_collective(c) for c in options.collectives.split(",") if c.strip()]
    if not collectives:
        raise UsageError(f"no collectives in {options.collectives!r}")
    sizes = parse_sizes(options.sizes)
    distributions = [d.strip() for d in options.distributions.split(",") if d.strip()] or [DEFAULT_DISTRIBUTION]
    for distribution in distributions:
        if distribution not in DISTRIBUTIONS:
            raise UsageError(f"unknown --distributions {distribution!r}; valid: {', '.join(DISTRIBUTIONS)}")
    objective = check_objective(options.objective, collectives)
    if options.overlap and objective == "time":
        raise UsageError("--overlap measures OSU's overlap phase beside the latency: not with --objective time")
    if options.overlap and not any(is_nonblocking(c) for c in collectives):
        raise UsageError(f"--overlap applies to the non-blocking collectives only ({', '.join(NONBLOCKING)}); "
                         f"none is among {', '.join(collectives)}")
    if distributions != [DEFAULT_DISTRIBUTION] and not VECTOR_COLLECTIVES & set(collectives):
        raise UsageError(f"--distributions {options.distributions} applies to the vector collectives only "
                         f"({', '.join(sorted(VECTOR_COLLECTIVES))}); none is among {', '.join(collectives)}")
    layout = check_layout(options)
    for collective in collectives:
        for size in [] if collective == "barrier" else sizes:
            check_size(collective, size, layout.ranks)
    allocation = _allocation(options, layout)
    library = resolve_library(options.mpi)
    adapter = adapter_for(library)
    algorithms = {c: parse_algorithms(adapter, c, options.algorithms) for c in dict.fromkeys(collectives)}
    points = plan_points(algorithms, sizes, ranks=layout.ranks, repeat=options.repeat, distributions=distributions)
    db_path = resolve_db(options.db)

    with ResultStore(db_path) as store:
        sweep = Sweep(
            library, adapter, layout, mode=options.mode, settings=options.settings, store=store,
            allocation=allocation, bind=options.bind,
            point_timeout_s=options.point_timeout_s, strict=options.strict, overlap=options.overlap,
        )
        if objective == "time":
            points = _timed_points(sweep, store, points)
        else:
            points = [replace(p, objective=objective_of(p.collective, objective)) for p in points]
        pending = set(sweep.pending(points, force=options.force))
        todo = [p for p in points if p in pending or (options.overlap and is_nonblocking(p.collective))]
        plan = BenchPlan(library, layout, options.mode, db_path, points, todo)
        listener.started(plan)
        report = BenchReport(plan, [])

        def on_result(point: BenchPoint, outcome: PointOutcome, measurement: Measurement) -> None:
            if not outcome.ok:
                # A library that refuses an algorithm for a call is not a failure of the run.
                kind = "not usable" if outcome.not_usable else "failed"
            else:
                kind = "wrong" if measurement.errors else "ok"
            report.counts[kind] = report.counts.get(kind, 0) + 1
            reply = outcome.reply
            if (outcome.ok and reply is not None and reply.overlap_pct is not None and reply.median_us is not None
                    and reply.overlapped_us is not None and reply.compute_us is not None):
                report.overlap.append(OverlapRow(
                    point.collective, point.algorithm, point.msg_bytes, point.run, reply.median_us,
                    reply.overlapped_us, reply.compute_us, reply.overlap_pct, tuple(reply.overlap_pct_ranks)))
            listener.measured(point, outcome, measurement)

        try:
            if plan.todo:
                sweep.run(plan.todo, on_result)
        except KeyboardInterrupt:
            report.interrupted = True
        report.launches = sweep.launches
        measured = store.query(
            library_fingerprint=library.fingerprint, system=sweep.system, ranks=layout.ranks,
            nodes=layout.nodes, ppn=layout.ppn_or_derived, collective=list(algorithms),
            msg_bytes=sorted({p.msg_bytes for p in points}),
        )
    wanted = {(p.collective, p.algorithm, p.msg_bytes, p.run, p.distribution, p.objective) for p in points}
    report.rows = fastest_table(m for m in measured
                                if (m.collective, m.algorithm, m.msg_bytes, m.run, m.distribution, m.objective)
                                in wanted)
    return report


def _timed_points(sweep: Sweep, store: ResultStore, points: Sequence[BenchPoint]) -> list[BenchPoint]:
    """`points` with the non-blocking ones measured for `time`: each (collective, size) with the computation
    its earlier time points had (sweep.computations), else the median of the library default's latency there,
    measured now (stored as a latency point) unless stored already."""
    cells = sorted({(p.collective, p.msg_bytes) for p in points if is_nonblocking(p.collective)})
    compute = computations(store, sweep.library.fingerprint, sweep.layout, cells, system=sweep.system)
    missing = [c for c in cells if c not in compute]
    if missing:
        latency = [BenchPoint(c, DEFAULT_ALGORITHM, size) for c, size in missing]
        todo = sweep.pending(latency)
        if todo:
            sweep.run(todo)
        for m in store.iter_measurements(library_fingerprint=sweep.library.fingerprint, system=sweep.system,
                                         objective=LATENCY_OBJECTIVE, algorithm=DEFAULT_ALGORITHM, status="ok",
                                         ranks=sweep.layout.ranks, nodes=sweep.layout.nodes,
                                         ppn=sweep.layout.ppn_or_derived, distribution=DEFAULT_DISTRIBUTION,
                                         collective=sorted({c for c, _ in missing})):
            if (m.collective, m.msg_bytes) in missing and m.median_us is not None and not m.errors:
                compute[(m.collective, m.msg_bytes)] = m.median_us  # the latest run's
    unknown = [f"{c} {size}" for c, size in missing if (c, size) not in compute]
    if unknown:
        raise UsageError(f"--objective time: the library's default failed at {', '.join(unknown)}, so there is no "
                         "latency to size the computation by")
    return [replace(p, objective="time", compute_us=round(compute[(p.collective, p.msg_bytes)], 3))
            if is_nonblocking(p.collective) else p for p in points]
