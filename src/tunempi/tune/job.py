"""`tunempi tune` as a library call: validate, tune, write the files, smoke-check them, write the manifest.

`run_tune` returns data (TuneReport) and reports progress as events (TuneStarted, PointMeasured, RoundDone,
TuningStopped, WritingFiles, FilesWritten; where a layout spans nodes MeasuringCompositions,
CompositionsMeasured, CompositionsWritten) to a callback; the CLI (cli/tune.py) renders them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from tunempi.bench.engine import EngineSession, Layout, launches_timed
from tunempi.bench.protocol import MeasureSettings, PointRequest
from tunempi.bench.sweep import BenchPoint
from tunempi.bench.validate import check_engine_collective
from tunempi.collectives import (
    DEFAULT_ALGORITHM,
    DEFAULT_DISTRIBUTION,
    DEFAULT_OBJECTIVE,
    LATENCY_OBJECTIVE,
    check_distributions,
    check_objective,
    is_nonblocking,
    parse_collectives,
)
from tunempi.errors import MPIError, TuningFileError, UsageError
from tunempi.launch.hosts import NodeAllocation, emulated_here, local_cores
from tunempi.launch.scheduler import SCHEDULING_MODES, GroupScheduler
from tunempi.launch.topology import group_nodes, read_group_file, slurm_topology
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import FileAlgorithms, VendorAdapter
from tunempi.rules import RuleSet
from tunempi.space import Cell, FeatureSpace
from tunempi.store.fits import add_fits, recorded_fits
from tunempi.store.launches import add_launches, launch_seconds
from tunempi.store.results import Measurement, ResultStore, utc_timestamp
from tunempi.strategy import DEFAULT_STRATEGY, STRATEGIES, import_strategies, make_strategy
from tunempi.tune.compositions import (
    COMPOSITION_MARGIN,
    CompositionResult,
    choose_compositions,
    measure_compositions,
    write_composition_choices,
)
from tunempi.tune.driver import (
    DEFAULT_LAUNCHES,
    DEFAULT_MARGIN,
    CurvePoint,
    TuneOutcome,
    Tuner,
    check_evidence,
    prefer_default,
    records_from_store,
)
from tunempi.tune.file_launches import FileDecider, decided_under_files
from tunempi.tune.files import (
    WrittenFiles,
    files_rule_sets,
    one_choice_per_scale,
    whole_collectives,
    write_tuning_files,
)
from tunempi.tune.manifest import (
    CompositionRecord,
    CompositionsRecord,
    CurveRecord,
    LibraryRecord,
    Manifest,
    RunRecord,
    SelectionRow,
)
from tunempi.tune.objective import (
    DEFAULT_LATENCY_SOURCE,
    STORED_SOURCE,
    TIME,
    ApplicationComputation,
    Figures,
    application_lengths,
    capped_computation,
    compute_lengths,
)
from tunempi.tune.plan import (
    ENGINE_START_S_BY_VENDOR,
    FILES_S,
    SMOKE_S_PER_SIZE,
    PlanRecord,
    PointCosts,
    Prediction,
    compositions_s,
    costs_from_measurements,
    predict,
    replayable,
)
from tunempi.tune.runner import LayoutRunner, ParallelRunner, PointResult
from tunempi.tune.scope import Scale, candidate_algorithms, feature_space, message_sizes, sub_scales

#: Strategy parameters for live tuning (the strategies' own defaults suit replayed datasets): batches of
#: 32 cells (each ask refits the models: fewer rounds, less model time per measured run), a regret
#: tolerance of 5 % and contention at P(best) >= 0.3 (a shared node's run-to-run noise is several %:
#: below that the strategy chases noise and measures nearly every point), one run per algorithm and cell
#: (near-ties are what `verify` is for; the driver's confirmation round measures `default` and the choice
#: wherever the selection overrides the library). Measured with bench/tune_vs_exhaustive.py (docs/tune.md):
#: Open MPI 4 ranks 1854-1959 runs of 2232 with (16, 3 %, 1, 0.05), 641-1094 with these.
LIVE_STRATEGY_PARAMS: dict[str, dict[str, object]] = {
    "tunempi": {"batch_size": 32, "regret_tolerance": 0.05, "max_repeats": 1, "contention": 0.3},
}

#: What tune measures per point by default: short (a strategy measures many points, and again where close).
TUNE_SETTINGS = MeasureSettings(warmup=64, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.1)


@dataclass(frozen=True)
class TuneOptions:
    """Everything `tunempi tune` was asked (sizes in bytes, durations in seconds)."""

    out: Path
    collectives: str = "allreduce,bcast,allgather,alltoall"
    mpi: str | None = None
    nodes: int = 1
    ppn: int | None = None
    ranks: int | None = None
    hostfile: Path | None = None  # the hosts of a multi-node tune (default: Slurm, PBS or TUNEMPI_HOSTFILE)
    max_msg: int = 1 << 20
    min_msg: int = 4
    strategy: str = DEFAULT_STRATEGY
    seed: int = 0
    timeout_s: float | None = 600.0
    topology: str = "serial"
    db: Path | None = None
    settings: MeasureSettings = TUNE_SETTINGS
    point_timeout_s: float | None = None
    smoke: bool = True
    system: str = ""
    strategy_params: dict[str, object] = field(default_factory=dict)
    lanes: int = 0  # collectives' turns on the engine (one measured while the others' models fit); 0: auto_lanes
    #: Threads the model's linear algebra may use (BLAS, OpenMP); 0: `model_threads`, -1: the libraries' own.
    model_threads: int = 0
    #: End the tune where another round would cost more than measuring every point once (tune/guard.py).
    exhaustive_guard: bool = True
    #: Launches a cell's contenders are measured in before an override is written (tune/launch_blocks.py;
    #: 1: the exploring launch alone).
    launches: int = DEFAULT_LAUNCHES
    #: Requirements the user vouches every call meets (e.g. mpi.restrictions.DATATYPE_REQUIREMENTS for an
    #: application that passes no derived datatypes to collectives): the files may then select algorithms
    #: that need them. Recorded in the manifest; `report` and `run` say so.
    assume: tuple[str, ...] = ()
    #: The tune's clock (the timeout and the guard read it); None: time.monotonic. Tests pass their own.
    clock: Callable[[], float] | None = None
    #: What is minimised for a non-blocking collective (collectives.OBJECTIVES: time, latency, overlap;
    #: tune/objective.py). Recorded in the manifest (with time's computations): verify compares under it.
    objective: str = DEFAULT_OBJECTIVE
    #: Where `objective` came from (recorded in the manifest): "--objective", "profile PATH", "default"; "": not said.
    objective_from: str = ""
    #: The application's own computations between start and wait, from its profile (`tune --from-profile`,
    #: autotune): under `time`, the non-blocking cells of their collectives are measured with them instead of
    #: the library default's latency (tune/objective.py `application_lengths`).
    computations: tuple[ApplicationComputation, ...] = ()
    #: Vector collective -> how its blocks differ between ranks around the mean block (collectives.DISTRIBUTIONS:
    #: uniform where absent): `tune --distribution`, so an application whose counts are skewed is measured
    #: skewed (the profile records only each rank's mean block so far: --from-profile cannot pass one yet).
    #: Every point tune and verify measure of it has that distribution (a key of the store's points).
    distributions: Mapping[str, str] = field(default_factory=dict)


def spare_cores(scales: list[Scale], cpus: int | None = None) -> int:
    """Cores of this node (`cpus`, else the affinity mask) beyond the most ranks a benchmark puts on it."""
    cpus = cpus if cpus is not None else local_cores()
    return cpus - (max(s.ppn for s in scales) if scales else 1)


def auto_lanes(scales: list[Scale], cpus: int | None = None) -> int:
    """2 (fit the models of some collectives while the others are measured) when this node has a core
    to spare beyond the most ranks a benchmark puts on it, else 1. Measured on a 2-core node with 2
    MPICH ranks: the model thread beside the busy-polling ranks made every run cost 4x (scheduler
    stalls, contended runs measured again), far more than the model time it hid."""
    return 2 if spare_cores(scales, cpus) > 0 else 1


def model_threads(scales: list[Scale], cpus: int | None = None) -> int:
    """The cores this node has beyond the most ranks a benchmark puts on it, at least 1: the threads the
    models' linear algebra may use. With the libraries' own choice (a thread per core) the threads they leave
    spinning after a fit share the cores with the ranks that measure next: tunes on this 2-core machine with
    2 MPICH ranks moved a cell's block value from the exploring launch to a fresh one by a standard deviation
    of 0.43-0.58 (log), 0.16-0.23 with one thread, and one tune in four decided almost nothing
    (docs/measurements/tune.md "One thread for the model"; the script is in git history)."""
    return max(1, spare_cores(scales, cpus))


def scheduling(topology: str, allocation: NodeAllocation | None) -> GroupScheduler:
    """--topology: serial | local | slurm (leaf switches of `scontrol show topology`) | pattern:REGEX
    (groups from node names) | FILE (`node group` lines)."""
    hosts = allocation.hosts if allocation is not None else ("localhost",)
    if topology in ("serial", "local"):
        return GroupScheduler(group_nodes(hosts), topology)
    if topology == "slurm":
        return GroupScheduler(group_nodes(hosts, mapping=slurm_topology()), "topology")
    if topology.startswith("pattern:"):
        return GroupScheduler(group_nodes(hosts, pattern=topology[len("pattern:"):]), "topology")
    if Path(topology).is_file():
        return GroupScheduler(group_nodes(hosts, mapping=read_group_file(topology)), "topology")
    raise UsageError(f"unknown --topology {topology!r}; valid: serial, local, slurm, pattern:REGEX, or a file of "
                     f"'node group' lines (modes: {', '.join(SCHEDULING_MODES)})")


@dataclass
class TuneReport:
    manifest: Manifest | None  # None when interrupted (no file written)
    outcome: TuneOutcome
    spaces: dict[str, FeatureSpace]


# -- progress: what `run_tune` reports while it works (the CLI renders it) ----------------------------------


@dataclass(frozen=True)
class TuneStarted:
    """The plan: what will be tuned, where, and what no tuning file of the library can select."""

    library: MPILibrary
    collectives: tuple[str, ...]
    scales: tuple[Scale, ...]
    sizes: tuple[int, ...]
    cells: int
    exhaustive_points: int
    strategy: str
    topology: str
    db: Path
    resumed: int  # runs of these points read back from the store
    excluded: Mapping[str, Mapping[str, str]]  # collective -> algorithm -> why no tuning file can select it
    distributions: Mapping[str, str] = field(default_factory=dict)  # vector collectives measured not uniform
    objective: str = LATENCY_OBJECTIVE  # what the non-blocking collectives are measured for (--objective)
    computations: int = 0  # objective time: the cells whose computation is set (tune/objective.py)
    from_application: int = 0  # of those, the cells whose computation is the application's (from its profile)
    objective_from: str = ""  # where the objective came from: "--objective", "profile PATH", "default"


@dataclass(frozen=True)
class PointMeasured:
    """One run came back (ok or not); `measured`: runs so far in this tuning run."""

    result: PointResult
    measured: int


@dataclass(frozen=True)
class RoundDone:
    """A round of the loop ended; `state.convergence` in [0, 1] is the progress."""

    state: CurvePoint
    measured_in_round: int


@dataclass(frozen=True)
class TuningStopped:
    """The loop ended (converged, timeout, max_rounds or interrupted); files come next unless interrupted."""

    outcome: TuneOutcome
    #: Every failed run's reason (tune.driver.failure_line), where some failed; None where none did.
    failures_log: Path | None = None


@dataclass(frozen=True)
class WritingFiles:
    """The tuning files are being written and loaded into the library (smoke runs: seconds)."""

    smoke_ranks: tuple[int, ...]


@dataclass(frozen=True)
class FilesWritten:
    """The smoke-checked files and the manifest are in place."""

    manifest: Manifest
    manifest_path: Path


@dataclass(frozen=True)
class MeasuringCompositions:
    """The composition step starts: each collective's compositions and the library's default, one engine
    launch each, at the largest multi-node layout."""

    layout: Layout
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    launches: int


@dataclass(frozen=True)
class CompositionsMeasured:
    """One collective's compositions measured, and the decision (`record.choice.chosen` None: the library's
    default kept)."""

    record: CompositionRecord


@dataclass(frozen=True)
class CompositionsWritten:
    """The composition step is in the manifest (and its file in place where one was chosen)."""

    manifest: Manifest
    manifest_path: Path


TuneEvent = (TuneStarted | PointMeasured | RoundDone | TuningStopped | WritingFiles | FilesWritten
             | MeasuringCompositions | CompositionsMeasured | CompositionsWritten)
OnTuneEvent = Callable[[TuneEvent], None]


def _ignore(event: TuneEvent) -> None:
    pass


def build_spaces(collectives: list[str], scales: list[Scale], sizes: list[int],
                 algorithms: Callable[[str], Sequence[str]]) -> dict[str, FeatureSpace]:
    return {c: feature_space(c, scales, sizes, candidate_algorithms(list(algorithms(c)))) for c in collectives}


@dataclass(frozen=True)
class TunePlan:
    """`TuneOptions` checked and resolved: the library, its adapter, what to tune and where to run it."""

    options: TuneOptions
    library: MPILibrary
    adapter: VendorAdapter
    collectives: list[str]
    scales: list[Scale]
    sizes: list[int]
    allocation: NodeAllocation | None
    scheduler: GroupScheduler
    file_algorithms: dict[str, FileAlgorithms]  # per collective: what a tuning file can select, and why not
    spaces: dict[str, FeatureSpace]
    db: Path

    @classmethod
    def of(cls, options: TuneOptions, *, planning: bool = False) -> TunePlan:
        """UsageError for bad options, before anything is launched. `planning` (tune --plan): the allocation
        asked for need not exist yet (no hosts are looked up)."""
        from tunempi.config import resolve_db
        from tunempi.mpi.discovery import adapter_for, resolve_library

        if options.strategy not in STRATEGIES:
            raise UsageError(f"unknown --strategy {options.strategy!r}; valid: {', '.join(STRATEGIES)}")
        collectives = [check_engine_collective(c) for c in parse_collectives(options.collectives, nonblocking=True)]
        check_objective(options.objective, collectives)
        absent = sorted(set(check_distributions(options.distributions)) - set(collectives))
        if absent:
            raise UsageError(f"--distribution names {', '.join(absent)}, which this tune does not take "
                             f"(--collectives {','.join(collectives)})")
        if "barrier" in collectives:
            raise UsageError("barrier has no message size to tune; valid here: the other engine collectives")
        scales = sub_scales(nodes=options.nodes, ppn=options.ppn, ranks=options.ranks)
        sizes = message_sizes(options.max_msg, min_msg=options.min_msg)
        allocation = NodeAllocation.given_or_found(options.hostfile) if options.nodes > 1 and not planning else None
        if options.nodes > 1 and not planning and (allocation is None or allocation.nodes < options.nodes):
            raise UsageError(f"--nodes {options.nodes} needs an allocation with that many nodes (Slurm, PBS, "
                             "--hostfile or TUNEMPI_HOSTFILE: `tunempi cluster` emulates one)")
        scheduler = scheduling(options.topology, allocation)
        library = resolve_library(options.mpi)
        adapter = adapter_for(library).assuming(options.assume)
        offered_none = [c for c in collectives if c not in adapter.collectives() or not adapter.algorithms(c)]
        if offered_none:  # measuring would end in a file that cannot say anything (Open MPI's gatherv/scatterv)
            raise UsageError(f"{library.name} offers no algorithms to choose from for {', '.join(offered_none)}: "
                             "nothing to tune there")
        file_algorithms = {c: adapter.tuning_file_algorithms(c) for c in collectives}
        spaces = build_spaces(collectives, scales, sizes, lambda c: file_algorithms[c].selectable)
        db = resolve_db(str(options.db) if options.db else None)
        return cls(options, library, adapter, collectives, scales, sizes, allocation, scheduler, file_algorithms,
                   spaces, db)

    @property
    def distributions(self) -> dict[str, str]:
        """The vector collectives measured other than uniform, and how (TuneOptions.distributions)."""
        return check_distributions(self.options.distributions)

    @property
    def strategy_params(self) -> dict[str, object]:
        return {**LIVE_STRATEGY_PARAMS.get(self.options.strategy, {}), **self.options.strategy_params}

    @property
    def excluded(self) -> dict[str, dict[str, str]]:
        return {c: dict(found.excluded) for c, found in sorted(self.file_algorithms.items()) if found.excluded}

    def runner(self) -> ParallelRunner:
        options = self.options

        def make_runner(layout: Layout, hosts: NodeAllocation | None) -> LayoutRunner:
            return LayoutRunner(self.library, self.adapter, layout, settings=options.settings, allocation=hosts,
                                system=options.system, point_timeout_s=options.point_timeout_s)

        return ParallelRunner(make_runner, self.scheduler, self.allocation)

    def started(self, resumed: int, figures: Figures | None = None) -> TuneStarted:
        return TuneStarted(
            library=self.library, collectives=tuple(self.collectives), scales=tuple(self.scales),
            sizes=tuple(self.sizes), cells=sum(len(s.cells) for s in self.spaces.values()),
            exhaustive_points=sum(len(s.cells) * len(s.algorithms) for s in self.spaces.values()),
            strategy=self.options.strategy, topology=self.options.topology, db=self.db, resumed=resumed,
            excluded=self.excluded, distributions=self.distributions,
            objective=figures.objective if figures is not None else LATENCY_OBJECTIVE,
            computations=len(figures.compute_us) if figures is not None else 0,
            from_application=sum(1 for cell in figures.compute_us if cell in figures.sources
                                 and figures.sources[cell] not in (DEFAULT_LATENCY_SOURCE, STORED_SOURCE))
            if figures is not None else 0,
            objective_from=figures.objective_from if figures is not None else self.options.objective_from)


def run_tune(options: TuneOptions, on_event: OnTuneEvent | None = None) -> TuneReport:
    """Tune, write and smoke-check the files, write the manifest; progress goes to `on_event`.

    Ctrl-C: the measured points stay in the store, no file is written, the outcome says 'interrupted'.
    TuningFileError when the library rejects the written files (the output directory is then untouched).
    """
    emit = on_event or _ignore
    began = time.monotonic()  # the plan's actual wall time: the whole tune, files and smoke check included
    plan = TunePlan.of(options)
    runner = plan.runner()
    threads = options.model_threads or model_threads(plan.scales)
    # Deciding launches (--launches N > 1) measure as the written files will make the library choose.
    decider = (FileDecider(plan.library, plan.adapter, options.settings, allocation=plan.allocation,
                           system=options.system, distributions=plan.distributions)
               if options.launches > 1 else None)
    import_strategies(options.strategy)  # before the limit: it reaches only the libraries loaded by then
    with launches_timed() as launches:
        try:
            return _tune(plan, runner, decider, threads, emit, began)
        finally:  # what each launch took, for the next plan (tune/plan.py): kept when interrupted too
            if launches:
                with ResultStore(plan.db) as store:
                    add_launches(store, launches, system=options.system)


def _tune(plan: TunePlan, runner: ParallelRunner, decider: FileDecider | None, threads: int, emit: OnTuneEvent,
          began: float) -> TuneReport:
    """run_tune's work, its engines' launches timed."""
    options = plan.options
    try:
        with ResultStore(plan.db) as store, \
                (threadpool_limits(limits=threads) if threads > 0 else contextlib.nullcontext()):
            costs = store_costs(store, plan)  # the plan's costs as the store is before the tune
            figures = plan_figures(plan, runner, store)
            tuner = Tuner(plan.spaces, runner, strategy=options.strategy, seed=options.seed, store=store,
                          fingerprint=plan.library.fingerprint, system=options.system,
                          lanes=options.lanes or auto_lanes(plan.scales), strategy_params=plan.strategy_params,
                          exhaustive_guard=options.exhaustive_guard, launches=options.launches,
                          under_files=decider, clock=options.clock or time.monotonic,
                          distributions=plan.distributions, figures=figures,
                          emulated=plan.allocation is not None and plan.allocation.emulated)
            emit(plan.started(tuner.resumed, figures))
            measured = 0
            probes: dict[tuple[int, int, int], list[float]] = {}

            def on_result(result: PointResult) -> None:
                nonlocal measured
                measured += 1
                layout = (result.layout.ranks, result.layout.nodes, result.layout.ppn_or_derived)
                if result.probe_us is not None and result.probe_us > 0:
                    probes.setdefault(layout, []).append(result.probe_us)
                emit(PointMeasured(result, measured))

            try:
                outcome = tuner.run(timeout_s=options.timeout_s, on_result=on_result,
                                    on_round=lambda state, count: emit(RoundDone(state, count)))
            finally:  # what the model's fits took, for the next plan (tune/plan.py): kept if the tune failed
                add_fits(store, tuner.fits, system=options.system)
    finally:
        runner.close()
        if decider is not None:
            decider.close()
    emit(TuningStopped(outcome, write_failures_log(options.out, outcome)))
    report = TuneReport(None, outcome, plan.spaces)
    if outcome.stop_reason != "interrupted":
        check_evidence(outcome, sum(len(s.cells) for s in plan.spaces.values()))
        earlier = earlier_file_names(options.out)
        report.manifest = write_result(plan, outcome, emit, figures,
                                       {layout: min(values) for layout, values in probes.items()})
        report.manifest = tune_compositions(plan, report.manifest, emit)
        report.manifest.remove_files_no_longer_listed(earlier)
        actual = Prediction(time.monotonic() - began, outcome.launches, outcome.measured)
        # predicted after the clock stopped: the strategy's replay (tune/plan.py) takes seconds of its own
        predicted = predict_tune(plan, costs)
        report.manifest = dataclasses.replace(report.manifest, plan=dataclasses.replace(predicted, actual=actual))
        report.manifest.save()
    return report


def store_costs(store: ResultStore, plan: TunePlan) -> PointCosts:
    """What a run of each collective and a launch cost, from this library's runs and launches in the results
    store (tune/plan.py)."""
    rows = [m for c in plan.collectives for m in store.iter_measurements(
        library_fingerprint=plan.library.fingerprint, system=plan.options.system, collective=c)]
    costs = costs_from_measurements(rows, f"{len(rows)} runs of {plan.library.name} in {plan.db}" if rows
                                    else f"no runs of {plan.library.name} in {plan.db}: tune/plan.py's latencies")
    return dataclasses.replace(costs, launch_s=launch_seconds(store, plan.library.fingerprint, plan.options.system),
                               fits=recorded_fits(store, plan.options.strategy, plan.options.system))


def dataset_costs(path: Path, collectives: Sequence[str]) -> PointCosts:
    """What a run costs from a dataset's latencies (Peak's CSVs: no iterations; tune/plan.py)."""
    from tunempi.store.dataset import iter_dataset

    rows = [row for row in iter_dataset(path) if row.collective in collectives]
    if not rows:
        raise UsageError(f"{path} has no rows of {', '.join(collectives)}: nothing to predict from")
    return costs_from_measurements(rows, f"{len(rows)} latencies of {path.name}")


def predict_tune(plan: TunePlan, costs: PointCosts) -> PlanRecord:
    """The tune's predicted wall time, launches and runs (tune/plan.py `predict`), the smoke check's launches
    added to the wall time."""
    options = plan.options
    # a launch where the store recorded none of the library's: its vendor's (Intel MPI's take 5x MPICH's)
    costs = dataclasses.replace(costs, engine_start_s=ENGINE_START_S_BY_VENDOR.get(plan.library.vendor,
                                                                                   costs.engine_start_s))
    predicted = predict(plan.spaces, options.settings, costs, launches=options.launches,
                        allocation_nodes=options.nodes, serial=options.topology == "serial",
                        strategy=options.strategy, strategy_params=plan.strategy_params, seed=options.seed,
                        under_files={c for c in plan.collectives if decided_under_files(plan.adapter, c)},
                        emulated=plan.allocation.emulated if plan.allocation is not None else emulated_here(),
                        # the model's fits as earlier tunes recorded them, else timed here: tune's guard times its own
                        model_s_per_round=None, guard=options.exhaustive_guard,
                        launch_per_algorithm={c for c in plan.collectives
                                              if not plan.adapter.switches_collective_at_run_time(c)})
    smoke_s = FILES_S + (SMOKE_S_PER_SIZE * len({s.ranks for s in plan.scales}) if options.smoke else 0.0)
    scale = composition_scale(plan.scales)
    if scale is not None:  # as tune_compositions launches them: the default and each composition, per collective
        launches = {c: 1 + len(candidates) for c in plan.collectives
                    if (candidates := plan.adapter.composition_candidates(c, scale.nodes))}
        smoke_s += compositions_s(launches, [Cell(c, scale.ranks, scale.nodes, scale.ppn, size)
                                             for c in launches for size in composition_sizes(plan.sizes)],
                                  costs, options.settings)
    replayed = replayable(plan.spaces, costs)
    fits = f"{len(costs.fits)} model fits recorded by earlier tunes" if costs.fits else "the model's fits timed here"
    source = costs.source + (f"; exploring replayed on them: {', '.join(replayed)}, {fits}" if replayed else "")
    return PlanRecord(dataclasses.replace(predicted, wall_s=predicted.wall_s + smoke_s), costs_from=source)


def plan_tune(options: TuneOptions, dataset: Path | None = None) -> PlanRecord:
    """`tune --plan`: the prediction alone, nothing launched: costs from `dataset` where given, else from the
    results store (opened, never written)."""
    plan = TunePlan.of(options, planning=True)
    if dataset is not None:
        return predict_tune(plan, dataset_costs(dataset, plan.collectives))
    if not plan.db.exists():
        return predict_tune(plan, PointCosts(source=f"no results store at {plan.db}: tune/plan.py's latencies"))
    with ResultStore(plan.db) as store:
        return predict_tune(plan, store_costs(store, plan))


def earlier_file_names(directory: Path) -> set[str]:
    """The files the tuning directory's current manifest lists (none if it has no readable manifest)."""
    try:
        return Manifest.load(directory).file_names()
    except (UsageError, KeyError, TypeError, ValueError):
        return set()


