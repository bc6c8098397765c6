"""`tunempi tune` as a library call: validate, tune, write the files, smoke-check them, write the manifest."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.validate import DEFAULT_ALGORITHM, check_engine_collective
from tunempi.collectives import parse_collectives
from tunempi.errors import UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.launch.scheduler import SCHEDULING_MODES, GroupScheduler
from tunempi.launch.topology import group_nodes, read_group_file
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import VendorAdapter
from tunempi.space import FeatureSpace
from tunempi.store.results import ResultStore, utc_timestamp
from tunempi.strategy import DEFAULT_STRATEGY, STRATEGIES
from tunempi.tune.driver import CurvePoint, TuneOutcome, Tuner
from tunempi.tune.files import rule_sets_for, selection_table, write_tuning_files
from tunempi.tune.manifest import KIND, VERSION, Manifest, SelectionRow
from tunempi.tune.runner import LayoutRunner, ParallelRunner, PointResult
from tunempi.tune.scope import Scale, candidate_algorithms, feature_space, message_sizes, sub_scales
from tunempi.units import format_size

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
TUNE_SETTINGS = MeasureSettings(warmup=2, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.1)


@dataclass(frozen=True)
class TuneOptions:
    """Everything `tunempi tune` was asked (sizes in bytes, durations in seconds)."""

    out: Path
    collectives: str = "allreduce,bcast,allgather,alltoall"
    mpi: str | None = None
    nodes: int = 1
    ppn: int | None = None
    ranks: int | None = None
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


def auto_lanes(scales: list[Scale], cpus: int | None = None) -> int:
    """2 (fit the models of some collectives while the others are measured) when this node has a core
    to spare beyond the most ranks a benchmark puts on it, else 1. Measured on a 2-core node with 2
    MPICH ranks: the model thread beside the busy-polling ranks made every run cost 4x (scheduler
    stalls, contended runs measured again), far more than the model time it hid."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    per_node = max(s.ppn for s in scales) if scales else 1
    return 2 if cpus > per_node else 1


def scheduling(topology: str, allocation: NodeAllocation | None) -> GroupScheduler:
    """--topology: serial | local | pattern:REGEX (groups from node names) | FILE (`node group` lines)."""
    hosts = allocation.hosts if allocation is not None else ("localhost",)
    if topology in ("serial", "local"):
        return GroupScheduler(group_nodes(hosts), topology)
    if topology.startswith("pattern:"):
        return GroupScheduler(group_nodes(hosts, pattern=topology[len("pattern:"):]), "topology")
    if Path(topology).is_file():
        return GroupScheduler(group_nodes(hosts, mapping=read_group_file(topology)), "topology")
    raise UsageError(f"unknown --topology {topology!r}; valid: serial, local, pattern:REGEX, or a file of "
                     f"'node group' lines (modes: {', '.join(SCHEDULING_MODES)})")


def tunable_algorithms(library: MPILibrary, adapter: VendorAdapter, collective: str) -> list[str]:
    """The library's algorithms a tuning file can select (MPICH: a known JSON leaf whose parameters
    tunempi can state; Open MPI: every algorithm with an id)."""
    names = [a.name for a in adapter.algorithms(collective)]
    if library.vendor != "mpich":
        return names
    from tunempi.mpi.default_tree import find_libmpi, known_leaves
    from tunempi.mpi.discovery import library_info
    from tunempi.mpi.mpich import leaf_parameters
    from tunempi.writers.mpich_json import leaf_function

    leaves = known_leaves(find_libmpi(library.prefix))
    info = library_info(library)

    def value(name: str) -> object:
        cvar = info.cvar(name)
        return None if cvar is None else cvar.get("value")

    return [n for n in names if f"algorithm={leaf_function(collective, n)}" in leaves
            and leaf_parameters(collective, n, value) is not None]


@dataclass
class TuneReport:
    manifest: Manifest | None
    outcome: TuneOutcome
    spaces: dict[str, FeatureSpace]


def build_spaces(collectives: list[str], scales: list[Scale], sizes: list[int],
                 algorithms: Callable[[str], list[str]]) -> dict[str, FeatureSpace]:
    return {c: feature_space(c, scales, sizes, candidate_algorithms(algorithms(c))) for c in collectives}


