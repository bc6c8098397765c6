"""`tunempi profile [-o FILE] [--mpi SPEC] -- <command...>` and `tunempi profile show FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from tunempi.config import resolve
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP
from tunempi.profile.reader import COUNT_SHAPES, Profile, dominant_shape, load_profile
from tunempi.report.console import output_console
from tunempi.units import format_size

_COMMAND_KEY = "tunempi_profile_command"
DEFAULT_OUTPUT = "tunempi-profile.json"


class _CommandAfterDashes(TyperGroup):
    """A group whose own callback also takes a command after `--` (`tunempi profile -- mpiexec ...`).

    Click would read the first word after `--` as a subcommand name; the command is cut off here
    and handed to the callback through ctx.meta instead.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[_COMMAND_KEY] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)


profile_app = typer.Typer(
    cls=_CommandAfterDashes,
    invoke_without_command=True,
    no_args_is_help=False,
    subcommand_metavar="-- LAUNCH-COMMAND... | show FILE",
    help="Profile an MPI application's communication (PMPI interposer, LD_PRELOAD).\n\n"
    "tunempi profile -o app.json -- mpiexec -n 4 ./app args   then   tunempi profile show app.json",
)
_out = output_console()
_err = output_console(stderr=True)


@profile_app.callback()
def profile(
    ctx: typer.Context,
    output: str | None = typer.Option(
        None, "-o", "--output", help=f"Profile to write (env TUNEMPI_PROFILE_OUT; default {DEFAULT_OUTPUT})."
    ),
    mpi: str | None = typer.Option(
        None, "--mpi", help=f"MPI library: {SPEC_HELP} (env TUNEMPI_MPI; default the library of a launcher the command "
        "names by its path or vendor's name, else the embedded MPICH; a bare mpiexec is the library's own)."
    ),
) -> None:
    """Run `-- <command...>` (e.g. `-- mpiexec -n 4 ./app`) with the profiler preloaded into its ranks."""
    if ctx.invoked_subcommand is not None:
        return
    command = ctx.meta.get(_COMMAND_KEY)
    if not command:
        raise UsageError("give the command to profile after --, e.g. `tunempi profile -- mpiexec -n 4 ./app`, "
                         "or use `tunempi profile show FILE`")
    from tunempi.mpi.discovery import launch_line_library
    from tunempi.profile.run import run_profiled

    library = launch_line_library(mpi, command)
    path = Path(resolve(output, "PROFILE_OUT", DEFAULT_OUTPUT) or DEFAULT_OUTPUT)
    run = run_profiled(command, library, path)
    if not run.written:
        _err.print(
            f"[bold red]error:[/] no profile written (command exit status {run.returncode}); the application must "
            f"reach MPI_Finalize, and its ranks must run {library.name} ({library.prefix})"
            + (f"; {path} was left as it was" if path.exists() else ""))
        raise typer.Exit(run.returncode or 1)  # the application's own status; 1 if it said success
    print_profile(load_profile(run.output), top=10)
    if run.kept_aside:
        _out.print(f"the command failed (exit status {run.returncode}): its profile is in [bold]{run.output}[/]; "
                   f"{path} was left as it was")
    else:
        _out.print(f"profile written to [bold]{run.output}[/]; details: tunempi profile show {run.output}")
    if run.returncode != 0:
        raise typer.Exit(run.returncode)


@profile_app.command("show")
def show(
    file: Path = typer.Argument(..., help="A profile written by `tunempi profile`."),
    top: int = typer.Option(25, "--top", help="Rows of the per-size table (0: all)."),
    per_rank: bool = typer.Option(False, "--ranks", help="Also show the time of every rank."),
) -> None:
    """Where the MPI time goes: per collective, per size and scale, point-to-point sizes, MPI fraction."""
    print_profile(load_profile(file), top=top, per_rank=per_rank)


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole > 0 else "-"


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f}s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f}ms"
    return f"{value * 1e6:.1f}us"


def _size_text(lo: int, hi: int, exact: dict[int, int] | None) -> str:
    if exact is not None:
        return ", ".join(format_size(size) for size in sorted(exact))
    return format_size(hi) if lo == hi else f"{format_size(lo)} - {format_size(hi)}"


