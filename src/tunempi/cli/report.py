"""`tunempi report`: tables and PNG plots (optionally one HTML page) of a tuning directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tunempi.cli.paths import directory_option
from tunempi.report.console import output_console
from tunempi.report.tuning import (
    apply_commands,
    exclusions,
    rules_table,
    speedup_table,
    summary_lines,
    write_html,
    write_plots,
)
from tunempi.tune.manifest import Manifest


def report_command(
    tuning: Annotated[Path, typer.Option(help="A tuning directory written by `tunempi tune`.",
                                                  callback=directory_option)],
    html: Annotated[Path | None, typer.Option(help="Also write one self-contained HTML page here.")] = None,
    plots: Annotated[Path | None, typer.Option(help="Directory for the PNG plots (default: DIR/report).",
                                                         callback=directory_option)]
    = None,
) -> None:
    """Show what was tuned: rules, speedup over default, plots of speedup, algorithm map, training curve."""
    console = output_console()
    manifest = Manifest.load(tuning)
    for line in summary_lines(manifest):
        console.print(line)
    console.print(rules_table(manifest))
    console.print(speedup_table(manifest))
    excluded = exclusions(manifest)
    if excluded:
        console.print("excluded from the tuning files:")
        for entry in excluded:
            console.print("  " + escape("; ".join(f"{k} {v}" for k, v in entry.items())), soft_wrap=True)
    console.print("apply it:")
    for _what, command in apply_commands(manifest):
        console.print(f"  {escape(command)}", soft_wrap=True)
    written = write_plots(manifest, plots or tuning / "report")
    console.print("plots: " + ", ".join(str(p) for p in written.values()))
    if html is not None:
        console.print(f"html: {write_html(manifest, written, html)}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