def run_tune(options: TuneOptions, console: Console) -> TuneReport:
    """Tune, write and smoke-check the files, write the manifest. Ctrl-C: the measured points stay in the
    store, no file is written, the report says 'interrupted'."""
    from tunempi.config import resolve_db
    from tunempi.mpi.discovery import adapter_for, resolve_library

    if options.strategy not in STRATEGIES:
        raise UsageError(f"unknown --strategy {options.strategy!r}; valid: {', '.join(STRATEGIES)}")
    collectives = [check_engine_collective(c) for c in parse_collectives(options.collectives)]
    if "barrier" in collectives:
        raise UsageError("barrier has no message size to tune; valid here: the other engine collectives")
    scales = sub_scales(nodes=options.nodes, ppn=options.ppn, ranks=options.ranks)
    sizes = message_sizes(options.max_msg, min_msg=options.min_msg)
    allocation = NodeAllocation.from_environment() if options.nodes > 1 else None
    if options.nodes > 1 and (allocation is None or allocation.nodes < options.nodes):
        raise UsageError(f"--nodes {options.nodes} needs an allocation with that many nodes (Slurm, PBS)")
    scheduler = scheduling(options.topology, allocation)

    library = resolve_library(options.mpi)
    adapter = adapter_for(library)
    spaces = build_spaces(collectives, scales, sizes, lambda c: tunable_algorithms(library, adapter, c))
    db = resolve_db(str(options.db) if options.db else None)

    def make_runner(layout: Layout, hosts: NodeAllocation | None) -> LayoutRunner:
        return LayoutRunner(library, adapter, layout, settings=options.settings, allocation=hosts,
                            system=options.system, point_timeout_s=options.point_timeout_s)

    runner = ParallelRunner(make_runner, scheduler, allocation)
    n_cells = sum(len(s.cells) for s in spaces.values())
    n_points = sum(len(s.cells) * len(s.algorithms) for s in spaces.values())
    console.print(
        f"[bold]{library.name}[/] ({library.prefix}): tuning {', '.join(collectives)} at "
        f"{', '.join(s.label() for s in scales)}, {len(sizes)} sizes {format_size(sizes[0])}..{format_size(sizes[-1])}"
        f" ({n_cells} cells, {n_points} exhaustive points), strategy {options.strategy}, "
        f"topology {options.topology}, store {db}"
    )
    with ResultStore(db) as store:
        tuner = Tuner(spaces, runner, strategy=options.strategy, seed=options.seed, store=store,
                      fingerprint=library.fingerprint, system=options.system,
                      lanes=options.lanes or auto_lanes(scales),
                      strategy_params={**LIVE_STRATEGY_PARAMS.get(options.strategy, {}),
                                       **options.strategy_params})
        if tuner.resumed:
            console.print(f"resuming: {tuner.resumed} earlier runs of these points read from the store")
        try:
            outcome = _tune_with_progress(tuner, options, console)
        finally:
            runner.close()
    report = TuneReport(None, outcome, spaces)
    console.print(
        f"{outcome.stop_reason}: {outcome.measured} runs measured in {outcome.wall_s:.1f} s "
        f"(benchmark time {outcome.bench_s:.1f} s, {outcome.launches} engine launches, {outcome.failed} failed)"
    )
    if outcome.stop_reason == "interrupted":
        console.print("[yellow]interrupted[/]: measured points are kept in the store; rerun to resume.")
        return report
    report.manifest = write_result(options, library, adapter, scales, sizes, outcome, console)
    return report


def _tune_with_progress(tuner: Tuner, options: TuneOptions, console: Console) -> TuneOutcome:
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[points]} runs"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("converging", total=100.0, points=0)
        counter = {"points": 0}

        failures: dict[tuple[str, str, int], int] = {}

        def on_result(result: PointResult) -> None:
            counter["points"] += 1
            if not result.outcome.ok:  # the first failure of an algorithm at a scale in full, then a count
                key = (result.point.collective, result.point.algorithm, result.layout.ranks)
                failures[key] = failures.get(key, 0) + 1
                if failures[key] == 1:
                    progress.console.print(
                        f"[red][FAIL][/] {key[0]} {key[1]} {format_size(result.point.msg_bytes)} at {key[2]} "
                        f"ranks: {result.outcome.status}: {result.outcome.reason}")
            progress.update(task, points=counter["points"],
                            description=f"{result.point.collective} {format_size(result.point.msg_bytes)}")

        def on_round(state: CurvePoint, measured: int) -> None:
            per = " ".join(f"{c} {v:.0%}" for c, v in state.per_collective.items())
            progress.update(task, completed=100.0 * state.convergence, description=f"converging ({per})")

        outcome = tuner.run(timeout_s=options.timeout_s, on_round=on_round, on_result=on_result)
        repeated = {k: n for k, n in failures.items() if n > 1}
        if repeated:
            progress.console.print("failed more than once (not measured further where blocked): " + ", ".join(
                f"{c} {a} at {r} ranks x{n}" for (c, a, r), n in sorted(repeated.items())))
        return outcome


