"""`tunempi compare` as library calls: check the inputs (`prepare_compare`), then run the application under
the library's default and under every variant, interleaved, until the evidence is precise enough
(`run_compare`). Progress goes to a CompareListener; nothing here prints.

The design (docs/compare.md says why):
- **Blocks**: every block runs each arm (the default and every variant still in the race) once, in an
  order shuffled per block from the seed: a drift of the machine hits every arm alike, and no arm always
  runs first (after a cold page cache) or last.
- **Pairs**: a variant's run and the default's run of the same block are one pair; evidence.py's paired
  rule gives the speedup, its 95 % interval and the verdict, as for `verify`, `search` and `online`.
- **Adaptive, not peeking**: at least `min_runs` blocks; then it stops when every variant's interval is
  narrower than `width`, or at `max_runs` blocks, or when the time budget is spent. The stop depends on
  the interval's width, not on whether it excludes 1, so the verdict keeps the error rate evidence.py
  states (tests/unit/test_compare.py measures it on A/A pairs).
- **Results unchanged**: every run's result (compare/results.py) must equal the default's within the
  tolerance; a variant that computes something else, crashes or times out is out of the race at once,
  with the run that showed it.
- **Nothing lost**: every run is in the results database as it ends (store/comparisons.py); the same
  command continues an interrupted comparison.
"""

from __future__ import annotations

import math
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tunempi import evidence
from tunempi.compare.results import DEFAULT_TOLERANCE, ResultCheck, ResultUnavailable, difference
from tunempi.compare.variants import BASELINE, Variant, as_run_applies, check_tuning_variants, load_variants
from tunempi.config import int_setting, resolve_db
from tunempi.errors import TunempiError, UsageError
from tunempi.store.comparisons import ComparisonLog, ComparisonRun

if TYPE_CHECKING:
    from tunempi.mpi.library import MPILibrary
    from tunempi.tune.manifest import Manifest

DEFAULT_MIN_RUNS = 10
DEFAULT_MAX_RUNS = 30
#: The speedup's 95 % interval must be at most this wide (high - low) for the comparison to stop early.
DEFAULT_WIDTH = 0.04
#: Without --timeout a run may take this many times the default's first run (and at least MIN_TIMEOUT_S).
TIMEOUT_FACTOR = 10.0
MIN_TIMEOUT_S = 60.0
#: The default failing this many runs ends the comparison: the application itself does not run reliably.
MAX_DEFAULT_FAILURES = 2

#: A variant's verdict: the paired rule's (faster / no difference / slower), or why it left the race.
VERDICTS = ("faster", "no difference", "slower", "failed", "wrong results", "too few runs")
_FROM_EVIDENCE = {"faster": "faster", "slower": "slower", "same": "no difference"}


@dataclass(frozen=True)
class CompareRequest:
    """Everything `tunempi compare` was asked (None: env or default)."""

    command: list[str]
    variants: list[str]
    mpi: str | None = None
    metric: str | None = None
    higher_is_better: bool = False
    results: tuple[str, ...] = ()
    result_command: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    min_runs: int | None = None
    max_runs: int | None = None
    width: float | None = None
    budget_s: float | None = None
    timeout: float | None = None
    seed: int = 0
    db: str | None = None
    record: bool = True
    restart: bool = False  # forget the runs recorded for the same comparison instead of continuing it


@dataclass(frozen=True)
class RunOutcome:
    """One launch as the comparison sees it."""

    status: str  # ok / failed / timeout
    wall_s: float
    output: str
    reason: str = ""


#: Runs one arm once: (variant, timeout) -> RunOutcome. The real one launches the command; unit tests of the
#: schedule and the decisions pass their own.
Launch = Callable[[Variant, float | None], RunOutcome]


@dataclass
class CompareSession:
    """A checked request: the arms, how each is launched, and the settings."""

    command: list[str]
    baseline: Variant
    variants: list[Variant]
    library: MPILibrary | None
    manifests: dict[str, Manifest]
    metric: re.Pattern[str] | None
    higher_is_better: bool
    check: ResultCheck
    min_runs: int
    max_runs: int
    width: float
    budget_s: float | None
    timeout: float | None
    seed: int
    db_path: Path
    record: bool
    launch: Launch
    header: dict = field(default_factory=dict)
    restart: bool = False
    #: what was left out of a variant as `tunempi run` leaves it (compare.variants.as_run_applies)
    notes: tuple[str, ...] = ()

    @property
    def arms(self) -> list[Variant]:
        return [self.baseline, *self.variants]

    def describe_metric(self) -> str:
        if self.metric is None:
            return "wall time (lower is better)"
        return f"--metric {self.metric.pattern!r} ({'higher' if self.higher_is_better else 'lower'} is better)"


