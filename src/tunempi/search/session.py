"""`tunempi search` on an application as a library call: check the inputs and find the target library
(`prepare_search`), then search, verify the best against the defaults and write best.env, report.png and
summary.json (`run_application_search`). Progress goes to a SearchListener; nothing here prints.

Resume: every trial and verification run is in the results database as it finishes (search/journal.py);
the same request picks them up. Ctrl-C propagates as KeyboardInterrupt after what was measured is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tunempi.config import directory_setting, int_setting, resolve, resolve_db
from tunempi.errors import TunempiError, UsageError
from tunempi.search import make_search, run_search, strategy_class
from tunempi.search.base import Trial
from tunempi.search.command import CommandObjective, MetricsSource
from tunempi.search.journal import TrialJournal
from tunempi.search.space import ParamSpace, Value, config_key
from tunempi.search.verify import MIN_PAIRS, Verdict, verify_against_default

if TYPE_CHECKING:
    from tunempi.mpi.library import MPILibrary
    from tunempi.mpi.runtime import RuntimeParameters
    from tunempi.mpi.vendor import VendorAdapter

DEFAULT_STRATEGY = "bayes"
DEFAULT_OUT = "tunempi-search"
NO_LIBRARY = "none"


class SearchListener:
    """Progress of a search; every method does nothing here (a front end overrides what it shows)."""

    def note(self, text: str) -> None:
        """Something worth saying (the space auto built, resuming, an unsupported directive)."""

    def started(self, where: str) -> None:
        """Trials start; `where` names the search's record in the database (for resuming)."""

    def trial(self, trial: Trial, budget: int) -> None:
        """One trial done."""

    def searched(self, outcome: SearchOutcome) -> None:
        """The trials are done and the best is known; verification (if any) comes next."""

    def verifying(self, repeats: int) -> None:
        """The best configuration is run against the defaults."""


@dataclass(frozen=True)
class SearchRequest:
    """Everything `tunempi search` was asked for a real application (None: env or default)."""

    command: list[str]
    space: str
    strategy: str | None = None
    budget: int | None = None
    repeats: int | None = None
    timeout: float | None = None
    metric: str | None = None
    seed: int = 0
    out: str | None = None
    mpi: str | None = None
    db: str | None = None
    observe: list[str] = field(default_factory=list)
    #: A MetricsSource built for the target library (the CLI passes the profiling interposer's, AITuning's
    #: state for rl: profile/metrics.py); None: the output's numbers only.
    metrics_source: Callable[[MPILibrary], MetricsSource] | None = None


@dataclass
class Target:
    """What the search applies its values to: a library (names checked, vendor spelling) or plain env."""

    library: MPILibrary | None = None
    adapter: VendorAdapter | None = None
    runtime: RuntimeParameters | None = None

    @property
    def name(self) -> str:
        return self.library.name if self.library is not None else "plain environment variables"


@dataclass
class SearchSession:
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
    target: Target
    db_path: Path
    header: dict


@dataclass
class SearchOutcome:
    """What a search found: the trials, the best configuration, the verdict against the defaults (None
    with --repeats 0), what is recommended (parameters left at their default dropped) and the files."""

    strategy: str
    space: ParamSpace
    trials: list[Trial]
    search_id: str
    where: str
    best: dict[str, Value] | None = None
    best_value: float | None = None
    verdict: Verdict | None = None
    recommended: dict[str, Value] | None = None
    files: list[Path] = field(default_factory=list)


def parse_observe(observe: list[str] | None) -> dict[str, re.Pattern[str]]:
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


def resolve_target(mpi: str | None, command: list[str]) -> Target:
    """--mpi SPEC (or TUNEMPI_MPI, else the library of the command's launcher), or `none`: plain env."""
    from tunempi.mpi.discovery import adapter_from_info, launch_line_library, library_info
    from tunempi.mpi.runtime import RuntimeParameters

    spec = resolve(mpi, "MPI", None)
    if spec is not None and spec.strip().lower() == NO_LIBRARY:
        return Target()
    library = launch_line_library(spec, command)
    info = library_info(library)
    adapter = adapter_from_info(info)
    return Target(library, adapter, RuntimeParameters.of(info, adapter))


