"""`tunempi tune`: tune collective algorithm selection on this allocation and write tuning files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.status import Status

from tunempi.bench.protocol import MeasureSettings
from tunempi.cli.bench import wide_console
from tunempi.config import resolve
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP
from tunempi.strategy import DEFAULT_STRATEGY, STRATEGIES
from tunempi.tune.job import (
    TUNE_SETTINGS,
    FilesWritten,
    PointMeasured,
    RoundDone,
    TuneEvent,
    TuneOptions,
    TuneStarted,
    TuningStopped,
    WritingFiles,
    run_tune,
)
from tunempi.units import format_size, parse_duration, parse_size


class TuneProgress:
    """Renders `run_tune`'s events on a Rich console: the plan, a progress bar while tuning (the first
    failure of an algorithm at a scale in full, then a count), the outcome, and the rules written."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.status: Status | None = None
        self.failures: dict[tuple[str, str, int], int] = {}

    def __call__(self, event: TuneEvent) -> None:
        if isinstance(event, TuneStarted):
            self.started(event)
        elif isinstance(event, PointMeasured):
            self.measured(event)
        elif isinstance(event, RoundDone):
            per = " ".join(f"{c} {v:.0%}" for c, v in event.state.per_collective.items())
            self._update(f"converging ({per})", completed=100.0 * event.state.convergence)
        elif isinstance(event, TuningStopped):
            self.stopped(event)
        elif isinstance(event, WritingFiles):
            self.status = self.console.status("writing the tuning files and loading them into the library "
                                              "(smoke run)")
            self.status.start()
        elif isinstance(event, FilesWritten):
            self.written(event)

    def started(self, event: TuneStarted) -> None:
        sizes = event.sizes
        self.console.print(
            f"[bold]{event.library.name}[/] ({event.library.prefix}): tuning {', '.join(event.collectives)} at "
            f"{', '.join(s.label() for s in event.scales)}, {len(sizes)} sizes {format_size(sizes[0])}.."
            f"{format_size(sizes[-1])} ({event.cells} cells, {event.exhaustive_points} exhaustive points), "
            f"strategy {event.strategy}, topology {event.topology}, store {event.db}")
        for collective, reasons in event.excluded.items():
            self.console.print(f"  {collective}: no tuning file can select "
                               + "; ".join(f"{name} ({why})" for name, why in reasons.items()), soft_wrap=True)
        if event.resumed:
            self.console.print(f"resuming: {event.resumed} earlier runs of these points read from the store")
        columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                   TextColumn("{task.fields[points]} runs"), TimeElapsedColumn())
        self.progress = Progress(*columns, console=self.console, transient=False)
        self.task = self.progress.add_task("converging", total=100.0, points=0)
        self.progress.start()

    def measured(self, event: PointMeasured) -> None:
        result = event.result
        if not result.outcome.ok:
            key = (result.point.collective, result.point.algorithm, result.layout.ranks)
            self.failures[key] = self.failures.get(key, 0) + 1
            if self.failures[key] == 1:
                self.console.print(
                    f"[red][FAIL][/] {key[0]} {key[1]} {format_size(result.point.msg_bytes)} at {key[2]} "
                    f"ranks: {result.outcome.status}: {result.outcome.reason}")
        self._update(f"{result.point.collective} {format_size(result.point.msg_bytes)}", points=event.measured)

    def stopped(self, event: TuningStopped) -> None:
        repeated = {k: n for k, n in self.failures.items() if n > 1}
        if repeated:
            self.console.print("failed more than once (not measured further where blocked): " + ", ".join(
                f"{c} {a} at {r} ranks x{n}" for (c, a, r), n in sorted(repeated.items())))
        self.close()
        outcome = event.outcome
        self.console.print(
            f"{outcome.stop_reason}: {outcome.measured} runs measured in {outcome.wall_s:.1f} s "
            f"(benchmark time {outcome.bench_s:.1f} s, {outcome.launches} engine launches, {outcome.failed} failed)")
        if outcome.stop_reason == "interrupted":
            self.console.print("[yellow]interrupted[/]: measured points are kept in the store; rerun to resume.")

    def written(self, event: FilesWritten) -> None:
        self.close()
        manifest = event.manifest
        self.console.print(f"tuning files smoke-checked in {manifest.library.name} and written to "
                           f"{manifest.directory} ({event.manifest_path.name})")
        for collective, rule_set in sorted(manifest.rule_sets.items()):
            for block in rule_set.blocks:
                upto = "+" if block.max_ranks is None else f"..{block.max_ranks}"
                rules = ", ".join(
                    f"{'<=' + format_size(r.max_bytes) if r.max_bytes is not None else 'above'} {r.algorithm}"
                    for r in block.rules)
                self.console.print(f"  {collective} [{block.min_ranks}{upto} ranks]: {rules}", soft_wrap=True)

    def _update(self, description: str, *, completed: float | None = None, points: int | None = None) -> None:
        if self.progress is None or self.task is None:
            return
        if points is None:
            self.progress.update(self.task, description=description, completed=completed)
        else:
            self.progress.update(self.task, description=description, completed=completed, points=points)

    def close(self) -> None:
        """Stop the progress bar or status line (also when tuning failed half-way)."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if self.status is not None:
            self.status.stop()
            self.status = None


def tune_command(
    out: Annotated[Path, typer.Option(help="Directory for the tuning files and manifest.json.")],
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library: {SPEC_HELP} (env TUNEMPI_MPI).")] = None,
    collectives: Annotated[str, typer.Option(help="Collectives, comma list.")] = "allreduce,bcast,allgather,alltoall",
    nodes: Annotated[int, typer.Option(help="Nodes of the allocation (several need Slurm/PBS).")] = 1,
    ppn: Annotated[int | None, typer.Option(help="Processes per node.")] = None,
    ranks: Annotated[int | None, typer.Option(help="Processes (one node): tunes 2, 4, ... up to this.")] = None,
    max_msg: Annotated[str, typer.Option(help="Largest message size (OSU convention), e.g. 1MiB.")] = "1MiB",
    min_msg: Annotated[str, typer.Option(help="Smallest message size.")] = "4",
    strategy: Annotated[str | None, typer.Option(
        help=f"Strategy: {', '.join(STRATEGIES)} (env TUNEMPI_STRATEGY; default {DEFAULT_STRATEGY}).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the strategy.")] = 0,
    timeout: Annotated[str, typer.Option(help="Stop tuning after this long (e.g. 10m) even if not converged.")]
    = "10m",
    topology: Annotated[str | None, typer.Option(
        help="serial (one benchmark at a time), local (all at once, one machine), pattern:REGEX (network "
             "groups from node names) or a file of 'node group' lines (env TUNEMPI_TOPOLOGY).")] = None,
    db: Annotated[str | None, typer.Option(help="Results database (default: $TUNEMPI_DB, else a per-user file).")]
    = None,
    time_cap: Annotated[str, typer.Option(help="Measuring time per point at most.")] = "100ms",
    rel_ci: Annotated[float, typer.Option(help="Stop a point when its median's 95% CI is within +-this.")] = 0.05,
    point_timeout: Annotated[str | None, typer.Option(help="Kill a launch when a point hangs this long.")] = None,
    smoke: Annotated[bool, typer.Option(help="Load the files into the library before reporting success.")] = True,
) -> None:
    """Tune collective algorithms at every sub-scale of the allocation; write smoke-checked tuning files."""
    try:
        settings = MeasureSettings(warmup=TUNE_SETTINGS.warmup, min_iters=TUNE_SETTINGS.min_iters,
                                   max_iters=TUNE_SETTINGS.max_iters, rel_ci=rel_ci,
                                   time_cap_s=parse_duration(time_cap))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if ranks is None and ppn is None and nodes == 1:
        ranks = 2
    options = TuneOptions(
        out=out, collectives=collectives, mpi=mpi, nodes=nodes, ppn=ppn, ranks=ranks,
        max_msg=parse_size(max_msg), min_msg=parse_size(min_msg),
        strategy=resolve(strategy, "STRATEGY", DEFAULT_STRATEGY) or DEFAULT_STRATEGY, seed=seed,
        timeout_s=parse_duration(timeout), topology=resolve(topology, "TOPOLOGY", "serial") or "serial",
        db=Path(db) if db else None, settings=settings,
        point_timeout_s=parse_duration(point_timeout) if point_timeout else None, smoke=smoke,
    )
    progress = TuneProgress(wide_console())
    try:
        report = run_tune(options, progress)
    finally:
        progress.close()
    if report.outcome.stop_reason == "interrupted":
        sys.exit(130)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_command)