@dataclass(frozen=True)
class VariantVerdict:
    """One variant against the default."""

    variant: Variant
    verdict: str  # one of VERDICTS
    reason: str
    results: str  # unchanged / changed / unchecked / unknown (the default's own results vary)
    runs: int  # ok runs of the variant
    pairs: int
    comparison: evidence.Comparison | None = None
    mean_value: float | None = None

    def to_dict(self) -> dict:
        return {"variant": self.variant.to_dict(), "verdict": self.verdict, "reason": self.reason,
                "results": self.results, "runs": self.runs, "pairs": self.pairs, "mean_value": self.mean_value,
                "comparison": self.comparison.to_dict() if self.comparison is not None else None}


@dataclass
class CompareOutcome:
    """Where the comparison stands: the verdicts, the default's runs, and why it stopped."""

    comparison_id: str
    db_path: Path
    blocks: int
    stop_reason: str
    default_runs: int
    default_mean: float | None
    verdicts: list[VariantVerdict]
    metric: str
    check: str
    default_results_vary: str | None = None
    recorded: list[Path] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"schema": 1, "comparison_id": self.comparison_id, "db": str(self.db_path), "blocks": self.blocks,
                "stop_reason": self.stop_reason, "metric": self.metric, "result_check": self.check,
                "default": {"runs": self.default_runs, "mean_value": self.default_mean,
                            "results_vary": self.default_results_vary},
                "variants": [v.to_dict() for v in self.verdicts], "recorded_in": [str(p) for p in self.recorded]}


class CompareListener:
    """Progress of a comparison; every method does nothing here (a front end overrides what it shows)."""

    def started(self, session: CompareSession, comparison_id: str, resumed: int) -> None:
        """Runs start (`resumed` runs were already recorded)."""

    def ran(self, run: ComparisonRun, done: int, planned: int) -> None:
        """One run ended (`planned`: runs at most, shrinking as variants leave the race)."""

    def block_done(self, block: int, verdicts: Sequence[VariantVerdict]) -> None:
        """A block ended; the verdicts so far."""


# -- preparing ---------------------------------------------------------------------------------------

def application_launch(command: Sequence[str], library: MPILibrary | None, scrub: set[str],
                       cwd: str | None = None) -> Launch:
    """The real launch: the same command line for every arm, the arm's variables passed to the ranks
    (Hydra -genv, mpirun -x, else the launcher's environment); variables any arm sets are removed from
    the inherited environment, so the default runs with none of them."""
    from tunempi.launch import LaunchError, rank_env_command, run_launch
    from tunempi.tune.apply import command_for_library

    if library is not None:
        argv, launcher_env = command_for_library(command, library)
    else:
        argv, launcher_env = list(command), {}
    base = {k: v for k, v in os.environ.items() if k not in scrub}

    def launch(variant: Variant, timeout: float | None) -> RunOutcome:
        rank = rank_env_command(argv, variant.env, library)
        env = {**base, **launcher_env, **rank.env}
        try:
            run = run_launch(rank.argv, env, timeout, cwd=cwd)
        except LaunchError as exc:
            return RunOutcome("failed", 0.0, "", str(exc))
        output = run.stdout + run.stderr
        if run.timed_out:
            return RunOutcome("timeout", run.duration_s, output, f"killed after the {timeout:g} s timeout")
        if run.returncode != 0:
            from tunempi.launch.process import failure_summary

            return RunOutcome("failed", run.duration_s, output,
                              f"{run.reason.split(':', 1)[0]}: {failure_summary(output)}")
        return RunOutcome("ok", run.duration_s, output)

    return launch


