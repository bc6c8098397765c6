"""The pipeline as one library call: `run_autotune(request, runner, listener)`.

The order is fixed (`STEPS`); which of tune / online / search run is the plan's (plan.py). Each step is a
method of a StepRunner (steps.py: the library calls of the commands; unit tests pass fakes) returning a JSON
result that the work state records when the step ends (state.py). A finished step is not run again: the same
command continues where it stopped. A tuning step that fails (an error, not a stop signal) is reported and
left unfinished, so a rerun tries it again; the others go on. The report is written on every run, from the
results finished so far. Progress goes to an AutotuneListener; nothing here prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunempi.autotune.plan import budget_shares, chosen_steps, verify_share
from tunempi.autotune.state import WorkState
from tunempi.errors import TunempiError, UsageError

if TYPE_CHECKING:
    from tunempi.compare.session import CompareListener
    from tunempi.search.session import SearchListener
    from tunempi.tune.job import OnTuneEvent
    from tunempi.tune.verify_run import VerifyListener

#: Every step, in the order they run.
STEPS = ("profile", "plan", "tune", "verify", "online", "search", "compare", "report")
#: The steps a user may leave out (--steps): the kinds of tuning the plan chooses among.
TUNING_STEPS = ("tune", "online", "search")
DEFAULT_BUDGET_S = 1200.0


@dataclass(frozen=True)
class AutotuneRequest:
    """Everything `tunempi autotune` was asked."""

    command: list[str]
    out: Path
    budget_s: float = DEFAULT_BUDGET_S
    mpi: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    ppn: int | None = None
    hostfile: Path | None = None
    results: tuple[str, ...] = ()
    result_command: str | None = None
    tolerance: float | None = None
    min_runs: int | None = None
    max_runs: int | None = None
    steps: tuple[str, ...] = ()  # the tuning steps allowed (empty: as the plan says)
    db: str | None = None
    seed: int = 0
    restart: bool = False
    #: tune's --objective for the non-blocking collectives; None: the profile's (profile/nonblocking.py)
    objective: str | None = None

    def check(self) -> None:
        if not self.command:
            raise UsageError("give the application's launch line after '--', e.g. -- mpiexec -n 4 ./app")
        if not self.budget_s > 0:
            raise UsageError(f"--budget must be more than 0 seconds, got {self.budget_s:g}")
        unknown = [s for s in self.steps if s not in TUNING_STEPS]
        if unknown:
            raise UsageError(f"--steps: unknown {', '.join(unknown)}; valid: {', '.join(TUNING_STEPS)}")

    def key(self) -> dict[str, Any]:
        """What identifies the work: the same key continues it, another is refused (state.py)."""
        return {"command": list(self.command), "budget_s": self.budget_s, "mpi": self.mpi, "ranks": self.ranks,
                "nodes": self.nodes, "ppn": self.ppn, "hostfile": str(self.hostfile) if self.hostfile else None,
                "results": list(self.results), "result_command": self.result_command, "tolerance": self.tolerance,
                "min_runs": self.min_runs, "max_runs": self.max_runs, "steps": list(self.steps), "seed": self.seed,
                **({"objective": self.objective} if self.objective is not None else {})}

    @property
    def db_path(self) -> Path:
        """The results database: --db, else one in the work directory (so the work travels with it)."""
        return Path(self.db) if self.db else self.out / "results.sqlite"


class AutotuneListener:
    """Progress of the pipeline; every method does nothing here (a front end overrides what it shows).
    The hooks return the listeners of the steps' own library calls (None: none)."""

    def step_started(self, name: str, share_s: float | None) -> None:
        """A step starts (`share_s`: its part of the budget, None for the steps that take none)."""

    def step_resumed(self, name: str, result: Mapping[str, Any]) -> None:
        """A step had finished in an earlier run: its recorded result is used."""

    def step_done(self, name: str, result: Mapping[str, Any]) -> None:
        """A step finished (its result is recorded)."""

    def step_skipped(self, name: str, reason: str) -> None:
        """The plan left a step out."""

    def step_failed(self, name: str, message: str) -> None:
        """A step failed; the pipeline goes on without it (a rerun tries it again)."""

    def note(self, text: str) -> None:
        """Something a step says on the way (a count of runs, what it wrote)."""

    def tune_events(self) -> OnTuneEvent | None:
        return None

    def verify_listener(self) -> VerifyListener | None:
        return None

    def search_listener(self) -> SearchListener | None:
        return None

    def compare_listener(self) -> CompareListener | None:
        return None

    def close_step(self) -> None:
        """The step's own progress display (if any) is over."""


@dataclass
class Context:
    """What a step gets: the request, the work directory, the results of the finished steps, its share."""

    request: AutotuneRequest
    directory: Path
    results: Mapping[str, Mapping[str, Any]]
    share_s: float | None
    listener: AutotuneListener


