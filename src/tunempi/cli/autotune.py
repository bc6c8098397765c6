"""`tunempi autotune`: parse, call autotune.run_autotune with the library's steps, render each step's progress.

    tunempi autotune [--budget 20m] [--out DIR] [--mpi SPEC] [--ranks N | --nodes N --ppn N] [--hostfile F]
                     [--result REGEX ...] [--result-command CMD] [--tolerance REL] [--min-runs N] [--max-runs N]
                     [--steps tune,online,search] [--db PATH] [--seed N] [--restart] -- mpiexec -n 4 ./app
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.rule import Rule

from tunempi.autotune import STEPS, AutotuneListener, AutotuneRequest, run_autotune
from tunempi.autotune.pipeline import DEFAULT_BUDGET_S
from tunempi.autotune.report import expected_sentence, other_verdicts, recorded_expected, tuned_comparison
from tunempi.autotune.steps import LibrarySteps
from tunempi.cli.paths import directory_option
from tunempi.collectives import check_objective
from tunempi.launch.signals import interrupt_status
from tunempi.mpi.discovery import SPEC_HELP
from tunempi.report.console import TuneProgress, VerifyProgress, output_console
from tunempi.units import parse_duration

DEFAULT_OUT = "tunempi-autotune"
_out = output_console()
_err = output_console(stderr=True)


def autotune(
    command: list[str] = typer.Argument(None, help="The application's launch line, after '--'."),
    budget: str = typer.Option(f"{DEFAULT_BUDGET_S / 60:g}m", "--budget", help="Time for the whole pipeline "
                               "(e.g. 20m), split among the steps the plan picks."),
    out: Path = typer.Option(Path(DEFAULT_OUT), "--out", help="Work directory: the state of finished steps, "
                             "the profile, the tunings, the results database and report.html. Rerunning the "
                             "same command there continues it.", callback=directory_option),
    mpi: str | None = typer.Option(None, "--mpi", help=f"MPI library: {SPEC_HELP} (env TUNEMPI_MPI; default: "
                                   "the library of the launch line's mpiexec/mpirun, else the embedded MPICH)."),
    ranks: int | None = typer.Option(None, "--ranks", help="tune: processes on one node (default: the profile's "
                                     "layout)."),
    nodes: int | None = typer.Option(None, "--nodes", help="tune: nodes (default: the profile's)."),
    ppn: int | None = typer.Option(None, "--ppn", help="tune: processes per node (default: the profile's)."),
    hostfile: Path | None = typer.Option(None, "--hostfile", help="Hosts of a multi-node tune and verify "
                                         "(default: the Slurm/PBS allocation, else TUNEMPI_HOSTFILE)."),
    result: list[str] = typer.Option(None, "--result", "--check", help="compare: regex for what the application "
                                     "computed (every match, its groups); it must be the default's in every run. "
                                     "Repeatable."),
    result_command: str | None = typer.Option(None, "--result-command", help="compare: shell command run after "
                                              "each run (its output in $TUNEMPI_RUN_OUTPUT); its stdout is the "
                                              "result."),
    tolerance: float | None = typer.Option(None, "--tolerance", help="compare: relative tolerance for numbers in "
                                           "the results (default 1e-6)."),
    min_runs: int | None = typer.Option(None, "--min-runs", help="compare: runs of each arm at least."),
    max_runs: int | None = typer.Option(None, "--max-runs", help="compare: runs of each arm at most."),
    steps: str | None = typer.Option(None, "--steps", help="Allow only these kinds of tuning (comma list of "
                                     "tune, online, search; default: as the plan says)."),
    db: str | None = typer.Option(None, "--db", help="Results database (default: DIR/results.sqlite)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every step."),
    restart: bool = typer.Option(False, "--restart", help="Forget the finished steps of DIR and start over (the "
                                 "steps' own records stay in their stores)."),
    objective: str | None = typer.Option(None, "--objective", help="tune: what is minimised for a non-blocking "
                                         "collective (time, latency, overlap; default: the profile's, as "
                                         "`tune --from-profile` takes it)."),
) -> None:
    """Profile the application, run the tuning the profile warrants (tune and verify, online, search), compare
    the application under each tuning against the library's default, and write one HTML report."""
    request = AutotuneRequest(
        list(command or []), out, parse_duration(budget), mpi, ranks, nodes, ppn, hostfile, tuple(result or ()),
        result_command, tolerance, min_runs, max_runs,
        tuple(s.strip() for s in (steps or "").split(",") if s.strip()), db, seed, restart,
        check_objective(objective) if objective is not None else None)
    listener = _Progress()
    try:
        outcome = run_autotune(request, LibrarySteps(), listener)
    except KeyboardInterrupt as exc:
        listener.close_step()
        _err.print(f"interrupted: the finished steps are recorded in {out}; rerun the same command to continue")
        raise typer.Exit(interrupt_status(exc)) from None
    _out.print(Rule())
    for name, why in outcome.failed.items():
        _out.print(f"[red]{escape(name)} failed[/]: {escape(why)} (a rerun tries it again)")
    compare = outcome.results.get("compare", {}).get("outcome")
    for verdict in compare.get("variants", []) if compare else []:
        _out.print(f"{escape(verdict['variant']['name'])}: {verdict['verdict']}: {escape(verdict['reason'])}; "
                   f"results {verdict['results']}")
    if compare:
        _out.print(f"result check: {escape(compare['result_check'])}")
    expected = recorded_expected(outcome.results)
    if expected:  # what tune's measurements say the tuning can give at most (docs/autotune.md, "Expected gain")
        _out.print(escape(expected_sentence(expected, tuned_comparison(outcome.results),
                                            other_verdicts(outcome.results))), soft_wrap=True)
    _out.print(f"report: [bold]{outcome.report}[/]")
    if compare and any(v["verdict"] in ("failed", "wrong results") for v in compare.get("variants", [])):
        raise typer.Exit(3)
    if outcome.failed:
        raise typer.Exit(1)