def files_fields(written: WrittenFiles, rule_sets: Mapping[str, RuleSet]) -> dict[str, Any]:
    """The manifest fields that describe written tuning files (for `dataclasses.replace`)."""
    return {"files": dict(written.files), "env_files": dict(written.env_files), "env": dict(written.env),
            "env_file": written.env_file, "needs_file": tuple(written.needs_file),
            "rule_sets": dict(sorted(rule_sets.items())), "smoke": tuple(written.smoke)}


def one_choice(adapter: VendorAdapter, collectives: Sequence[str]) -> dict[str, str]:
    """collective -> how the library's files hold its choice where they cannot choose it by message size (the
    report says so): one algorithm per communicator size (alltoallv), or one for every call (Open MPI's
    non-blocking collectives: coll/libnbc's one variable each)."""
    return {c: "for every call" if not adapter.selects_by_communicator_size(c) else "per communicator size"
            for c in sorted(collectives) if not adapter.selects_by_size(c)}


def plan_figures(plan: TunePlan, runner: ParallelRunner, store: ResultStore) -> Figures:
    """The tune's objective and, for `time`, every non-blocking cell's computation (tune/objective.py:
    the one its stored time points had, else the library default's latency measured now, stored as a latency
    point)."""
    objective = check_objective(plan.options.objective)
    cells = [cell for c, space in plan.spaces.items() if is_nonblocking(c) for cell in space.cells]
    if objective != TIME or not cells:
        return Figures(objective, objective_from=plan.options.objective_from)
    fingerprint, system = plan.library.fingerprint, plan.options.system

    def next_run(cell: Cell) -> int:
        runs = [m.run for m in store.iter_measurements(
            library_fingerprint=fingerprint, system=system, collective=cell.collective, algorithm=DEFAULT_ALGORITHM,
            ranks=cell.ranks, nodes=cell.nodes, ppn=cell.ppn, msg_bytes=cell.msg_bytes, objective=LATENCY_OBJECTIVE)]
        return max(runs, default=-1) + 1

    def measure(work: Mapping[Layout, Sequence[BenchPoint]]) -> list[Measurement]:
        return [r.measurement for r in runner.run(work, on_point=lambda r: store.add(r.measurement))]

    application = {cell: capped_computation(c.compute_us, c.source)
                   for cell, c in application_lengths(cells, plan.options.computations).items()}
    sources = {cell: source for cell, (_, source) in application.items()}
    lengths = compute_lengths(cells, store, fingerprint, measure, system=system, run_of=next_run,
                              given={cell: us for cell, (us, _) in application.items()}, sources=sources)
    return Figures(objective, lengths, sources, plan.options.objective_from)