def prepare_compare(request: CompareRequest, launch: Launch | None = None) -> CompareSession:
    """Check every input (UsageError naming the problem) and find the library; `launch` replaces the real
    launcher (unit tests)."""
    if not request.command:
        raise UsageError("give the application command after '--', e.g. -- mpiexec -n 4 ./app")
    variants, manifests = load_variants(request.variants)
    pattern = None
    if request.metric is not None:
        try:
            pattern = re.compile(request.metric, re.MULTILINE)
        except re.error as exc:
            raise UsageError(f"--metric {request.metric!r} is not a valid regular expression: {exc}") from None
    elif request.higher_is_better:
        raise UsageError("--higher-is-better needs --metric REGEX (wall time is lower-is-better)")
    check = ResultCheck(tuple(request.results), request.result_command, request.tolerance)
    min_runs = int_setting(request.min_runs, "COMPARE_MIN_RUNS", DEFAULT_MIN_RUNS, "--min-runs",
                            evidence.MIN_PAIRS)
    max_runs = int_setting(request.max_runs, "COMPARE_MAX_RUNS", max(DEFAULT_MAX_RUNS, min_runs), "--max-runs",
                            min_runs)
    width = DEFAULT_WIDTH if request.width is None else request.width
    if not width > 0 or math.isnan(width):
        raise UsageError(f"--width must be > 0, got {width}")
    if request.budget_s is not None and request.budget_s <= 0:
        raise UsageError(f"--budget must be > 0 seconds, got {request.budget_s}")
    if request.timeout is not None and request.timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {request.timeout}")
    library = check_tuning_variants(manifests, request.mpi) if manifests else None
    if library is None and launch is None:  # the launch line's, as every command resolves it
        from tunempi.mpi.discovery import launch_line_library

        library = launch_line_library(request.mpi, request.command)
    # scrubbed from every arm before any is left out: the caller's environment must not bring one back
    scrub = {name for variant in variants for name in variant.env}
    by_name = {v.name: m for v, m in zip([v for v in variants if v.tuning_dir is not None], manifests, strict=True)}
    notes: list[str] = []
    if library is not None:  # each tuning as `tunempi run` would apply it to this job (issue 57)
        applied = [as_run_applies(v, by_name.get(v.name), request.command, library) for v in variants]
        variants = [variant for variant, _ in applied]
        notes = [line for _, line in applied if line]
    baseline = Variant(BASELINE, "the library's default")
    header = {"command": list(request.command), "variants": [[v.name, dict(v.env)] for v in variants],
              "metric": request.metric, "higher_is_better": request.higher_is_better,
              "results": list(check.patterns), "result_command": check.command, "tolerance": check.tolerance,
              "seed": request.seed, "library": library.fingerprint if library is not None else ""}
    return CompareSession(
        list(request.command), baseline, variants, library, by_name, pattern, request.higher_is_better, check,
        min_runs, max_runs, width, request.budget_s, request.timeout, request.seed, resolve_db(request.db),
        request.record, launch or application_launch(request.command, library, scrub), header, request.restart,
        tuple(notes))


# -- deciding from the recorded runs ------------------------------------------------------------------

def block_order(arms: Sequence[str], seed: int, block: int) -> list[str]:
    """The arms of one block in their run order: a permutation drawn from (seed, block) alone, so a resumed
    comparison runs the order it would have run."""
    order = list(arms)
    random.Random(f"{seed}:{block}").shuffle(order)
    return order


def _cost(value: float, higher_is_better: bool) -> float:
    return 1.0 / value if higher_is_better else value


def assess(session: CompareSession, runs: Sequence[ComparisonRun]) -> tuple[list[VariantVerdict], str | None]:
    """Every variant's verdict from the runs so far, and (when the default's own results differ between its
    runs) what differs: then no variant's result can be judged."""
    by_arm: dict[str, dict[int, ComparisonRun]] = {}
    for run in runs:
        by_arm.setdefault(run.variant, {})[run.block] = run
    defaults = by_arm.get(BASELINE, {})
    ok_defaults = [defaults[b] for b in sorted(defaults) if defaults[b].ok]
    reference = ok_defaults[0].result if ok_defaults and session.check.active else None
    default_varies = None
    if reference is not None:
        for run in ok_defaults[1:]:
            why = difference(reference, run.result, session.check.tolerance)
            if why is not None:
                default_varies = f"the default's own result in block {run.block + 1} differs from block " \
                                 f"{ok_defaults[0].block + 1}: {why}"
                break
    verdicts = []
    for variant in session.variants:
        mine = by_arm.get(variant.name, {})
        verdicts.append(_verdict(session, variant, mine, defaults, reference, default_varies))
    return verdicts, default_varies


