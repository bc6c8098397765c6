"""`tunempi compare`: parse, call compare.session, render.

    tunempi compare --variant [NAME=]DIR|FILE [--variant ...] [--metric REGEX [--higher-is-better]]
                    [--result REGEX ...] [--result-command CMD] [--tolerance REL] [--min-runs N] [--max-runs N]
                    [--width W] [--budget S] [--timeout S] [--seed N] [--mpi SPEC] [--db PATH]
                    [--format table|json] [--no-record] -- mpiexec -n 4 ./app
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tunempi.compare.results import DEFAULT_TOLERANCE
from tunempi.compare.session import (
    DEFAULT_MAX_RUNS,
    DEFAULT_MIN_RUNS,
    DEFAULT_WIDTH,
    CompareListener,
    CompareOutcome,
    CompareRequest,
    CompareSession,
    VariantVerdict,
    prepare_compare,
    run_compare,
)
from tunempi.errors import UsageError
from tunempi.launch.signals import interrupt_status
from tunempi.report.console import output_console
from tunempi.store.comparisons import ComparisonRun

FORMATS = ("table", "json")
_out = output_console()
_err = output_console(stderr=True)
_STYLE = {"faster": "green", "slower": "red", "failed": "red", "wrong results": "bold red"}


def compare(
    command: list[str] = typer.Argument(None, help="The application command, after '--'."),
    variant: list[str] = typer.Option(None, "--variant", help="[NAME=]PATH: a tuning directory (tune, verify, "
                                      "online best) or an env file (search's best.env, NAME=value lines); "
                                      "repeatable. The library's default is always run as the baseline."),
    metric: str | None = typer.Option(None, "--metric", help="Regex whose first group is the figure of merit "
                                      "(default: the run's wall time)."),
    higher_is_better: bool = typer.Option(False, "--higher-is-better", help="The --metric is a rate (GFLOP/s, "
                                          "steps/s): higher is better."),
    result: list[str] = typer.Option(None, "--result", help="Regex for what the application computed (every "
                                     "match, its groups): it must be the default's in every run; repeatable."),
    result_command: str | None = typer.Option(None, "--result-command", help="Shell command run after each run "
                                              "(the run's output in $TUNEMPI_RUN_OUTPUT); its stdout is the result."),
    tolerance: float = typer.Option(DEFAULT_TOLERANCE, "--tolerance", help="Relative tolerance for numbers in "
                                    "the results."),
    min_runs: int | None = typer.Option(None, "--min-runs", help=f"Runs of each arm at least (env "
                                        f"TUNEMPI_COMPARE_MIN_RUNS; default {DEFAULT_MIN_RUNS})."),
    max_runs: int | None = typer.Option(None, "--max-runs", help=f"Runs of each arm at most (env "
                                        f"TUNEMPI_COMPARE_MAX_RUNS; default {DEFAULT_MAX_RUNS})."),
    width: float | None = typer.Option(None, "--width", help=f"Stop once every speedup's 95 % interval is this "
                                       f"narrow (high - low; default {DEFAULT_WIDTH})."),
    budget: float | None = typer.Option(None, "--budget", help="Seconds to spend at most (checked between "
                                        "blocks)."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds before a run is killed (default: 10x "
                                         "the default's first run, at least 60 s)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the shuffled run order."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI library (default: the tuning directories', else the "
                                   "library of a launcher the command names by its path or vendor's name, else the "
                                   "embedded MPICH; a bare mpiexec is the library's own)."),
    db: str | None = typer.Option(None, "--db", help="Results database recording every run (env TUNEMPI_DB)."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
    no_record: bool = typer.Option(False, "--no-record", help="Do not write the verdicts into the tuning "
                                   "directories' manifests."),
    restart: bool = typer.Option(False, "--restart", help="Forget the runs recorded for this same comparison "
                                 "(default: continue them)."),
) -> None:
    """Is the application faster with a tuning, and does it compute the same? An A/B comparison of the
    application itself against the library's default, with its 95 % interval."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    if not command:
        raise UsageError("give the application command after '--', e.g. -- mpiexec -n 4 ./app")
    request = CompareRequest(list(command), list(variant or []), mpi, metric, higher_is_better,
                             tuple(result or ()), result_command, tolerance, min_runs, max_runs, width, budget,
                             timeout, seed, db, not no_record, restart)
    with _err.status("checking the variants and finding the MPI library ..."):
        session = prepare_compare(request)
    progress = _Progress()
    try:
        with progress:
            outcome = run_compare(session, progress)
    except KeyboardInterrupt as exc:
        _err.print(f"interrupted: {progress.done} runs are recorded (comparison {progress.comparison_id} in "
                   f"{session.db_path}); rerun the same command to continue")
        raise typer.Exit(interrupt_status(exc)) from None
    if fmt == "json":
        sys.stdout.write(json.dumps(outcome.to_dict(), indent=2) + "\n")
    else:
        _render(session, outcome)
    if any(v.verdict in ("failed", "wrong results") for v in outcome.verdicts):
        raise typer.Exit(3)


