"""`tunempi bench`: parse, call bench.session.run_bench, render its progress and the fastest-algorithm table."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tunempi.bench.engine import PointOutcome
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.session import (
    DEFAULT_SIZES,
    BenchListener,
    BenchOptions,
    BenchPlan,
    BenchReport,
    OverlapRow,
    run_bench,
)
from tunempi.bench.summary import FastestRow
from tunempi.bench.sweep import BenchPoint
from tunempi.config import resolve
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP
from tunempi.report.console import output_console
from tunempi.store.results import Measurement
from tunempi.units import format_size, parse_duration


class BenchProgress(BenchListener):
    """`run_bench`'s progress on a console: the plan, a bar over the points, each failure as it happens."""

    def __init__(self, console: Console) -> None:
        self.console = console
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TimeRemainingColumn())
        self.progress = Progress(*columns, console=console, transient=False)
        self.task: TaskID | None = None

    def __enter__(self) -> BenchProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def started(self, plan: BenchPlan) -> None:
        layout = plan.layout
        self.console.print(
            f"[bold]{plan.library.name}[/] ({plan.library.prefix}), {layout.ranks} ranks"
            + (f" on {layout.nodes} nodes" if layout.nodes > 1 else "")
            + f", mode {plan.mode}: {len(plan.points)} points, {len(plan.points) - len(plan.todo)} already in {plan.db}"
        )
        if plan.todo:
            self.progress.start()
            self.task = self.progress.add_task("measuring", total=len(plan.todo))

    def measured(self, point: BenchPoint, outcome: PointOutcome, measurement: Measurement) -> None:
        name = f"{point.collective} {point.algorithm} {format_size(point.msg_bytes)}"
        if outcome.not_usable:
            self.progress.console.print(f"[yellow][not usable here][/] {name}: the library cannot run it for this call")
        elif not outcome.ok:
            self.progress.console.print(f"[red][FAIL][/] {name}: {outcome.status}: {escape(outcome.reason)}")
        elif measurement.errors:
            self.progress.console.print(f"[red][WRONG][/] {name}: {measurement.errors} iterations gave wrong results")
        if self.task is not None:
            self.progress.update(self.task, advance=1, description=name)


def show_bench_report(console: Console, report: BenchReport) -> None:
    plan = report.plan
    if report.interrupted:
        console.print("[yellow]interrupted[/]: measured points are kept; rerun to resume.")
    console.print(fastest_rich_table(report.rows, f"{plan.library.name}, {plan.layout.ranks} ranks: fastest algorithm"))
    if report.overlap:
        console.print(overlap_rich_table(report.overlap, f"{plan.library.name}, {plan.layout.ranks} ranks: "
                                                         "non-blocking overlap (OSU's method)"))
    if plan.todo:
        counts = report.counts
        console.print(f"this run: {counts['ok']} measured, {counts['wrong']} with wrong results, "
                      f"{counts['failed']} failed, {counts.get('not usable', 0)} not usable here; "
                      f"engine launches: {report.launches}")


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fastest_rich_table(rows: list[FastestRow], title: str) -> Table:
    table = Table(title=title)
    for header in ("collective", "size", "fastest", "median us", "default us", "speedup", "algorithms", "failed"):
        table.add_column(header, justify="left" if header in ("collective", "fastest") else "right")
    for row in rows:
        speedup = row.speedup
        table.add_row(
            escape(row.collective), format_size(row.msg_bytes), row.fastest, _us(row.fastest_us), _us(row.default_us),
            "-" if speedup is None else f"{speedup:.2f}x", str(row.algorithms), str(row.failed or ""),
        )
    return table


def overlap_rich_table(rows: list[OverlapRow], title: str) -> Table:
    table = Table(title=title)
    for header in ("collective", "size", "algorithm", "pure us", "overlapped us", "compute us", "overlap %",
                   "by rank %"):
        table.add_column(header, justify="left" if header in ("collective", "algorithm") else "right")
    for row in sorted(rows, key=lambda r: (r.collective, r.msg_bytes, r.run)):
        table.add_row(row.collective, format_size(row.msg_bytes), row.algorithm, _us(row.pure_us),
                      _us(row.overlapped_us), _us(row.compute_us), f"{row.overlap_pct:.1f}",
                      "/".join(f"{pct:.0f}" for pct in row.overlap_pct_ranks) or "-")
    return table