def ptf_hints(hints: Mapping[str, str], strategy: str, listener: SearchListener) -> tuple[dict[str, int], int]:
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
        listener.note("note: INDIVIDUAL_KEEP > 1 is not supported; individual keeps the single best value")
    return options, default_budget


def prepare_search(request: SearchRequest, listener: SearchListener | None = None) -> SearchSession:
    """Check every input (UsageError naming the problem), find the target library and build the space
    and the objective."""
    from tunempi.launch import launcher_for_argv
    from tunempi.mpi.runtime import check_parameters
    from tunempi.search.auto_space import auto_space
    from tunempi.search.command import OutputMetrics
    from tunempi.search.space import load_space

    listener = listener or SearchListener()
    if request.timeout is not None and request.timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {request.timeout}")
    pattern = None
    if request.metric is not None:
        try:
            pattern = re.compile(request.metric)
        except re.error as exc:
            raise UsageError(f"--metric {request.metric!r} is not a valid regular expression: {exc}") from None
    observed = parse_observe(request.observe)
    out_dir = directory_setting(resolve(request.out, "SEARCH_OUT", DEFAULT_OUT) or DEFAULT_OUT, "--out")
    target = resolve_target(request.mpi, request.command)
    if request.space == "auto":
        if target.runtime is None or target.adapter is None:
            raise UsageError("--space auto builds the space from a library's parameters: give --mpi SPEC, not "
                             f"--mpi {NO_LIBRARY}")
        space = auto_space(target.runtime, target.adapter)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "space.json").write_text(json.dumps(space.to_dict(), indent=2) + "\n")
        listener.note(f"--space auto: {len(space)} parameters of {target.name} (written to "
                      f"{out_dir / 'space.json'}): " + ", ".join(space.names))
    else:
        space = load_space(request.space)
    if target.runtime is not None and target.adapter is not None:
        check_parameters(space.names, target.runtime, target.adapter)
    name = (resolve(request.strategy, "SEARCH_STRATEGY", space.hints.get("search", DEFAULT_STRATEGY))
            or DEFAULT_STRATEGY)
    strategy_class(name)
    options, default_budget = ptf_hints(space.hints, name, listener)
    budget = int_setting(request.budget, "SEARCH_BUDGET", default_budget, "--budget", 1)
    repeats = int_setting(request.repeats, "SEARCH_REPEATS", 5, "--repeats", 0)
    if 0 < repeats < MIN_PAIRS:
        raise UsageError(f"--repeats must be 0 (no verification) or >= {MIN_PAIRS}, got {repeats}")

    adapter = target.adapter
    command = list(request.command)
    if target.library is not None:  # a bare mpiexec/mpirun is the library's own, never whatever PATH has first
        from tunempi.launch import own_launcher

        command = own_launcher(command, target.library)
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
        from tunempi.launch.launchers import OpenMPILauncher

        if isinstance(launcher, OpenMPILauncher) and launcher.as_root:  # as run, profile and compare do
            launch_env.update(OpenMPILauncher.ROOT_ENV)
    else:
        apply, scrub, launcher, launch_env = space.format_env, set(space.names), None, {}
    sources: list[MetricsSource] = [OutputMetrics(observed)] if observed else []
    if request.metrics_source is not None and target.library is not None:
        sources.append(request.metrics_source(target.library))
    objective = CommandObjective(
        command, apply, timeout=request.timeout, metric=pattern, scrub=scrub, launch_env=launch_env,
        env_args=launcher.env_args if launcher is not None else None, sources=sources,
    )
    fingerprint = target.library.fingerprint if target.library is not None else ""
    header = {"space": space.to_dict(), "strategy": name, "seed": request.seed, "command": list(request.command),
              "metric": request.metric, "library": fingerprint, "observe": sorted(request.observe or [])}
    if request.metrics_source is not None and target.library is not None:
        header["state"] = "interposer"  # another state, another search: not resumed from one without it
    return SearchSession(space, request.space, name, request.seed, options, budget, repeats, objective, apply,
                         out_dir, list(request.command), target, resolve_db(request.db), header)