def _verdict(session: CompareSession, variant: Variant, mine: Mapping[int, ComparisonRun],
             defaults: Mapping[int, ComparisonRun], reference: str | None, default_varies: str | None
             ) -> VariantVerdict:
    ok = [mine[b] for b in sorted(mine) if mine[b].ok]
    results = "unchecked" if not session.check.active else ("unknown" if default_varies else "unchanged")
    failed = next((mine[b] for b in sorted(mine) if not mine[b].ok), None)
    values = [r.value for r in ok if r.value is not None]
    mean = float(sum(values) / len(values)) if values else None
    if failed is not None:
        return VariantVerdict(variant, "failed", f"run in block {failed.block + 1} {failed.status}: {failed.reason}",
                              results, len(ok), 0, None, mean)
    if reference is not None and default_varies is None:
        for run in ok:
            why = difference(reference, run.result, session.check.tolerance)
            if why is not None:
                return VariantVerdict(variant, "wrong results", f"block {run.block + 1}: {why}", "changed", len(ok), 0,
                                      None, mean)
    pairs: list[tuple[float, float]] = []
    for b in sorted(mine):
        value, base = mine[b].value, defaults[b].value if b in defaults and defaults[b].ok else None
        if mine[b].ok and value and base:
            pairs.append((value, base))
    if len(pairs) < evidence.MIN_PAIRS:
        return VariantVerdict(variant, "too few runs", f"{len(pairs)} pairs, {evidence.MIN_PAIRS} needed at least",
                              results, len(ok), len(pairs), None, mean)
    higher = session.higher_is_better
    found = evidence.compare([_cost(v, higher) for v, _ in pairs], [_cost(d, higher) for _, d in pairs])
    verdict = _FROM_EVIDENCE[found.verdict]
    reason = (f"{found.speedup:.3f}x, {found.confidence:.0%} interval {found.low:.3f}x..{found.high:.3f}x over "
              f"{found.pairs} pairs (better in {found.wins:.0%})")
    return VariantVerdict(variant, verdict, reason, results, len(ok), found.pairs, found, mean)


def _in_race(verdict: VariantVerdict) -> bool:
    return verdict.verdict not in ("failed", "wrong results")


def _precise(verdict: VariantVerdict, width: float) -> bool:
    c = verdict.comparison
    return c is not None and (c.high - c.low) <= width


# -- running -----------------------------------------------------------------------------------------

def _value(session: CompareSession, outcome: RunOutcome) -> tuple[str, float | None, str]:
    """(status, figure of merit, reason) of a launch."""
    if outcome.status != "ok":
        return outcome.status, None, outcome.reason
    if session.metric is None:
        return "ok", outcome.wall_s, ""
    match = session.metric.search(outcome.output)
    if match is None:
        return "failed", None, f"--metric {session.metric.pattern!r} not found in the output"
    text = match.group(1) if match.groups() else match.group(0)
    try:
        value = float(text)
    except ValueError:
        return "failed", None, f"--metric matched {text!r}, not a number"
    if not (value > 0 and math.isfinite(value)):
        return "failed", None, f"--metric gave {value}: the figure of merit must be a positive number"
    return "ok", value, ""


def run_once(session: CompareSession, variant: Variant, block: int, position: int, timeout: float | None
             ) -> ComparisonRun:
    """Launch one arm once and extract its figure of merit and result."""
    outcome = session.launch(variant, timeout)
    status, value, reason = _value(session, outcome)
    result = ""
    if status == "ok" and session.check.active:
        try:
            result = session.check.extract(outcome.output)
        except ResultUnavailable as exc:
            status, value, reason = "failed", None, f"result check: {exc}"
    return ComparisonRun(block, variant.name, position, status, value, outcome.wall_s, result, reason,
                         env=dict(variant.env))


def _timeout(session: CompareSession, runs: Sequence[ComparisonRun]) -> float | None:
    if session.timeout is not None:
        return session.timeout
    walls = [r.wall_s for r in runs if r.variant == BASELINE and r.ok and r.wall_s]
    return max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * max(walls)) if walls else None


