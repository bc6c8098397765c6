"""`tunempi search`: parse, call search.session (application) or search.evaluate (landscapes), render.

    tunempi search --space SPACE|auto [--strategy S] [--budget N] [--repeats K] [--timeout S]
                   [--metric REGEX] [--mpi SPEC|none] [--db PATH] [--observe NAME=REGEX] [--out DIR]
                   -- mpiexec -n 4 ./app
    tunempi search --simulate LANDSCAPE|all [--strategy S | --compare all|S1,S2] [--budget N] [--seeds N]
                   [--format table|json]
"""

from __future__ import annotations

import json
import sys

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tunempi.cli.paths import directory_option
from tunempi.config import int_setting, resolve
from tunempi.errors import UsageError
from tunempi.launch.signals import interrupt_status
from tunempi.report.console import output_console
from tunempi.search import STRATEGY_NAMES, strategy_class
from tunempi.search.base import Trial
from tunempi.search.session import (
    DEFAULT_OUT,
    DEFAULT_STRATEGY,
    SearchListener,
    SearchOutcome,
    SearchRequest,
    prepare_search,
    run_application_search,
)
from tunempi.search.verify import VerificationRun

FORMATS = ("table", "json")

_out = output_console()
_err = output_console(stderr=True)


def search(
    command: list[str] = typer.Argument(None, help="The application command, after '--'."),
    space: str | None = typer.Option(None, "--space", help="Parameter space: .toml, .json or a PTF file, or "
                                     "'auto' (built from the library's parameters)."),
    strategy: str | None = typer.Option(
        None, "--strategy", help=f"One of {', '.join(STRATEGY_NAMES)} (env TUNEMPI_SEARCH_STRATEGY; default: "
        f"the PTF file's SEARCH=, else {DEFAULT_STRATEGY})."),
    budget: int | None = typer.Option(None, "--budget", help="Trials (runs) to spend (env TUNEMPI_SEARCH_BUDGET; "
                                      "default 50; resumed trials count)."),
    repeats: int | None = typer.Option(None, "--repeats", help="Best-vs-default verification pairs (env "
                                       "TUNEMPI_SEARCH_REPEATS; default 5; 0 skips verification)."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds before a run is killed and penalised."),
    metric: str | None = typer.Option(None, "--metric", help="Regex whose first group is the objective "
                                      "(default: wall time), e.g. 'Time in seconds = (\\S+)'."),
    seed: int = typer.Option(0, "--seed", help="Seed of the strategy (and of the first simulated seed)."),
    out: str | None = typer.Option(None, "--out", help=f"Directory for the env file and report (env "
                                   f"TUNEMPI_SEARCH_OUT; default ./{DEFAULT_OUT}).", callback=directory_option),
    simulate: str | None = typer.Option(None, "--simulate", help="Run on a built-in landscape (or 'all') "
                                        "instead of an application."),
    compare: str | None = typer.Option(None, "--compare", help="With --simulate: 'all' or a comma list of "
                                       "strategies."),
    seeds: int = typer.Option(10, "--seeds", help="With --simulate: number of seeds per strategy."),
    fmt: str = typer.Option("table", "--format", help="With --simulate: table or json."),
    mpi: str | None = typer.Option(None, "--mpi", help="The MPI library whose parameters are searched: mpich, "
                                   "openmpi, an mpicc or a prefix (env TUNEMPI_MPI; default: the library of the "
                                   "command's mpiexec/mpirun, else the embedded MPICH); 'none': plain env vars, "
                                   "names not checked."),
    db: str | None = typer.Option(None, "--db", help="Results database recording every trial (env TUNEMPI_DB; "
                                  "default: the per-user results.sqlite)."),
    observe: list[str] = typer.Option(None, "--observe", help="NAME=REGEX: a number from the output recorded "
                                      "with each trial (rl's state); repeatable."),
    state: str | None = typer.Option(None, "--state", help="What each trial records beside its value (rl's state, "
                                     "AITuning's): 'interposer' (every MPI_T pvar the library offers, time in MPI, "
                                     "per-collective calls and times, by preloading the profiling interposer; the "
                                     "default with --strategy rl) or 'output' (--observe only)."),
) -> None:
    """Search MPI run-time parameters by relaunching an application (or simulate on a landscape)."""
    if simulate is not None:
        if command or space:
            raise UsageError("--simulate runs on a built-in landscape: give no --space and no command")
        _simulate(simulate, strategy, compare, budget, seeds, seed, fmt)
        return
    if compare is not None:
        raise UsageError("--compare needs --simulate LANDSCAPE")
    if space is None:
        raise UsageError("give --space SPACE (a .toml, .json or PTF file, or auto) or --simulate LANDSCAPE")
    if not command:
        raise UsageError("give the application command after '--', e.g. -- mpiexec -n 4 ./app")
    chosen = resolve(strategy, "SEARCH_STRATEGY", None)
    state = state or ("interposer" if chosen == "rl" else "output")
    if state not in ("interposer", "output"):
        raise UsageError(f"unknown --state {state!r}; valid: interposer, output")
    source = None
    if state == "interposer":
        from tunempi.profile.metrics import InterposerMetrics

        source = InterposerMetrics.for_library
    _search_application(SearchRequest(command, space, strategy, budget, repeats, timeout, metric, seed, out, mpi,
                                      db, list(observe or []), source))


# -- simulation --------------------------------------------------------------------------------------

def _simulate(landscape_name: str, strategy: str | None, compare: str | None, budget: int | None,
              n_seeds: int, first_seed: int, fmt: str) -> None:
    from tunempi.report.search_tables import comparison_table
    from tunempi.search.evaluate import DEFAULT_TARGET, evaluate, summarize
    from tunempi.search.landscapes import LANDSCAPES, get_landscape

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    landscapes = list(LANDSCAPES.values()) if landscape_name == "all" else [get_landscape(landscape_name)]
    if compare is not None and strategy is not None:
        raise UsageError("give --strategy S or --compare all|S1,S2, not both")
    if compare == "all":
        names = list(STRATEGY_NAMES)
    elif compare is not None:
        names = [s.strip() for s in compare.split(",") if s.strip()]
    else:
        names = [resolve(strategy, "SEARCH_STRATEGY", DEFAULT_STRATEGY) or DEFAULT_STRATEGY]
    for name in names:
        strategy_class(name)  # UsageError naming the valid ones
    n_budget = int_setting(budget, "SEARCH_BUDGET", 50, "--budget", 1)
    if n_seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {n_seeds}")
    seeds = range(first_seed, first_seed + n_seeds)
    total = len(landscapes) * len(names) * n_seeds
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_err, transient=True) as progress:
        task = progress.add_task("simulating", total=total)

        def advance(outcome) -> None:
            progress.update(task, advance=1, description=f"{outcome.landscape}/{outcome.strategy}")

        outcomes = evaluate(landscapes, names, n_budget, seeds, DEFAULT_TARGET, on_outcome=advance)
    summaries = summarize(outcomes)
    if fmt == "json":
        doc = {"schema": 1, "budget": n_budget, "seeds": list(seeds), "target": DEFAULT_TARGET,
               "optima": {ls.name: {"time": ls.optimum[0], "config": ls.optimum[1]} for ls in landscapes},
               "summaries": [s.to_dict() for s in summaries], "outcomes": [o.to_dict() for o in outcomes]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    _out.print(comparison_table(summaries, n_budget, DEFAULT_TARGET))
    _out.print(f"{n_seeds} seeds from {first_seed}; 'median trials' counts seeds that never got there as "
               f"more than the budget; final slowdown = true time of the final answer / optimum.")


# -- real application --------------------------------------------------------------------------------

class _SearchOutput(SearchListener):
    """The search's progress on stderr, its tables and verdict on stdout."""

    def __init__(self) -> None:
        self.where = ""
        self.phase = "search"
        self.trials = 0

    def note(self, text: str) -> None:
        _err.print(escape(text))

    def started(self, where: str) -> None:
        self.where = where

    def trial(self, trial: Trial, budget: int) -> None:
        self.trials = trial.number + 1
        status = "[green] OK [/]" if trial.is_ok else f"[red]{trial.status.value.upper()}[/]"
        value = f"{trial.value:.6g}" if trial.value is not None else trial.result.reason[:80]
        # Output of failed runs holds brackets ("[0x7f...]", "[/x]") that Rich would read as markup.
        _err.print(f"[{status}] ({trial.number + 1}/{budget}) {escape(str(dict(trial.params)))} -> "
                   f"{escape(value)}")

    def searched(self, outcome: SearchOutcome) -> None:
        from tunempi.report.search_tables import trials_table

        self.where = outcome.where
        _out.print(trials_table(outcome.space, outcome.trials, title=f"{outcome.strategy} search"))
        if outcome.best is not None:
            _out.print(f"best configuration: {escape(str(outcome.best))} (measured "
                       f"{outcome.best_value if outcome.best_value is not None else 'n/a'})")

    def verifying(self, repeats: int) -> None:
        self.phase = "verification"


def _search_application(request: SearchRequest) -> None:
    output = _SearchOutput()
    with _err.status("finding the MPI library and its run-time parameters ..."):
        session = prepare_search(request, output)
    try:
        outcome = run_application_search(session, output)
    except KeyboardInterrupt as exc:
        if output.phase == "verification":
            _err.print("interrupted during verification; rerun the same command to resume")
        else:
            _err.print(f"interrupted: {output.trials} trials are recorded ({output.where or session.db_path}); "
                       "rerun the same command to resume")
        raise typer.Exit(interrupt_status(exc)) from None
    if outcome.verdict is not None:
        _out.print(escape(outcome.verdict.reason))
    _out.print("wrote " + ", ".join(str(path) for path in outcome.files))


def register(app: typer.Typer) -> None:
    app.command(
        "search",
        context_settings={"allow_interspersed_args": False},
    )(search)


__all__ = ["register", "search", "VerificationRun"]