def write_result(options: TuneOptions, library: MPILibrary, adapter: VendorAdapter, scales: list[Scale],
                 sizes: list[int], outcome: TuneOutcome, console: Console) -> Manifest:
    """Selection -> rule sets -> smoke-checked files -> manifest (TuningFileError if a file is rejected)."""
    preferred_ppn = options.ppn if options.nodes > 1 else None
    table = selection_table(outcome.selection, preferred_ppn=preferred_ppn)
    rule_sets = rule_sets_for(table)
    with console.status("writing the tuning files and loading them into the library (smoke run)"):
        written = write_tuning_files(options.out, library, adapter, rule_sets,
                                     smoke_ranks=sorted({s.ranks for s in scales}), smoke=options.smoke)
    medians = outcome.measured_medians()
    rows = [
        SelectionRow(cell, algorithm, medians.get((cell, algorithm)), medians.get((cell, DEFAULT_ALGORITHM)))
        for cell, algorithm in sorted(outcome.selection.items())
    ]
    manifest = Manifest(options.out, {
        "kind": KIND, "version": VERSION, "created": utc_timestamp(),
        "library": {"name": library.name, "vendor": library.vendor, "version": library.version,
                    "fingerprint": library.fingerprint, "prefix": str(library.prefix)},
        "system": options.system, "preferred_ppn": preferred_ppn,
        "collectives": sorted({c.collective for c in outcome.selection}),
        "scales": [list(s.key()) for s in scales],
        "sizes": sizes,
        "strategy": options.strategy, "seed": options.seed,
        "strategy_params": {**LIVE_STRATEGY_PARAMS.get(options.strategy, {}), **options.strategy_params},
        "run": {"stop_reason": outcome.stop_reason, "wall_s": round(outcome.wall_s, 3),
                "bench_s": round(outcome.bench_s, 3), "measured": outcome.measured, "resumed": outcome.resumed,
                "failed": outcome.failed, "launches": outcome.launches},
        "files": written.files, "env_files": written.env_files, "env": written.env,
        "env_file": written.env_file, "needs_file": list(written.needs_file),
        "selection": [row.to_dict() for row in rows],
        "rule_sets": {c: rs.to_dict() for c, rs in sorted(rule_sets.items())},
        "training_curve": [
            {"wall_s": round(p.wall_s, 3), "bench_s": round(p.bench_s, 3), "points": p.points,
             "convergence": round(p.convergence, 4),
             "per_collective": {c: round(v, 4) for c, v in p.per_collective.items()}}
            for p in outcome.curve
        ],
        "smoke": [record.to_dict() for record in written.smoke],
        "verify": None,
    })
    path = manifest.save()
    console.print(f"tuning files smoke-checked in {library.name} and written to {options.out} ({path.name})")
    for collective, rule_set in sorted(rule_sets.items()):
        for block in rule_set.blocks:
            upto = "+" if block.max_ranks is None else f"..{block.max_ranks}"
            rules = ", ".join(
                f"{'<=' + format_size(r.max_bytes) if r.max_bytes is not None else 'above'} {r.algorithm}"
                for r in block.rules)
            console.print(f"  {collective} [{block.min_ranks}{upto} ranks]: {rules}", soft_wrap=True)
    return manifest


#: What verify measures per point by default (each cell: `repeats` x tuned and default).
VERIFY_SETTINGS = MeasureSettings(warmup=2, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.1)


@dataclass
class VerifyReport:
    manifest: Manifest
    verified: list
    summary: dict
    replaced: int


