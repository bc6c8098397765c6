"""`tunempi advise --profile FILE [--mpi SPEC] --dataset PATH`: what is worth tuning for this application."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from tunempi.config import resolve
from tunempi.errors import UsageError
from tunempi.profile.advise import Advice, DatasetSource, advise, tune_command
from tunempi.profile.reader import load_profile
from tunempi.store.dataset import iter_dataset
from tunempi.units import format_size

_out = Console()


def _us(value: float) -> str:
    return f"{value:.2f}us"


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f}s"
    return f"{value * 1e3:.2f}ms" if value >= 1e-3 else f"{value * 1e6:.2f}us"


def print_advice(advice: Advice, mpi_spec: str, knobs: list[str], *, top: int, console: Console) -> None:
    table = Table(title="Collectives the application uses (most predicted saving first)")
    for column in ("collective", "ranks", "nodes x ppn", "size", "calls/rank", "% of run", "default",
                   "best known", "source", "saving/run"):
        table.add_column(column, justify="left" if column in ("collective", "size", "best known", "source")
                         else "right", no_wrap=column == "collective")
    for cell in advice.cells[: top if top > 0 else None]:
        row = cell.usage
        perf = cell.performance
        table.add_row(
            row.collective, str(row.comm_size), f"{row.nodes}x{row.ppn}", format_size(row.msg_size),
            f"{cell.calls_per_rank:.0f}", f"{100 * cell.share_of_run:.1f}%",
            _us(perf.default_us) if perf else "-",
            f"{perf.best_algorithm} {_us(perf.best_us)}" if perf else "-",
            perf.source if perf else "unknown", _seconds(cell.saving_s) if perf else "-",
        )
    console.print(table)
    if advice.worth_tuning:
        savings = ", ".join(f"{name} {_seconds(advice.saving_by_collective[name])}" for name in advice.worth_tuning)
        console.print(f"worth tuning (predicted saving per run): {savings}")
        console.print(f"  {tune_command(advice, mpi_spec)}")
    else:
        console.print("no collective is worth tuning: the known savings are below 1% of the run time "
                      "(or nothing is known about the cells it uses)")
    eager = advice.eager
    if eager is None:
        return
    share = f"{100 * eager.fraction:.0f}% of point-to-point bytes are in 2KiB - 64KiB"
    if not eager.search or eager.busiest is None:
        console.print(f"eager limit: not worth searching ({share}, threshold {100 * eager.threshold:.0f}%)")
        return
    console.print(f"eager limit: worth searching ({share}; busiest {eager.busiest.label}); "
                  f"search {format_size(eager.low)} - {format_size(eager.high)} (log scale)")
    if not knobs:
        console.print("  the threshold knob of this library/transport is not known to tunempi yet")
    for knob in knobs:
        name = knob.split(" ")[0]
        console.print(f"  [[parameters]] name = \"{name}\"  kind = \"int\"  low = {eager.low}  "
                      f"high = {eager.high}  log = true   # {knob}")


def advise_command(
    profile: Path = typer.Option(..., "--profile", help="A profile written by `tunempi profile`."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI library (prefix, or 'mpich'/'openmpi'); env TUNEMPI_MPI."),
    dataset: Path | None = typer.Option(
        None, "--dataset", help="Benchmark dataset (CSV/CSV.gz) with the library's measurements; env TUNEMPI_DATASET."),
    top: int = typer.Option(25, "--top", help="Rows of the table (0: all)."),
) -> None:
    """Which collectives are worth tuning for this application, and whether the eager limit is."""
    from tunempi.profile.stopgap import eager_threshold_knobs, resolve_library  # TODO(mpi/): discovery

    dataset_path = resolve(str(dataset) if dataset else None, "DATASET")
    if dataset_path is None:
        raise UsageError("advice needs measurements: give --dataset PATH (a benchmark dataset of this library); "
                         "the results store (--db) is not wired in yet")
    library = resolve_library(mpi)
    rows = list(iter_dataset(dataset_path))
    advice = advise(load_profile(profile), DatasetSource(rows))
    measured_with = sorted({f"{row.library} ({row.system})" for row in rows})
    _out.print(f"measurements from {dataset_path}: {', '.join(measured_with) or 'none'}; "
               f"advice for {library.name}: they apply only if they were measured with it")
    print_advice(advice, mpi or library.name, eager_threshold_knobs(library), top=top, console=_out)


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_command)