FAILURES_LOG = "tune-failures.log"


def write_failures_log(out: Path, outcome: TuneOutcome) -> Path | None:
    """The failed runs' reasons in the tuning directory (one line each), so "N failed" can say why and where."""
    if not outcome.failures:
        return None
    out.mkdir(parents=True, exist_ok=True)
    path = out / FAILURES_LOG
    more = outcome.failed - len(outcome.failures)
    path.write_text("\n".join([*outcome.failures, *([f"... and {more} more"] if more > 0 else [])]) + "\n")
    return path


def write_result(plan: TunePlan, outcome: TuneOutcome, emit: OnTuneEvent = _ignore,
                 figures: Figures | None = None, probes: Mapping[tuple[int, int, int], float] | None = None
                 ) -> Manifest:
    """Selection -> rule sets -> smoke-checked files -> manifest (TuningFileError if a file is rejected)."""
    options, library = plan.options, plan.library
    preferred_ppn = options.ppn if options.nodes > 1 else None
    medians = outcome.measured_medians()
    selection = whole_collectives(one_choice_per_scale(outcome.selection, plan.adapter, medians), plan.adapter,
                                  medians)
    # above the largest measured size: what the extension policy keeps (the library's own elsewhere)
    rule_sets = files_rule_sets(selection, plan.adapter, medians, preferred_ppn=preferred_ppn)
    others = other_medians(medians, selection)
    smoke_ranks = tuple(sorted({s.ranks for s in plan.scales}))
    emit(WritingFiles(smoke_ranks))
    written = write_tuning_files(options.out, library, plan.adapter, rule_sets, smoke_ranks=smoke_ranks,
                                 smoke=options.smoke)
    manifest = Manifest(
        directory=options.out, library=LibraryRecord.of(library), created=utc_timestamp(),
        system=options.system, preferred_ppn=preferred_ppn,
        collectives=tuple(sorted({c.collective for c in selection})),
        scales=tuple(s.key() for s in plan.scales), sizes=tuple(plan.sizes),
        strategy=options.strategy, seed=options.seed, strategy_params=plan.strategy_params,
        run=RunRecord(stop_reason=outcome.stop_reason, wall_s=outcome.wall_s, bench_s=outcome.bench_s,
                      measured=outcome.measured, resumed=outcome.resumed, failed=outcome.failed,
                      launches=outcome.launches, decided_across=options.launches,
                      decisions=outcome.outcome_counts(), deciding_blocks=outcome.deciding_blocks),
        excluded=plan.excluded, assumes=tuple(sorted(plan.adapter.assumed)),
        objective=check_objective(options.objective), distributions=plan.distributions,
        compute_us=dict(figures.compute_us) if figures is not None else {},
        machine_probe_us=dict(probes or {}),
        compute_from=dict(figures.sources) if figures is not None else {},
        objective_from=figures.objective_from if figures is not None else options.objective_from,
        one_choice=one_choice(plan.adapter, plan.collectives),
        selection=tuple(
            SelectionRow(cell, algorithm, medians.get((cell, algorithm)), medians.get((cell, DEFAULT_ALGORITHM)),
                         decided=d.evidence() if (d := outcome.decisions.get(cell)) else None,
                         own=d.own_evidence() if d else None, others=others[cell])
            for cell, algorithm in sorted(selection.items())),
        training_curve=tuple(CurveRecord(p.wall_s, p.bench_s, p.points, p.convergence, dict(p.per_collective))
                             for p in outcome.curve),
        **files_fields(written, rule_sets),
    )
    emit(FilesWritten(manifest, manifest.save()))
    return manifest