class StepRunner:
    """The steps themselves (steps.LibrarySteps runs the library calls). Each returns a JSON-able result;
    `{"skipped": reason}` says the step finished without a tuning (nothing for it to do)."""

    def profile(self, ctx: Context) -> dict[str, Any]:
        """Profile the application: {profile: path, run_s: seconds of the run, library: spec, ...}."""
        raise NotImplementedError

    def plan(self, ctx: Context) -> dict[str, Any]:
        """The plan of the profile: {plan: [{kind, worth, why}], ...}."""
        raise NotImplementedError

    def tune(self, ctx: Context) -> dict[str, Any]:
        """tune --from-profile within ctx.share_s: {variant: directory | None, ...}."""
        raise NotImplementedError

    def verify(self, ctx: Context) -> dict[str, Any]:
        """verify the tuned directory: {variant: directory | None (nothing stayed tuned), ...}."""
        raise NotImplementedError

    def online(self, ctx: Context) -> dict[str, Any]:
        """online runs within ctx.share_s, then online best: {variant: directory | None, ...}."""
        raise NotImplementedError

    def search(self, ctx: Context) -> dict[str, Any]:
        """search within ctx.share_s: {variant: env file | None, ...}."""
        raise NotImplementedError

    def compare(self, ctx: Context, variants: Sequence[str]) -> dict[str, Any]:
        """compare the application under the default and `variants`: {outcome: CompareOutcome.to_dict()}."""
        raise NotImplementedError

    def report(self, ctx: Context, outcome: AutotuneOutcome) -> dict[str, Any]:
        """Write the HTML report: {path: file}."""
        raise NotImplementedError


@dataclass
class AutotuneOutcome:
    """Where the pipeline stands: every finished step's result, what was skipped and why, what failed."""

    directory: Path
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    report: Path | None = None

    def variants(self) -> list[str]:
        """The tunings the finished steps produced that set something, as compare's NAME=PATH variants."""
        tuned = self.results.get("verify") or self.results.get("tune") or {}  # verify's verdict, when it ran
        found = {"tuned": tuned.get("variant"), "online-best": self.results.get("online", {}).get("variant"),
                 "search": self.results.get("search", {}).get("variant")}
        return [f"{name}={path}" for name, path in found.items() if path]


def run_autotune(request: AutotuneRequest, runner: StepRunner, listener: AutotuneListener | None = None,
                 clock: Callable[[], float] = time.monotonic) -> AutotuneOutcome:
    """Run the steps the plan picks (skipping those the work state says finished), then the report.
    KeyboardInterrupt (a stop signal) propagates with every finished step recorded."""
    request.check()
    listener = listener or AutotuneListener()
    state = WorkState.open(request.out, request.key(), restart=request.restart)
    if state.replaced:
        listener.note(state.replaced)
    outcome = AutotuneOutcome(request.out)

    def step(name: str, share_s: float | None = None, *, optional: bool = True,
             call: Callable[[Context], dict[str, Any]] | None = None) -> dict[str, Any] | None:
        if state.done(name):
            result = state.result(name)
            outcome.results[name] = result
            outcome.resumed.append(name)
            listener.step_resumed(name, result)
            return result
        listener.step_started(name, share_s)
        ctx = Context(request, request.out, dict(outcome.results), share_s, listener)
        started = clock()
        try:
            result = (call or getattr(runner, name))(ctx)
        except TunempiError as exc:
            listener.close_step()
            if not optional:
                raise
            outcome.failed[name] = str(exc)
            listener.step_failed(name, str(exc))
            return None
        listener.close_step()
        result = {**result, "seconds": round(clock() - started, 3)}
        state.finish(name, result)
        outcome.results[name] = result
        outcome.ran.append(name)
        listener.step_done(name, result)
        return result

    profile = step("profile", optional=False)
    assert profile is not None
    plan = step("plan", optional=False,
                call=lambda ctx: _planned(runner.plan(ctx), request, float(profile.get("seconds", 0.0))))
    assert plan is not None
    chosen = list(plan.get("steps", []))
    shares = {str(k): float(v) for k, v in plan.get("shares", {}).items()}
    why = {str(s["kind"]): str(s.get("why", "")) for s in plan.get("plan", [])}
    for name in TUNING_STEPS:
        if name not in chosen:
            reason = (f"left out by --steps ({', '.join(request.steps)})" if request.steps and name not in request.steps
                      else f"not worth it: {why.get(name, 'the plan did not pick it')}")
            outcome.skipped[name] = reason
            listener.step_skipped(name, reason)
            continue
        result = step(name, shares.get(name))
        if name == "tune" and result is not None:
            if result.get("variant"):
                step("verify", verify_share(shares.get(name), float(result.get("seconds", 0.0))))
            else:
                outcome.skipped["verify"] = ("nothing to verify: " + str(result["skipped"]) if result.get("skipped")
                                             else "nothing to verify: tune kept the library's default everywhere")
                listener.step_skipped("verify", outcome.skipped["verify"])
    variants = outcome.variants()
    if not chosen:
        outcome.skipped["compare"] = "nothing to compare: the plan picked no kind of tuning"
        listener.step_skipped("compare", outcome.skipped["compare"])
    elif not variants and "compare" not in state.steps:
        outcome.skipped["compare"] = "nothing to compare: no step produced a tuning that sets anything"
        listener.step_skipped("compare", outcome.skipped["compare"])
    else:
        step("compare", shares.get("compare"), call=lambda ctx: runner.compare(ctx, variants))
    listener.step_started("report", None)
    ctx = Context(request, request.out, dict(outcome.results), None, listener)
    written = runner.report(ctx, outcome)
    listener.close_step()
    outcome.report = Path(written["path"]) if written.get("path") else None
    outcome.results["report"] = written
    listener.step_done("report", written)
    return outcome


def _planned(found: Mapping[str, Any], request: AutotuneRequest, profile_s: float) -> dict[str, Any]:
    """The runner's plan with the steps picked and the budget left after the profile split among them."""
    plan = list(found.get("plan", []))
    steps = chosen_steps(plan, request.steps)
    left = max(0.0, request.budget_s - profile_s)
    return {**found, "steps": steps, "budget_left_s": round(left, 3),
            "shares": {k: round(v, 3) for k, v in budget_shares(steps, left).items()}}