class _Progress(CompareListener):
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or _err
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.progress = Progress(*columns, console=self.console, transient=True)
        self.task = self.progress.add_task("comparing", total=None)
        self.done = 0
        self.comparison_id = ""

    def __enter__(self) -> _Progress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def started(self, session: CompareSession, comparison_id: str, resumed: int) -> None:
        self.comparison_id = comparison_id
        arms = ", ".join(v.name for v in session.arms)
        self.console.print(f"comparing {escape(arms)} on `{escape(' '.join(session.command))}`: "
                           f"{escape(session.describe_metric())}; result check: {escape(session.check.describe())}; "
                           f"{session.min_runs}..{session.max_runs} runs each")
        for line in session.notes:
            self.console.print(f"warning: {escape(line)}")
        if resumed:
            self.console.print(f"continuing comparison {comparison_id}: {resumed} runs already recorded")
        self.done = resumed
        self.progress.update(self.task, completed=resumed)

    def ran(self, run: ComparisonRun, done: int, planned: int) -> None:
        self.done = done
        status = "" if run.ok else f" [red]{run.status}[/]: {escape(run.reason[:100])}"
        self.progress.update(self.task, completed=done, total=planned,
                             description=f"block {run.block + 1} {escape(run.variant)}")
        if not self.console.is_terminal:  # a log: the bar draws nothing there, so every run is a line
            took = f", {run.wall_s:.1f} s" if run.wall_s is not None else ""
            how = f"ok{took}" if run.ok else f"{run.status}: {escape(run.reason[:100])}"
            self.console.print(f"run {done}/{planned}: block {run.block + 1} {escape(run.variant)}: {how}",
                               highlight=False)
        elif status:
            self.console.print(f"block {run.block + 1} {escape(run.variant)}{status}")

    def block_done(self, block: int, verdicts: Sequence[VariantVerdict]) -> None:
        pass


def _render(session: CompareSession, outcome: CompareOutcome) -> None:
    table = Table(title=f"{' '.join(session.command)}: {outcome.metric}")
    for name, justify in (("variant", "left"), ("runs", "right"), ("mean", "right"), ("speedup", "right"),
                          ("95% interval", "right"), ("verdict", "left"), ("results", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    mean = f"{outcome.default_mean:.4g}" if outcome.default_mean is not None else "-"
    table.add_row("default", str(outcome.default_runs), mean, "1", "", "baseline", "reference")
    for v in outcome.verdicts:
        c = v.comparison
        style = _STYLE.get(v.verdict, "")
        table.add_row(escape(v.variant.name), str(v.runs), f"{v.mean_value:.4g}" if v.mean_value else "-",
                      f"{c.speedup:.3f}x" if c else "-", f"{c.low:.3f}x..{c.high:.3f}x" if c else "-",
                      f"[{style}]{v.verdict}[/]" if style else v.verdict, v.results)
    _out.print(table)
    for v in outcome.verdicts:
        _out.print(f"{escape(v.variant.name)} ({escape(v.variant.source)}): {v.verdict}: {escape(v.reason)}")
    if outcome.default_results_vary:
        _out.print(f"[yellow]the result check cannot judge the variants:[/] {escape(outcome.default_results_vary)}; "
                   "loosen --tolerance or check a deterministic result")
    _out.print(f"stopped after {outcome.blocks} blocks: {outcome.stop_reason}; comparison {outcome.comparison_id} "
               f"in {outcome.db_path}")
    for path in outcome.recorded:
        _out.print(f"recorded the verdict in {path}")


def register(app: typer.Typer) -> None:
    app.command("compare", context_settings={"allow_interspersed_args": False})(compare)
