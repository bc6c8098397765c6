"""`tunempi search`: run-time parameter search across application runs, or on built-in landscapes.

    tunempi search --space SPACE|auto [--strategy S] [--budget N] [--repeats K] [--timeout S]
                   [--metric REGEX] [--mpi SPEC|none] [--db PATH] [--observe NAME=REGEX] [--out DIR]
                   -- mpiexec -n 4 ./app
    tunempi search --simulate LANDSCAPE|all [--strategy S | --compare all|S1,S2] [--budget N] [--seeds N]
                   [--format table|json]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tunempi.config import resolve, resolve_db
from tunempi.errors import TunempiError, UsageError
from tunempi.search import STRATEGY_NAMES, make_search, run_search, strategy_class
from tunempi.search.base import Trial
from tunempi.search.command import CommandObjective
from tunempi.search.journal import TrialJournal
from tunempi.search.space import ParamSpace, Value, config_key
from tunempi.search.verify import MIN_PAIRS, VerificationRun, verify_against_default

if TYPE_CHECKING:
    from tunempi.mpi.library import MPILibrary
    from tunempi.mpi.runtime import RuntimeParameters
    from tunempi.mpi.vendor import VendorAdapter

FORMATS = ("table", "json")
DEFAULT_STRATEGY = "bayes"
DEFAULT_OUT = "tunempi-search"

_out = Console()
_err = Console(stderr=True)


def _int_option(flag: int | None, env: str, default: int, what: str, minimum: int) -> int:
    text = resolve(None if flag is None else str(flag), env, str(default)) or str(default)
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what} must be an integer, got {text!r} (from TUNEMPI_{env})") from None
    if value < minimum:
        raise UsageError(f"{what} must be >= {minimum}, got {value}")
    return value


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
                                   f"TUNEMPI_SEARCH_OUT; default ./{DEFAULT_OUT})."),
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
    _search_application(command, space, strategy, budget, repeats, timeout, metric, seed, out, mpi, db,
                        observe)


# -- simulation --------------------------------------------------------------------------------------

def _simulate(landscape_name: str, strategy: str | None, compare: str | None, budget: int | None,
              n_seeds: int, first_seed: int, fmt: str) -> None:
    from tunempi.search.evaluate import DEFAULT_TARGET, evaluate, summarize
    from tunempi.search.landscapes import LANDSCAPES, get_landscape
    from tunempi.search.report import comparison_table

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
    n_budget = _int_option(budget, "SEARCH_BUDGET", 50, "--budget", 1)
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

NO_LIBRARY = "none"


def _command_library_spec(command: list[str]) -> str | None:
    """The mpicc beside the MPI launcher the command starts with (same suffix: mpiexec.mpich ->
    mpicc.mpich), or None when the command does not start with one or no such mpicc exists."""
    where = shutil.which(command[0]) if command else None
    if where is None:
        return None
    name = Path(where).name
    base, _, suffix = name.partition(".")
    if base not in ("mpiexec", "mpirun"):
        return None
    # Hydra's own names (mpiexec.hydra) carry no vendor suffix; Debian's (mpiexec.mpich) do.
    mpicc_name = "mpicc" if suffix in ("", "hydra") else f"mpicc.{suffix}"
    for directory in (Path(where).parent, Path(os.path.realpath(where)).parent):
        if (directory / mpicc_name).exists():
            return str(directory / mpicc_name)
    return None


def _parse_observe(observe: list[str] | None) -> dict[str, re.Pattern[str]]:
    patterns: dict[str, re.Pattern[str]] = {}
    for item in observe or []:
        name, sep, regex = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name.strip()):
            raise UsageError(f"--observe {item!r}: write NAME=REGEX (the first group is the number)")
        try:
            patterns[name.strip()] = re.compile(regex)
        except re.error as exc:
            raise UsageError(f"--observe {item!r}: not a valid regular expression: {exc}") from None
    return patterns


@dataclass
class _Target:
    """What the search applies its values to: a library (names checked, vendor spelling) or plain env."""

    library: MPILibrary | None = None
    adapter: VendorAdapter | None = None
    runtime: RuntimeParameters | None = None

    @property
    def name(self) -> str:
        return self.library.name if self.library is not None else "plain environment variables"


def _resolve_target(mpi: str | None, command: list[str]) -> _Target:
    from tunempi.mpi.discovery import adapter_from_info, library_info, resolve_library
    from tunempi.mpi.runtime import RuntimeParameters

    spec = resolve(mpi, "MPI", None)
    if spec is not None and spec.strip().lower() == NO_LIBRARY:
        return _Target()
    if spec is None:
        spec = _command_library_spec(command)
    with _err.status("finding the MPI library and its run-time parameters ..."):
        library = resolve_library(spec)
        info = library_info(library)
        adapter = adapter_from_info(info)
        runtime = RuntimeParameters.of(info, adapter)
    return _Target(library, adapter, runtime)


def _search_application(command: list[str], space_path: str, strategy: str | None, budget: int | None,
                        repeats: int | None, timeout: float | None, metric: str | None, seed: int,
                        out: str | None, mpi: str | None, db: str | None, observe: list[str] | None) -> None:
    from tunempi.launch import launcher_for_argv
    from tunempi.mpi.runtime import check_parameters
    from tunempi.search.auto_space import auto_space
    from tunempi.search.command import OutputMetrics
    from tunempi.search.space import load_space
    from tunempi.store.results import ResultStore

    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {timeout}")
    pattern = None
    if metric is not None:
        try:
            pattern = re.compile(metric)
        except re.error as exc:
            raise UsageError(f"--metric {metric!r} is not a valid regular expression: {exc}") from None
    observed = _parse_observe(observe)
    out_dir = Path(resolve(out, "SEARCH_OUT", DEFAULT_OUT) or DEFAULT_OUT)
    target = _resolve_target(mpi, command)
    if space_path == "auto":
        if target.runtime is None:
            raise UsageError("--space auto builds the space from a library's parameters: give --mpi SPEC, not "
                             f"--mpi {NO_LIBRARY}")
        assert target.adapter is not None
        space = auto_space(target.runtime, target.adapter)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "space.json").write_text(json.dumps(space.to_dict(), indent=2) + "\n")
        _err.print(f"--space auto: {len(space)} parameters of {target.name} (written to {out_dir / 'space.json'}): "
                   + ", ".join(space.names))
    else:
        space = load_space(space_path)
    if target.runtime is not None and target.adapter is not None:
        check_parameters(space.names, target.runtime, target.adapter)
    name = resolve(strategy, "SEARCH_STRATEGY", space.hints.get("search", DEFAULT_STRATEGY)) or DEFAULT_STRATEGY
    strategy_class(name)
    options, default_budget = _ptf_hints(space.hints, name)
    n_budget = _int_option(budget, "SEARCH_BUDGET", default_budget, "--budget", 1)
    n_repeats = _int_option(repeats, "SEARCH_REPEATS", 5, "--repeats", 0)
    if 0 < n_repeats < MIN_PAIRS:
        raise UsageError(f"--repeats must be 0 (no verification) or >= {MIN_PAIRS}, got {n_repeats}")

    adapter = target.adapter
    apply: Callable[[Mapping[str, Value]], dict[str, str]]
    if adapter is not None and target.library is not None:
        def apply(params: Mapping[str, Value]) -> dict[str, str]:
            env: dict[str, str] = {}
            for key, value in params.items():  # the adapter spells each value the way its library reads it
                env.update(adapter.parameter_env(key, value))
            return env
        scrub = {k for p in space for k in adapter.parameter_env(p.name, p.start_value())}
        launcher = launcher_for_argv(command, target.library)
        launch_env = adapter.launch_env()
    else:
        apply, scrub, launcher, launch_env = space.format_env, set(space.names), None, {}
    objective = CommandObjective(
        command, apply, timeout=timeout, metric=pattern, scrub=scrub, launch_env=launch_env,
        env_args=launcher.env_args if launcher is not None else None,
        sources=[OutputMetrics(observed)] if observed else [],
    )
    fingerprint = target.library.fingerprint if target.library is not None else ""
    header = {"space": space.to_dict(), "strategy": name, "seed": seed, "command": list(command), "metric": metric,
              "library": fingerprint, "observe": sorted(observe or [])}
    db_path = resolve_db(db)
    session = _Session(space, space_path, name, seed, options, n_budget, n_repeats, objective, apply, out_dir,
                       list(command), target, db_path)
    with ResultStore(db_path) as store:
        _run_and_report(TrialJournal.open(store, header, fingerprint), session)


@dataclass
class _Session:
    """Everything a real search needs once its inputs are checked."""

    space: ParamSpace
    space_path: str
    strategy: str
    seed: int
    options: dict[str, int]
    budget: int
    repeats: int
    objective: CommandObjective
    apply: Callable[[Mapping[str, Value]], dict[str, str]]
    out_dir: Path
    command: list[str]
    target: _Target
    db_path: Path


def _run_and_report(journal: TrialJournal, session: _Session) -> None:
    from tunempi.search.report import format_env_file, plot_trials, trials_table

    space, name, n_budget, n_repeats = session.space, session.strategy, session.budget, session.repeats
    objective, apply, out_dir, target = session.objective, session.apply, session.out_dir, session.target
    space_path, command, db_path = session.space_path, session.command, session.db_path
    searcher = make_search(name, space, seed=session.seed, **session.options)
    searcher.replay(journal.trials)
    where = f"search {journal.search_id} in {db_path}"
    if journal.trials:
        _err.print(f"resuming {where}: {len(journal.trials)} trials already recorded")
    applied = "as environment variables" if target.adapter is None else f"the way {target.name} reads them"
    _err.print(f"search: {name}, {len(space)} parameters applied {applied}, budget {n_budget}; {where}")

    def record(trial: Trial) -> None:
        journal.append_trial(trial, objective.last_argv, objective.last_env)
        status = "[green] OK [/]" if trial.is_ok else f"[red]{trial.status.value.upper()}[/]"
        value = f"{trial.value:.6g}" if trial.value is not None else trial.result.reason[:80]
        # Output of failed runs holds brackets ("[0x7f...]", "[/x]") that Rich would read as markup.
        _err.print(f"[{status}] ({trial.number + 1}/{n_budget}) {escape(str(dict(trial.params)))} -> "
                   f"{escape(value)}")

    try:
        run_search(searcher, objective, n_budget, on_trial=record)
    except KeyboardInterrupt:
        _err.print(f"interrupted: {len(searcher.trials)} trials are recorded ({where}); rerun the same command "
                   "to resume")
        raise typer.Exit(130) from None

    _out.print(trials_table(space, searcher.trials, title=f"{name} search"))
    best = searcher.recommend()
    if best is None:
        raise TunempiError(f"no trial succeeded in {len(searcher.trials)} runs; the reasons are recorded ({where})")
    best_value = searcher.mean_value(best)
    _out.print(f"best configuration: {escape(str(best))} (measured "
               f"{best_value if best_value is not None else 'n/a'})")

    verdict = None
    if n_repeats:
        done = [run for params, run in journal.verification if params == best]
        try:
            verdict = verify_against_default(
                objective, best, {}, n_repeats, done=done,
                on_run=lambda run: journal.append_verification(best, run, objective.last_argv, objective.last_env))
        except KeyboardInterrupt:
            _err.print("interrupted during verification; rerun the same command to resume")
            raise typer.Exit(130) from None
        _out.print(escape(verdict.reason))
    recommended = best if verdict is None or verdict.recommend else None
    if recommended is not None:
        # A parameter left at the library's own default changes nothing: the env file need not set it.
        recommended = {k: v for k, v in recommended.items()
                       if space[k].default is None or config_key({k: v}) != config_key({k: space[k].default})}
    comment = ("tunempi search: " + (verdict.reason if verdict is not None else "best found, NOT verified "
               "against the defaults (--repeats 0)") + f"\nspace: {space_path}; strategy: {name}; "
               f"{len(searcher.trials)} trials; library: {target.name}; {where}")
    out_dir.mkdir(parents=True, exist_ok=True)
    env_path = out_dir / "best.env"
    env_path.write_text(format_env_file(apply(recommended) if recommended else None, comment))
    shown = " ".join([Path(command[0]).name, *command[1:]])
    png = plot_trials(space, searcher.trials, out_dir / "report.png",
                      title=f"{name} search: {shown if len(shown) <= 60 else shown[:57] + '...'}")
    (out_dir / "summary.json").write_text(json.dumps({
        "schema": 2, "strategy": name, "trials": len(searcher.trials), "best": best, "best_value": best_value,
        "verdict": None if verdict is None else verdict.to_dict(), "recommended": recommended,
        "best_env": apply(best), "recommended_env": apply(recommended) if recommended else {},
        "library": target.name,
        "search_id": journal.search_id, "db": str(db_path),
    }, indent=2) + "\n")
    _out.print(f"wrote {env_path}, {png}, {out_dir / 'summary.json'}")


def _ptf_hints(hints: Mapping[str, str], strategy: str) -> tuple[dict[str, int], int]:
    """Strategy options and default budget from a PTF file's directives (GDE3_POP_SIZE, SAMPLE_COUNT)."""
    options: dict[str, int] = {}
    default_budget = 50
    values = dict(hints)
    try:
        if strategy == "gde3" and "gde3_pop_size" in values:
            options["population_size"] = int(values["gde3_pop_size"])
        if "sample_count" in values:
            default_budget = int(values["sample_count"])
    except ValueError as exc:
        raise UsageError(f"bad PTF directive value: {exc}") from None
    if values.get("individual_keep", "1") != "1":
        _err.print("note: INDIVIDUAL_KEEP > 1 is not supported; individual keeps the single best value")
    return options, default_budget


def register(app: typer.Typer) -> None:
    app.command(
        "search",
        context_settings={"allow_interspersed_args": False},
    )(search)


__all__ = ["register", "search", "VerificationRun"]