def print_profile(profile: Profile, *, top: int = 25, per_rank: bool = False, console: Console | None = None) -> None:
    console = console or _out
    header = profile.header
    library = str(header.get("library", "?")).splitlines()[0] if header.get("library") else "?"
    hosts = header.get("hosts", {})
    console.print(f"[bold]{' '.join(header.get('command', []))}[/]")
    console.print(
        f"{library}; {header.get('ranks')} ranks on {header.get('nodes')} node(s) "
        f"({', '.join(f'{h}: {n}' for h, n in hosts.items())}); run time {_seconds(profile.elapsed_s)}"
    )
    console.print(
        f"time in MPI: [bold]{_pct(profile.mpi_s, profile.wall_s)}[/] of the ranks' run time "
        f"(collectives {_pct(profile.collective_s, profile.wall_s)}, "
        f"point-to-point sends {_pct(profile.p2p_s, profile.wall_s)})"
    )
    from tunempi.profile.advise import shares_caveat

    caveat = shares_caveat(profile)
    if caveat:
        console.print(f"[yellow]caution:[/] {escape(caveat)}")

    by_collective = Table(title="Where the collective time goes (summed over ranks)")
    for column in ("collective", "calls", "time", "% of MPI", "% of run"):
        by_collective.add_column(column, justify="left" if column == "collective" else "right")
    for name, calls, seconds in profile.time_by_collective():
        by_collective.add_row(name, str(calls), _seconds(seconds), _pct(seconds, profile.mpi_s),
                              _pct(seconds, profile.wall_s))
    console.print(by_collective)

    records = sorted(profile.collectives, key=lambda r: -r.time_s)
    shown = records if top <= 0 else records[:top]
    detail = Table(title=f"Per collective, size and scale ({len(shown)} of {len(records)}, most time first)")
    for column in ("collective", "ranks", "nodes x ppn", "size", "calls", "mean", "max", "% MPI"):
        detail.add_column(column, justify="left" if column in ("collective", "size") else "right",
                          no_wrap=column == "collective")
    for r in shown:
        scale = f"{r.nodes}x{r.ppn}" if r.nodes >= 0 else "?"
        detail.add_row(
            r.collective, str(r.comm_size), scale, _size_text(r.size_lo, r.size_hi, r.exact_sizes), str(r.calls),
            _seconds(r.mean_time_s), _seconds(r.time_max_ns * 1e-9), _pct(r.time_s, profile.mpi_s),
        )
    console.print(detail)

    shapes = profile.count_shapes()
    if shapes:
        vector = Table(title="Vector collectives: calls by how their counts differ between ranks (each rank's "
                             "view; gatherv, scatterv: the root's)")
        for column in ("collective", *COUNT_SHAPES, "dominant"):
            vector.add_column(column, justify="left" if column in ("collective", "dominant") else "right")
        for name, counts in shapes.items():
            vector.add_row(name, *(str(counts.get(s, 0)) for s in COUNT_SHAPES), dominant_shape(counts) or "-")
        console.print(vector)

    from tunempi.profile.nonblocking import application_objective, nonblocking_uses

    uses = nonblocking_uses(profile)
    if uses:
        nonblocking = Table(title="Non-blocking collectives: start, wait and completion (means per call; the "
                                  "application's time in them is start + wait; it computes between start and wait "
                                  "for start to completion - start - wait)")
        for column in ("collective", "ranks", "size", "calls", "start", "wait", "start to completion",
                       "computes", "objective"):
            nonblocking.add_column(column, justify="left" if column in ("collective", "size", "objective")
                                   else "right")
        for use in uses:
            nonblocking.add_row(
                use.collective, str(use.comm_size), use.size_text, str(use.calls),
                _seconds(use.start_us * 1e-6), _seconds(use.blocked_us * 1e-6) if use.seen else "-",
                _seconds(use.completion_us * 1e-6) if use.seen else "not seen",
                _seconds((use.window_us or 0.0) * 1e-6) if use.seen else "-", use.objective or "-")
        console.print(nonblocking)
        implied = application_objective(uses)
        console.print(f"objective that fits: {implied.objective or 'not known'} ({escape(implied.reason)}); "
                      "`tune --from-profile` measures them so", soft_wrap=True)

    total_bytes = sum(b.bytes for b in profile.p2p)
    p2p = Table(title="Point-to-point send sizes (all ranks)")
    for column in ("size", "sends", "bytes", "% of bytes", ""):
        p2p.add_column(column, justify="left" if column in ("size", "") else "right")
    for bucket in profile.p2p:
        share = bucket.bytes / total_bytes if total_bytes else 0.0
        p2p.add_row(bucket.label, str(bucket.calls), str(bucket.bytes), _pct(bucket.bytes, total_bytes),
                    "#" * round(30 * share))
    console.print(p2p)

    if per_rank:
        ranks = Table(title="Per rank")
        for column in ("rank", "host", "run time", "in MPI", "% MPI"):
            ranks.add_column(column, justify="left" if column == "host" else "right")
        for rank in profile.ranks:
            ranks.add_row(str(rank.rank), rank.host, _seconds(rank.wall_ns * 1e-9), _seconds(rank.mpi_ns * 1e-9),
                          _pct(rank.mpi_ns, rank.wall_ns))
        console.print(ranks)


def register(app: typer.Typer) -> None:
    app.add_typer(profile_app, name="profile")