def run_verify(directory: Path, console: Console, *, repeats: int = 3, settings: MeasureSettings = VERIFY_SETTINGS,
               mpi: str | None = None, topology: str = "serial", smoke: bool = True) -> VerifyReport:
    """Tuned against default, interleaved per layout; slower-beyond-noise rules go back to default and the
    files are rewritten (smoke-checked). The manifest's `verify` section records every cell."""
    import time

    from tunempi.mpi.discovery import adapter_for, resolve_library
    from tunempi.tune.verify import apply_replacements, evaluate, summary, suspicious, verify_plan

    if repeats < 2:
        raise UsageError(f"--repeats must be at least 2 (a confidence interval needs two pairs), got {repeats}")
    manifest = Manifest.load(directory)
    missing = manifest.missing_files()
    if missing:
        raise UsageError(f"{directory}: files named in the manifest are missing: {', '.join(missing)}")
    recorded = manifest.library
    library = resolve_library(mpi or recorded["prefix"])
    if library.fingerprint != recorded["fingerprint"]:
        raise UsageError(f"{directory} was tuned for {recorded['name']} ({recorded['fingerprint']}), "
                         f"not {library.name} ({library.fingerprint}); give --mpi with that library")
    adapter = adapter_for(library)
    rows = manifest.selection()
    selection = {row.cell: row.algorithm for row in rows}
    work = verify_plan(selection, repeats)
    multi_node = any(layout.nodes > 1 for layout in work)
    allocation = NodeAllocation.from_environment() if multi_node else None

    def make_runner(layout: Layout, hosts: NodeAllocation | None) -> LayoutRunner:
        return LayoutRunner(library, adapter, layout, settings=settings, allocation=hosts,
                            system=str(manifest.data.get("system", "")))

    runner = ParallelRunner(make_runner, scheduling(topology, allocation), allocation)
    total = sum(len(points) for points in work.values())
    console.print(f"[bold]{library.name}[/]: verifying {sum(a != DEFAULT_ALGORITHM for a in selection.values())} "
                  f"tuned cells against the default, {repeats} interleaved pairs each ({total} runs)")
    started = time.monotonic()
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("verifying", total=total)

            def on_point(result: PointResult) -> None:
                p = result.point
                progress.update(task, advance=1,
                                description=f"{p.collective} {format_size(p.msg_bytes)} {p.algorithm}")

            results = list(runner.run(work, on_point=on_point))
            # Cells that look slower without the evidence to say so get as many pairs again, so that a
            # real slowdown is not waved through for lack of runs (nor a good rule dropped for one outlier).
            again = suspicious(evaluate(selection, results))
            if again:
                extra = verify_plan({c: selection[c] for c in again}, repeats, first_run=repeats)
                progress.update(task, total=total + sum(len(p) for p in extra.values()))
                results += runner.run(extra, on_point=on_point)
    finally:
        runner.close()
    verified = evaluate(selection, results)
    fixed, verified = apply_replacements(selection, verified)
    replaced = [v for v in verified if v.replaced]
    if replaced:
        table = selection_table(fixed, preferred_ppn=manifest.data.get("preferred_ppn"))
        rule_sets = rule_sets_for(table)
        scales = {cell.ranks for cell in fixed}
        with console.status("rewriting the tuning files (smoke run)"):
            written = write_tuning_files(manifest.directory, library, adapter, rule_sets,
                                         smoke_ranks=sorted(scales), smoke=smoke)
        manifest.data.update({
            "files": written.files, "env_files": written.env_files, "env": written.env,
            "env_file": written.env_file, "needs_file": list(written.needs_file),
            "rule_sets": {c: rs.to_dict() for c, rs in sorted(rule_sets.items())},
            "smoke": [record.to_dict() for record in written.smoke],
        })
        manifest.data["selection"] = [
            {**SelectionRow(row.cell, fixed[row.cell], row.median_us if fixed[row.cell] == row.algorithm
                            else row.default_us, row.default_us).to_dict(),
             **({"replaced_from": row.algorithm} if fixed[row.cell] != row.algorithm else {})}
            for row in rows
        ]
    numbers = summary(verified)
    manifest.data["verify"] = {
        "verified_at": utc_timestamp(), "repeats": repeats, "second_pass_cells": len(again),
        "time_cap_s": settings.time_cap_s,
        "wall_s": round(time.monotonic() - started, 3), "summary": numbers,
        "cells": [v.to_dict() for v in verified],
    }
    manifest.save()
    for v in replaced:
        console.print(f"[yellow]replaced[/] {v.cell.collective} {format_size(v.cell.msg_bytes)} at "
                      f"{v.cell.ranks} ranks: {v.algorithm} was "
                      f"{'slower within noise' if v.verdict == 'same' else v.verdict} "
                      f"(speedup {v.speedup:.3f}, 95% CI {v.ci_low:.3f}..{v.ci_high:.3f}) -> default")
    console.print(
        f"verified {numbers['compared']} cells: geo-mean speedup over default {numbers['geo_mean_speedup_compared_after']:.3f}x "
        f"(before replacements {numbers['geo_mean_speedup_compared_before']:.3f}x; all {numbers['cells']} cells "
        f"{numbers['geo_mean_speedup_all_cells']:.3f}x); slower beyond noise: {numbers['slower_beyond_noise_before']} "
        f"-> {numbers['slower_beyond_noise_after']} after verify ({numbers['slower_point_estimate_after']} below 1 "
        f"within noise; {len(again)} cells got a second pass)"
        + (f"; files rewritten ({len(replaced)} rules -> default)" if replaced else "; files unchanged")
    )
    return VerifyReport(manifest, verified, numbers, len(replaced))