def _check_default(runs: Sequence[ComparisonRun], comparison_id: str, db_path: Path) -> None:
    """TunempiError when the default cannot be trusted to run: its first run failed, or MAX_DEFAULT_FAILURES of
    its runs did (no comparison with a baseline that crashes means anything)."""
    defaults = [r for r in runs if r.variant == BASELINE]
    failures = [r for r in defaults if not r.ok]
    if failures and (not any(r.ok for r in defaults) or len(failures) >= MAX_DEFAULT_FAILURES):
        raise TunempiError(f"the application fails under the library's default (block {failures[-1].block + 1}: "
                           f"{failures[-1].reason}); fix the command before comparing (runs recorded: comparison "
                           f"{comparison_id} in {db_path})")


def run_compare(session: CompareSession, listener: CompareListener | None = None,
                clock: Callable[[], float] = time.monotonic) -> CompareOutcome:
    """Run blocks until the intervals are narrow enough, max_runs, or the budget; record each run; decide.
    Ctrl-C propagates as KeyboardInterrupt after the finished runs are recorded."""
    from tunempi.store.results import ResultStore

    listener = listener or CompareListener()
    started = clock()
    with ResultStore(session.db_path) as store:
        log = ComparisonLog(store, session.header)
        if session.restart:
            log.clear()
        runs = log.runs()
        listener.started(session, log.comparison_id, len(runs))
        _check_default(runs, log.comparison_id, session.db_path)
        stop = ""
        block = 0
        while True:
            verdicts, _ = assess(session, runs)
            racing = [v.variant.name for v in verdicts if _in_race(v)]
            if not racing:
                stop = "no variant left in the race (every one failed or changed the results)"
                break
            if block >= session.min_runs and all(_precise(v, session.width) for v in verdicts if _in_race(v)):
                stop = f"every interval narrower than {session.width:g}"
                break
            if block >= session.max_runs:
                stop = f"{session.max_runs} runs each (--max-runs)"
                break
            if session.budget_s is not None and clock() - started >= session.budget_s:
                stop = f"the time budget of {session.budget_s:g} s is spent"
                break
            done_here = {r.variant for r in runs if r.block == block}
            order = block_order([BASELINE, *racing], session.seed, block)
            for position, name in enumerate(order):
                if name in done_here:
                    continue
                arm = session.baseline if name == BASELINE else next(v for v in session.variants if v.name == name)
                run = run_once(session, arm, block, position, _timeout(session, runs))
                log.add(run)
                runs.append(run)
                if name == BASELINE and not run.ok:
                    _check_default(runs, log.comparison_id, session.db_path)
                planned = len(runs) + (len(order) - position - 1) + (session.max_runs - block - 1) * len(order)
                listener.ran(run, len(runs), planned)
            block += 1
            listener.block_done(block, assess(session, runs)[0])
        verdicts, varies = assess(session, runs)
    default_values = [r.value for r in runs if r.variant == BASELINE and r.ok and r.value is not None]
    outcome = CompareOutcome(
        log.comparison_id, session.db_path, block, stop, len(default_values),
        sum(default_values) / len(default_values) if default_values else None, verdicts,
        session.describe_metric(), session.check.describe(), varies)
    if session.record:
        outcome.recorded = record_in_manifests(session, outcome)
    return outcome


def record_in_manifests(session: CompareSession, outcome: CompareOutcome) -> list[Path]:
    """Each tuning directory's verdict goes into its manifest (`run` warns about one found slower or wrong)."""
    from tunempi.store.results import utc_timestamp
    from tunempi.tune.manifest import ApplicationCheck

    written = []
    for verdict in outcome.verdicts:
        manifest = session.manifests.get(verdict.variant.name)
        if manifest is None:
            continue
        c = verdict.comparison
        check = ApplicationCheck(
            at=utc_timestamp(), command=tuple(session.command), verdict=verdict.verdict, reason=verdict.reason,
            results=verdict.results, pairs=verdict.pairs, speedup=c.speedup if c else None,
            low=c.low if c else None, high=c.high if c else None, metric=outcome.metric,
            comparison=f"{outcome.comparison_id} in {outcome.db_path}")
        written.append(replace(manifest, applications=(*manifest.applications, check)).save())
    return written