def bench_command(
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library: {SPEC_HELP} (env TUNEMPI_MPI).")] = None,
    collectives: Annotated[str, typer.Option(help="Collectives, comma list (e.g. allreduce,bcast).")] = "allreduce",
    algorithms: Annotated[
        str, typer.Option(help="'all' (every algorithm plus the library default), or a comma list of names.")
    ] = "all",
    sizes: Annotated[str, typer.Option(help="Message sizes (OSU convention): 8,1KiB,64KiB or a range 1:1MiB.")]
    = DEFAULT_SIZES,
    ranks: Annotated[int | None, typer.Option(help="Processes (default: nodes x ppn, else 2).")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes (needs an allocation: Slurm, PBS or hostfile).")] = None,
    ppn: Annotated[int | None, typer.Option(help="Processes per node.")] = None,
    repeat: Annotated[int, typer.Option(help="Repetitions of every point (separate runs in the store).")] = 1,
    db: Annotated[str | None, typer.Option(help="Results database (default: $TUNEMPI_DB, else a per-user file).")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="Measure again points already in the store.")] = False,
    mode: Annotated[
        str | None,
        typer.Option(help="mpit: switch algorithms at run time in one launch; env: one launch per algorithm "
                          "(env TUNEMPI_BENCH_MODE)."),
    ] = None,
    time_cap: Annotated[str, typer.Option(help="Time spent measuring each point at most (e.g. 1s, 200ms).")]
    = "1s",
    rel_ci: Annotated[float, typer.Option(help="Stop a point when its median's 95% CI is within +-this.")] = 0.05,
    min_iters: Annotated[int, typer.Option(help="Iterations per point at least.")] = 10,
    max_iters: Annotated[int, typer.Option(help="Iterations per point at most.")] = 1000,
    warmup: Annotated[int, typer.Option(help="Untimed (checked) iterations before each point (fewer if they "
                                             "take a quarter of its time cap).")] = 64,
    timeout: Annotated[
        str | None, typer.Option(help="Kill the launch when a point gives no result in this time (default: "
                                      "30s + 5 x time cap).")
    ] = None,
    bind: Annotated[
        str, typer.Option(help="Bind ranks: auto (to cores when they fit this node, else the launcher's "
                               "default), core, none.")
    ] = "auto",
    hostfile: Annotated[
        str | None, typer.Option(help="Hosts to run on (default with --nodes: the Slurm/PBS allocation).")
    ] = None,
    distributions: Annotated[
        str, typer.Option("--distributions", help="Vector collectives (allgatherv, alltoallv, gatherv, "
                          "scatterv, alltoallw): how their blocks differ between ranks around the size, comma list of "
                          "uniform (equal, as OSU), skewed (rank r sends 2(r+1)/(ranks+1) x the size), sparse "
                          "(alltoallv and alltoallw to "
                          "the next rank only, allgatherv and gatherv from the even ranks only, scatterv to the even "
                          "ranks only). The other collectives are uniform.")
    ] = "uniform",
    overlap: Annotated[
        bool, typer.Option("--overlap", help="Non-blocking collectives (iallreduce, ibcast, ialltoall, iallgather): "
                           "also measure how much of the collective a computation of its own length hides (OSU's "
                           "overlap %); not stored, so those points are measured again.")
    ] = False,
    objective: Annotated[
        str, typer.Option("--objective", help="What a non-blocking collective's point measures and is ranked by: "
                          "latency (start + MPI_Wait, as OSU's pure time), time (start + a computation as long as "
                          "the library default's latency at that size + MPI_Wait, the same computation for every "
                          "algorithm), overlap (the time NOT hidden behind a computation as long as the point's own "
                          "latency). Stored per objective; blocking collectives ignore it.")
    ] = "latency",
    strict: Annotated[
        bool, typer.Option("--strict/--no-strict", help="Mode mpit: make an algorithm that cannot take a call "
                                                        "fail it instead of silently running another (MPICH).")
    ] = True,
) -> None:
    """Measure every algorithm of the chosen collectives at the chosen sizes and show the fastest."""
    try:
        settings = MeasureSettings(
            warmup=warmup, min_iters=min_iters, max_iters=max_iters, rel_ci=rel_ci,
            time_cap_s=parse_duration(time_cap),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = BenchOptions(
        mpi=mpi, collectives=collectives, algorithms=algorithms, sizes=sizes, ranks=ranks, nodes=nodes, ppn=ppn,
        repeat=repeat, db=db, force=force, mode=resolve(mode, "BENCH_MODE", "mpit") or "mpit", settings=settings,
        point_timeout_s=parse_duration(timeout) if timeout is not None else None, bind=bind, strict=strict,
        hostfile=hostfile, distributions=distributions, overlap=overlap, objective=objective,
    )
    console = output_console()
    with BenchProgress(console) as progress:
        report = run_bench(options, progress)
    show_bench_report(console, report)
    if report.interrupted:
        sys.exit(130)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_command)


__all__ = ["BenchProgress", "bench_command", "fastest_rich_table", "overlap_rich_table", "register",
           "show_bench_report"]