def run_application_search(session: SearchSession, listener: SearchListener | None = None) -> SearchOutcome:
    """Search (resuming what the database has), verify the best against the defaults, write the files."""
    from tunempi.store.results import ResultStore

    listener = listener or SearchListener()
    with ResultStore(session.db_path) as store:
        fingerprint = session.target.library.fingerprint if session.target.library is not None else ""
        journal = TrialJournal.open(store, session.header, fingerprint)
        outcome = search_trials(session, journal, listener)
        if session.repeats and outcome.best is not None:
            listener.verifying(session.repeats)
            outcome.verdict = verify_best(session, journal, outcome.best)
    outcome.recommended = recommendation(session.space, outcome)
    outcome.files = write_outputs(session, outcome)
    return outcome


def search_trials(session: SearchSession, journal: TrialJournal, listener: SearchListener) -> SearchOutcome:
    """Replay the recorded trials, run the rest of the budget (each recorded as it finishes)."""
    space, objective = session.space, session.objective
    searcher = make_search(session.strategy, space, seed=session.seed, **session.options)
    searcher.replay(journal.trials)
    where = f"search {journal.search_id} in {session.db_path}"
    listener.started(where)
    if journal.trials:
        listener.note(f"resuming {where}: {len(journal.trials)} trials already recorded")
    applied = ("as environment variables" if session.target.adapter is None
               else f"the way {session.target.name} reads them")
    listener.note(f"search: {session.strategy}, {len(space)} parameters applied {applied}, budget "
                  f"{session.budget}; {where}")

    def record(trial: Trial) -> None:
        journal.append_trial(trial, objective.last_argv, objective.last_env)
        listener.trial(trial, session.budget)

    outcome = SearchOutcome(session.strategy, space, searcher.trials, journal.search_id, where)
    run_search(searcher, objective, session.budget, on_trial=record)
    best = searcher.recommend()
    if best is not None:
        outcome.best, outcome.best_value = dict(best), searcher.mean_value(best)
    listener.searched(outcome)
    if best is None:
        raise TunempiError(f"no trial succeeded in {len(searcher.trials)} runs; the reasons are recorded ({where})")
    return outcome


def verify_best(session: SearchSession, journal: TrialJournal, best: Mapping[str, Value]) -> Verdict:
    """The best configuration against the defaults, interleaved (resuming recorded verification runs)."""
    objective = session.objective
    done = [run for params, run in journal.verification if params == best]
    return verify_against_default(
        objective, best, {}, session.repeats, done=done,
        on_run=lambda run: journal.append_verification(best, run, objective.last_argv, objective.last_env))


def recommendation(space: ParamSpace, outcome: SearchOutcome) -> dict[str, Value] | None:
    """The verified best (unverified with --repeats 0), without the parameters left at the library's own
    default: they change nothing, and the env file need not set them."""
    if outcome.best is None or (outcome.verdict is not None and not outcome.verdict.recommend):
        return None
    return {k: v for k, v in outcome.best.items()
            if space[k].default is None or config_key({k: v}) != config_key({k: space[k].default})}


def write_outputs(session: SearchSession, outcome: SearchOutcome) -> list[Path]:
    """best.env (the recommendation, or "keep the defaults"), report.png and summary.json."""
    from tunempi.search.report import format_env_file, plot_trials

    verdict, recommended, apply = outcome.verdict, outcome.recommended, session.apply
    comment = ("tunempi search: " + (verdict.reason if verdict is not None else "best found, NOT verified "
               "against the defaults (--repeats 0)") + f"\nspace: {session.space_path}; strategy: "
               f"{session.strategy}; {len(outcome.trials)} trials; library: {session.target.name}; {outcome.where}")
    out_dir = session.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    env_path = out_dir / "best.env"
    env_path.write_text(format_env_file(apply(recommended) if recommended else None, comment))
    command = session.command
    shown = " ".join([Path(command[0]).name, *command[1:]])
    png = plot_trials(session.space, outcome.trials, out_dir / "report.png",
                      title=f"{session.strategy} search: {shown if len(shown) <= 60 else shown[:57] + '...'}")
    summary = out_dir / "summary.json"
    summary.write_text(json.dumps({
        "schema": 2, "strategy": session.strategy, "trials": len(outcome.trials), "best": outcome.best,
        "best_value": outcome.best_value, "verdict": None if verdict is None else verdict.to_dict(),
        "recommended": recommended, "best_env": apply(outcome.best or {}),
        "recommended_env": apply(recommended) if recommended else {}, "library": session.target.name,
        "search_id": outcome.search_id, "db": str(session.db_path),
    }, indent=2) + "\n")
    return [env_path, png, summary]
