"""`tunempi verify`: tuned against default, interleaved in the same launch; slower rules go back to default."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tunempi.bench.protocol import MeasureSettings
from tunempi.cli.paths import directory_option
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP
from tunempi.report.console import VerifyProgress, output_console, print_verify_report
from tunempi.tune.verify_run import VERIFY_SETTINGS, run_verify
from tunempi.units import parse_duration


def verify_command(
    tuning: Annotated[Path, typer.Option(help="A tuning directory written by `tunempi tune`.",
                                                  callback=directory_option)],
    repeats: Annotated[int, typer.Option(help="Tuned/default pairs per cell, each repetition in a fresh launch (>= 2).")] = 3,
    time_cap: Annotated[str, typer.Option(help="Measuring time per run at most.")] = "100ms",
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}); default: the "
                                            "manifest's.")] = None,
    smoke: Annotated[bool, typer.Option(help="Smoke-check rewritten files in the library.")] = True,
    hostfile: Annotated[Path | None, typer.Option(
        help="Hosts for a multi-node tuning (default: the Slurm/PBS allocation, else TUNEMPI_HOSTFILE).")] = None,
) -> None:
    """Benchmark tuned against default side by side; replace rules slower than default beyond noise."""
    try:
        settings = MeasureSettings(warmup=VERIFY_SETTINGS.warmup, min_iters=VERIFY_SETTINGS.min_iters,
                                   max_iters=VERIFY_SETTINGS.max_iters, rel_ci=VERIFY_SETTINGS.rel_ci,
                                   time_cap_s=parse_duration(time_cap))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    console = output_console()
    with VerifyProgress(console) as progress:
        report = run_verify(tuning, repeats=repeats, settings=settings, mpi=mpi,
                            smoke=smoke,
                            listener=progress, hostfile=hostfile)
    print_verify_report(console, report)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_command)