#: The strategy a results store's runs are decided with, nothing measured (`selection_from_store`): its estimate
#: at a measured cell is that cell's own runs (strategy/forest_selection.measured_then_model), not a model's.
STORED_STRATEGY = "exhaustive"


@dataclass(frozen=True)
class StoredSelection:
    """tune's selection from runs already in a results store (`selection_from_store`)."""

    selection: dict[Cell, str]  # only cells with runs of the default; an override only with runs of its own
    medians: dict[tuple[Cell, str], float]  # (cell, algorithm) -> median over its runs' medians
    runs: int  # the store's runs it was decided from
    newest: str  # the newest of those runs' timestamps


def selection_from_store(store: ResultStore, fingerprint: str, adapter: VendorAdapter, *,
                         system: str = "") -> StoredSelection:
    """The selection `tune` would write from the runs the store holds for one library build, without measuring
    (`catalog add STORE`): every blocking collective measured with uniform counts, at every layout and size with
    runs of the library's default, its spaces as tune builds them (the algorithms a file can select), read back
    as a resumed tune reads them (`records_from_store`), each cell's fastest by its runs kept only where it beats
    the default by tune's margin (`prefer_default`), then what the files can hold (as `write_result`). A store
    keeps no launch identity, so no cell is decided across launches (tune's `--launches 1`); verify judges the
    built files. Non-blocking collectives are left out: their points depend on an objective and computation."""
    scales: dict[str, set[tuple[int, int]]] = {}
    sizes: dict[str, set[int]] = {}
    for m in store.iter_measurements(library_fingerprint=fingerprint, system=system, status="ok",
                                     algorithm=DEFAULT_ALGORITHM, distribution=DEFAULT_DISTRIBUTION,
                                     objective=LATENCY_OBJECTIVE):
        if is_nonblocking(m.collective) or m.collective not in adapter.collectives() or m.ranks != m.nodes * m.ppn:
            continue
        scales.setdefault(m.collective, set()).add((m.nodes, m.ppn))
        sizes.setdefault(m.collective, set()).add(m.msg_bytes)

    def selectable(collective: str) -> tuple[str, ...]:
        return adapter.tuning_file_algorithms(collective).selectable

    spaces = {c: build_spaces([c], [Scale(n, p) for n, p in sorted(scales[c])], sorted(sizes[c]), selectable)[c]
              for c in sorted(scales)}
    records, _ = records_from_store(store, fingerprint, spaces, system=system)
    strategies = {c: make_strategy(STORED_STRATEGY, space, seed=0, records=records[c]) for c, space in spaces.items()}
    chosen: dict[Cell, str] = {}
    for strategy in strategies.values():
        chosen.update(prefer_default(strategy, strategy.select(), DEFAULT_MARGIN))
    runs = sum(len(s.records) for s in strategies.values())
    medians = TuneOutcome(chosen, dict(strategies), [], "store", 0.0, 0.0, 0, runs, 0, 0).measured_medians()
    # a winner without runs of its own in the cell is a model's guess: tune's confirmation round would measure
    # it; nothing is measured here, so the library's default (measured) stays
    measured = {cell: a if (cell, a) in medians else DEFAULT_ALGORITHM for cell, a in chosen.items()
                if (cell, DEFAULT_ALGORITHM) in medians}
    selection = whole_collectives(one_choice_per_scale(measured, adapter, medians), adapter, medians)
    newest = ""
    for m in store.iter_measurements(library_fingerprint=fingerprint, system=system, collective=list(spaces),
                                     status="ok"):
        newest = max(newest, m.timestamp)
    return StoredSelection(selection, medians, runs, newest)