class _Progress(AutotuneListener):
    """Each step under a rule with its number, then its own command's progress display."""

    def __init__(self) -> None:
        self._close: list[Any] = []

    def _title(self, name: str, text: str) -> None:
        _err.print(Rule(f"[bold]{STEPS.index(name) + 1}/{len(STEPS)} {name}[/] {text}", align="left"))

    def step_started(self, name: str, share_s: float | None) -> None:
        self._title(name, f"(budget {share_s:.0f} s)" if share_s is not None else "")

    def step_resumed(self, name: str, result: Mapping[str, Any]) -> None:
        self._title(name, "finished in an earlier run: skipped")

    def step_skipped(self, name: str, reason: str) -> None:
        self._title(name, "skipped")
        _err.print(escape(reason), soft_wrap=True)

    def step_failed(self, name: str, message: str) -> None:
        _err.print(f"[red]{name} failed:[/] {escape(message)}", soft_wrap=True)

    def step_done(self, name: str, result: Mapping[str, Any]) -> None:
        if name == "plan":
            for step in result.get("plan", []):
                mark = "[green]yes[/]" if step.get("worth") else "no"
                _err.print(f"  {step['kind']}: {mark}: {escape(str(step.get('why', '')))}", soft_wrap=True)
        elif result.get("skipped"):
            _err.print(f"nothing to do: {escape(str(result['skipped']))}", soft_wrap=True)
        elif name != "profile":
            _err.print(f"{name}: done in {float(result.get('seconds', 0.0)):.0f} s"
                       + (f"; wrote {escape(str(result['path']))}" if result.get("path") else ""))

    def note(self, text: str) -> None:
        _err.print(escape(text), soft_wrap=True)

    def tune_events(self) -> TuneProgress:
        progress = TuneProgress(_err)
        self._close.append(progress.close)
        return progress

    def verify_listener(self) -> VerifyProgress:
        progress = VerifyProgress(_err)
        self._close.append(progress.progress.stop)
        return progress

    def search_listener(self) -> Any:
        from tunempi.cli.search import _SearchOutput

        return _SearchOutput()

    def compare_listener(self) -> Any:
        from tunempi.cli.compare import _Progress as CompareProgress

        progress = CompareProgress()
        progress.__enter__()
        self._close.append(progress.__exit__)
        return progress

    def close_step(self) -> None:
        while self._close:
            self._close.pop()()


def register(app: typer.Typer) -> None:
    app.command("autotune", context_settings={"allow_interspersed_args": False})(autotune)
