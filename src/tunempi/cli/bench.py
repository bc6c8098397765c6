"""`tunempi bench`: an exhaustive sweep of collective algorithms into the results store."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tunempi.bench.engine import Layout, PointOutcome
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.summary import FastestRow, fastest_table
from tunempi.bench.sweep import MODES, BenchPoint, Sweep, plan_points
from tunempi.bench.validate import check_engine_collective, check_ranks, check_size, parse_algorithms
from tunempi.config import resolve, resolve_db
from tunempi.errors import UsageError
from tunempi.launch.hosts import NodeAllocation, local_cores
from tunempi.launch.launchers import BINDINGS
from tunempi.mpi.discovery import SPEC_HELP, adapter_for, resolve_library
from tunempi.store.results import Measurement, ResultStore
from tunempi.units import format_size, parse_duration, parse_sizes

DEFAULT_SIZES = "8,1KiB,64KiB,1MiB"


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


def _layout(options: BenchOptions) -> Layout:
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


BIND_CHOICES: tuple[str, ...] = ("auto", *BINDINGS)


def resolve_binding(choice: str, layout: Layout, allocation: NodeAllocation | None = None) -> str | None:
    """The binding for `choice`; "auto" binds each rank to a core when the ranks fit the cores of this one
    node, else leaves placement to the launcher (oversubscribed, or several nodes). Measured with MPICH at 2 ranks on a busy 2-core
    node: unbound, both ranks were sometimes put on the same core and every collective of that launch
    took scheduler ticks (8 B allreduce: 12 ms instead of 1.3 us); bound, never (docs/bench.md)."""
    if choice != "auto":
        return choice
    fits = layout.nodes == 1 and allocation is None and layout.ranks <= local_cores()
    return "core" if fits else None


def run_bench(options: BenchOptions, console: Console) -> list[FastestRow]:
    """Validate, sweep the points not measured yet (each stored as it arrives), print the summary.

    Ctrl-C stops the sweep; what was measured is kept and summarised, then KeyboardInterrupt propagates.
    """
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
    layout = _layout(options)
    for collective in collectives:  # everything typed is checked before a library is probed or launched
        for size in [] if collective == "barrier" else sizes:
            check_size(collective, size, layout.ranks)
    allocation = (
        NodeAllocation.from_hostfile(options.hostfile) if options.hostfile
        else NodeAllocation.from_environment() if layout.nodes > 1 else None
    )
    if layout.nodes > 1 and allocation is None:
        raise UsageError(
            f"--nodes {layout.nodes} needs a host list: run inside a Slurm or PBS job, or give --hostfile"
        )
    if allocation is not None and layout.nodes > allocation.nodes:
        raise UsageError(f"--nodes {layout.nodes} but the allocation has {allocation.nodes} node(s)")
    library = resolve_library(options.mpi)
    adapter = adapter_for(library)
    algorithms = {c: parse_algorithms(adapter, c, options.algorithms) for c in dict.fromkeys(collectives)}
    points = plan_points(algorithms, sizes, ranks=layout.ranks, repeat=options.repeat)
    db_path = resolve_db(options.db)

    with ResultStore(db_path) as store:
        sweep = Sweep(
            library, adapter, layout, mode=options.mode, settings=options.settings, store=store,
            allocation=allocation, bind=resolve_binding(options.bind, layout, allocation),
            point_timeout_s=options.point_timeout_s,
            strict=options.strict,
        )
        todo = sweep.pending(points, force=options.force)
        console.print(
            f"[bold]{library.name}[/] ({library.prefix}), {layout.ranks} ranks"
            + (f" on {layout.nodes} nodes" if layout.nodes > 1 else "")
            + f", mode {options.mode}: {len(points)} points, {len(points) - len(todo)} already in {db_path}"
        )
        counts = {"ok": 0, "wrong": 0, "failed": 0}
        interrupted = False
        try:
            if todo:
                _sweep_with_progress(sweep, todo, console, counts)
        except KeyboardInterrupt:
            interrupted = True
            console.print("[yellow]interrupted[/]: measured points are kept; rerun to resume.")
        measured = store.query(
            library_fingerprint=library.fingerprint, system=sweep.system, ranks=layout.ranks,
            nodes=layout.nodes, ppn=layout.ppn_or_derived, collective=list(algorithms),
            msg_bytes=sorted({p.msg_bytes for p in points}),
        )
        wanted = {(p.collective, p.algorithm, p.msg_bytes, p.run) for p in points}
        rows = fastest_table(m for m in measured if (m.collective, m.algorithm, m.msg_bytes, m.run) in wanted)
        console.print(fastest_rich_table(rows, f"{library.name}, {layout.ranks} ranks: fastest algorithm"))
        if todo:
            console.print(
                f"this run: {counts['ok']} measured, {counts['wrong']} with wrong results, "
                f"{counts['failed']} failed; engine launches: {sweep.launches}"
            )
        if interrupted:
            raise KeyboardInterrupt
    return rows


def _sweep_with_progress(sweep: Sweep, todo: list[BenchPoint], console: Console, counts: dict[str, int]) -> None:
    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("measuring", total=len(todo))

        def on_result(point: BenchPoint, outcome: PointOutcome, measurement: Measurement) -> None:
            name = f"{point.collective} {point.algorithm} {format_size(point.msg_bytes)}"
            if not outcome.ok:
                counts["failed"] += 1
                progress.console.print(f"[red][FAIL][/] {name}: {outcome.status}: {outcome.reason}")
            elif measurement.errors:
                counts["wrong"] += 1
                progress.console.print(
                    f"[red][WRONG][/] {name}: {measurement.errors} iterations gave wrong results"
                )
            else:
                counts["ok"] += 1
            progress.update(task, advance=1, description=f"{name}")

        sweep.run(todo, on_result)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fastest_rich_table(rows: list[FastestRow], title: str) -> Table:
    table = Table(title=title)
    for header in ("collective", "size", "fastest", "median us", "default us", "speedup", "algorithms", "failed"):
        table.add_column(header, justify="left" if header in ("collective", "fastest") else "right")
    for row in rows:
        speedup = row.speedup
        table.add_row(
            row.collective, format_size(row.msg_bytes), row.fastest, _us(row.fastest_us), _us(row.default_us),
            "-" if speedup is None else f"{speedup:.2f}x", str(row.algorithms), str(row.failed or ""),
        )
    return table


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 120 columns when output goes to a file or pipe."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


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
    warmup: Annotated[int, typer.Option(help="Untimed (checked) iterations before each point.")] = 2,
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
        hostfile=hostfile,
    )
    try:
        run_bench(options, wide_console())
    except KeyboardInterrupt:
        sys.exit(130)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench_command)


__all__ = [
    "BenchOptions", "bench_command", "fastest_rich_table", "register", "resolve_binding", "run_bench", "wide_console",
]