# -- compositions: at the largest multi-node layout, after the algorithm files ----------------------------


def composition_scale(scales: Sequence[Scale]) -> Scale | None:
    """The largest scale that spans nodes (compositions only differ there); None on one node."""
    multi = [s for s in scales if s.nodes > 1]
    return max(multi, key=lambda s: (s.ranks, s.nodes)) if multi else None


def composition_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """The smallest, a middle and the largest size: each composition costs an engine launch, and a
    composition's cost differs mostly between latency- and bandwidth-bound sizes."""
    ordered = sorted(sizes)
    return tuple(sorted({ordered[0], ordered[len(ordered) // 2], ordered[-1]})) if ordered else ()


def check_composition_files(plan: TunePlan, layout: Layout, hosts: NodeAllocation | None, env: Mapping[str, str],
                            collectives: Sequence[str], msg_bytes: int) -> None:
    """TuningFileError unless the library, with the written composition file active, runs each chosen
    collective at the layout with checked results (the files count only once loaded by the real library)."""
    settings = MeasureSettings(warmup=1, min_iters=3, max_iters=10, time_cap_s=0.05)
    try:
        with EngineSession(plan.library, layout, env={**plan.adapter.launch_env(), **env}, allocation=hosts,
                           point_timeout_s=plan.options.point_timeout_s or 60.0) as session:
            for index, collective in enumerate(collectives):
                outcome = session.measure(PointRequest(id=index + 1, collective=collective, msg_bytes=msg_bytes,
                                                       settings=settings))
                if not outcome.ok or outcome.reply is None or outcome.reply.errors:
                    raise TuningFileError(f"{collective} failed with the composition file: {outcome.status}: "
                                          f"{outcome.reason}")
    except MPIError as exc:
        raise TuningFileError(f"the library did not run with the composition file: {exc}") from None


def tune_compositions(plan: TunePlan, manifest: Manifest, emit: OnTuneEvent = _ignore) -> Manifest:
    """Where the plan spans nodes: every tuned collective's compositions measured at the largest multi-node
    layout, the ones that beat the default by COMPOSITION_MARGIN written in the library's form (checked in
    the library at that layout), all of it recorded in the manifest. Unchanged on one node."""
    scale = composition_scale(plan.scales)
    if scale is None:
        return manifest
    layout, adapter, options = scale.layout, plan.adapter, plan.options
    collectives = [c for c in plan.collectives if adapter.composition_candidates(c, layout.nodes)]
    if not collectives:
        return manifest
    sizes = composition_sizes(plan.sizes)
    hosts = plan.allocation.first(layout.nodes) if plan.allocation is not None else None
    launches = sum(1 + len(adapter.composition_candidates(c, layout.nodes)) for c in collectives)
    emit(MeasuringCompositions(layout, tuple(collectives), sizes, launches))
    results: dict[str, list[CompositionResult]] = {
        c: measure_compositions(plan.library, adapter, layout, c, sizes, settings=options.settings, allocation=hosts,
                                point_timeout_s=options.point_timeout_s)
        for c in collectives}
    choices = choose_compositions(results, applies_to_all=adapter.composition_applies_to_all(),
                                  margin=COMPOSITION_MARGIN)
    files: dict[str, str] = {}
    env_files: dict[str, str] = {}
    env: dict[str, str] = {}
    chosen = {c: choice.chosen for c, choice in choices.items() if choice.chosen is not None}
    if chosen:
        staging = Path(tempfile.mkdtemp(prefix=".staging-compositions-", dir=options.out))
        try:
            written = write_composition_choices(adapter, chosen, staging, nodes=layout.nodes)
            check_composition_files(plan, layout, hosts, written.activation_env(staging), sorted(chosen), sizes[0])
            for name in written.files.values():
                (staging / name).replace(options.out / name)
            files, env_files, env = dict(written.files), dict(written.env_files), dict(written.env)
        except TuningFileError as exc:
            choices = {c: dataclasses.replace(choice, chosen=None, reason=f"written, but not kept: {exc}")
                       if choice.chosen is not None else choice for c, choice in choices.items()}
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    records = tuple(CompositionRecord(c, scale.key(), tuple(results[c]), choices[c]) for c in collectives)
    for record in records:
        emit(CompositionsMeasured(record))
    manifest = dataclasses.replace(manifest, compositions=CompositionsRecord(
        margin=COMPOSITION_MARGIN, sizes=sizes, collectives=records, files=files, env_files=env_files, env=env))
    emit(CompositionsWritten(manifest, manifest.save()))
    return manifest


def other_medians(medians: Mapping[tuple[Cell, str], float | None],
                  selection: Mapping[Cell, str]) -> dict[Cell, dict[str, float]]:
    """Per selected cell, the medians measured there of every algorithm but the selected one and the default (a
    manifest row's `others`: what the extension policy reads where a winner was measured but not selected); one
    pass over the medians, not one per cell."""
    others: dict[Cell, dict[str, float]] = {cell: {} for cell in selection}
    for (cell, algorithm), us in medians.items():
        if cell in others and us is not None and algorithm not in (selection[cell], DEFAULT_ALGORITHM):
            others[cell][algorithm] = float(us)
    return others
