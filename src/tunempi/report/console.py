"""Terminal rendering shared by the CLI and the demo: a console for tables, and the progress of library
calls (their listeners) as Rich progress bars. The library calls themselves never print."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.status import Status

from tunempi.collectives import is_nonblocking
from tunempi.report.tuning import composition_line, files_select_line, unselectable_line
from tunempi.tune.job import (
    CompositionsMeasured,
    CompositionsWritten,
    FilesWritten,
    MeasuringCompositions,
    PointMeasured,
    RoundDone,
    TuneEvent,
    TuneStarted,
    TuningStopped,
    WritingFiles,
)
from tunempi.tune.runner import PointResult
from tunempi.tune.verify_run import VerifyListener, VerifyPlan, VerifyReport
from tunempi.units import format_size

#: Columns at least, when output goes to a file or a pipe: tables keep every column whole instead of being
#: squeezed into "…" at Rich's default of 80 (or at a COLUMNS=80 that a job environment exports).
FILE_WIDTH = 200


def output_console(*, stderr: bool = False) -> Console:
    """The terminal's width on a terminal; otherwise FILE_WIDTH columns (or a wider COLUMNS), no colours."""
    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    return Console(stderr=stderr, width=max(FILE_WIDTH, int(columns) if columns.isdigit() else 0))


class VerifyProgress(VerifyListener):
    """`run_verify`'s progress on a console: the plan, a bar over the runs, the rewrite. Use as a context
    manager around the call (the bar is closed on the way out)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
        self.progress = Progress(*columns, console=console, transient=False)
        self.task: TaskID | None = None

    def __enter__(self) -> VerifyProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def started(self, plan: VerifyPlan) -> None:
        self.console.print(f"[bold]{plan.library.name}[/]: verifying {plan.tuned_cells} tuned cells against the "
                           f"default under the written files, {plan.repeats} pairs of launches ({plan.runs} runs)")
        nonblocking = sorted({c.collective for c, a in plan.selection.items() if is_nonblocking(c.collective)
                              and a != "default"})
        if nonblocking:  # compared as tune measured them (the manifest's objective, with time's computations)
            self.console.print(f"  {', '.join(nonblocking)}: compared by their {plan.manifest.objective}, as tuned "
                               "(--objective)")
        chosen = plan.manifest.compositions.chosen()
        if chosen:
            said = ", ".join(f"{name} of {collective}" for collective, name in sorted(chosen.items()))
            self.console.print(f"then the written composition{'s' if len(chosen) > 1 else ''} ({said}) against "
                               f"the default, {plan.repeats} pairs of launches each")
        self.progress.start()
        self.task = self.progress.add_task("verifying", total=plan.runs)

    def composition_measured(self, collective: str, composition: str, done: int, total: int) -> None:
        self.progress.stop()
        self.console.print(f"  {collective} composition {composition}: pair {done} of {total} measured")

    def measured(self, result: PointResult, done: int, total: int) -> None:
        if self.task is not None:
            p = result.point
            self.progress.update(self.task, completed=done, total=total,
                                 description=f"{p.collective} {format_size(p.msg_bytes)} {p.algorithm}")

    def rewriting(self) -> None:
        self.progress.stop()
        self.console.print("rewriting the tuning files (smoke run)")

    def waiting_for_state(self, layouts: int, waited_s: float) -> None:
        if self.task is not None:  # the bar says it: the machine is slower than tune saw it, verify waits
            self.progress.update(self.task, description=f"machine slower than its fastest state: waiting "
                                                        f"({waited_s:.0f} s)")

    def holding_out(self, runs: int) -> None:
        self.progress.stop()
        self.console.print(f"measuring the final files again in new launches, for the figures to report ({runs} runs)")
        self.progress = Progress(*self.progress.columns, console=self.console, transient=False)
        self.progress.start()
        self.task = self.progress.add_task("held out", total=runs)


def print_verify_report(console: Console, report: VerifyReport) -> None:
    for line in report.lines():
        console.print(line.replace("replaced ", "[yellow]replaced[/] ", 1) if line.startswith("replaced ") else line)


class TuneProgress:
    """Renders `run_tune`'s events on a Rich console: the plan, a progress bar while tuning (the first
    failure of an algorithm at a scale in full, then a count), the outcome, and the rules written."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.status: Status | None = None
        self.failures: dict[tuple[str, str, int], int] = {}
        self.unusable: set[tuple[str, str, int]] = set()

    def __call__(self, event: TuneEvent) -> None:
        if isinstance(event, TuneStarted):
            self.started(event)
        elif isinstance(event, PointMeasured):
            self.measured(event)
        elif isinstance(event, RoundDone):
            per = " ".join(f"{c} {v:.0%}" for c, v in event.state.per_collective.items())
            self._update(f"converging ({per})", completed=100.0 * event.state.convergence)
        elif isinstance(event, TuningStopped):
            self.stopped(event)
        elif isinstance(event, WritingFiles):
            self.status = self.console.status("writing the tuning files and loading them into the library "
                                              "(smoke run)")
            self.status.start()
        elif isinstance(event, FilesWritten):
            self.written(event)
        elif isinstance(event, MeasuringCompositions):
            layout = event.layout
            self.status = self.console.status(
                f"measuring compositions of {', '.join(event.collectives)} at {layout.nodes} nodes x {layout.ppn} "
                f"({len(event.sizes)} sizes, {event.launches} launches)")
            self.status.start()
        elif isinstance(event, CompositionsMeasured):
            self.close()
            self.console.print(escape(composition_line(event.record)), soft_wrap=True)
        elif isinstance(event, CompositionsWritten):
            self.close()
            record = event.manifest.compositions
            if record.files:
                self.console.print(f"composition file {', '.join(record.files.values())} checked in "
                                   f"{event.manifest.library.name} at the layout and written; activated by "
                                   f"{', '.join([*record.env_files, *record.env])}")
            else:
                self.console.print("compositions: the library's defaults kept (nothing written)")

    def started(self, event: TuneStarted) -> None:
        sizes = event.sizes
        self.console.print(
            f"[bold]{event.library.name}[/] ({event.library.prefix}): tuning {', '.join(event.collectives)} at "
            f"{', '.join(s.label() for s in event.scales)}, {len(sizes)} sizes {format_size(sizes[0])}.."
            f"{format_size(sizes[-1])} ({event.cells} cells, {event.exhaustive_points} exhaustive points), "
            f"strategy {event.strategy}, topology {event.topology}, store {event.db}")
        nonblocking = [c for c in event.collectives if is_nonblocking(c)]
        if nonblocking:
            said = f" (from {event.objective_from})" if event.objective_from.startswith("profile") else " (--objective)"
            own = event.from_application if event.objective == "time" else 0
            rest = event.computations - own
            where = "; the computation of each of " + " and ".join(
                part for part in (f"{own} cells: the application's own between start and wait (its profile)"
                                  if own else "",
                                  f"{rest} cells: the default's latency there" if rest else "") if part)
            self.console.print(f"  {', '.join(nonblocking)}: measured for their {event.objective}{said}"
                               + (where if event.objective == "time" and event.computations else ""),
                               soft_wrap=True)
        if event.distributions:
            self.console.print("  counts: " + ", ".join(f"{c} {d}" for c, d in event.distributions.items())
                               + " (every other collective uniform)")
        unselectable = unselectable_line(event.excluded)
        if unselectable:
            self.console.print(f"  {escape(unselectable)}", soft_wrap=True)
        if event.resumed:
            self.console.print(f"resuming: {event.resumed} earlier runs of these points read from the store")
        columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                   TextColumn("{task.fields[points]} runs"), TimeElapsedColumn())
        self.progress = Progress(*columns, console=self.console, transient=False)
        self.task = self.progress.add_task("converging", total=100.0, points=0)
        self.progress.start()

    def measured(self, event: PointMeasured) -> None:
        result = event.result
        if not result.outcome.ok:
            key = (result.point.collective, result.point.algorithm, result.layout.ranks)
            self.failures[key] = self.failures.get(key, 0) + 1
            if result.outcome.not_usable:  # the library refuses the call: nothing went wrong
                self.unusable.add(key)
            elif self.failures[key] == 1:
                self.console.print(
                    f"[red][FAIL][/] {key[0]} {key[1]} {format_size(result.point.msg_bytes)} at {key[2]} "
                    f"ranks: {result.outcome.status}: {escape(result.outcome.reason)}")
        self._update(f"{result.point.collective} {format_size(result.point.msg_bytes)}", points=event.measured)

    def stopped(self, event: TuningStopped) -> None:
        if self.unusable:
            self.console.print("not usable here (the library cannot run them at some sizes; left out there): "
                               + ", ".join(f"{c} {a} at {r} ranks" for c, a, r in sorted(self.unusable)))
        repeated = {k: n for k, n in self.failures.items() if n > 1 and k not in self.unusable}
        if repeated:
            self.console.print("failed more than once (not measured further where blocked): " + ", ".join(
                f"{c} {a} at {r} ranks x{n}" for (c, a, r), n in sorted(repeated.items())))
        self.close()
        outcome = event.outcome
        self.console.print(
            f"{outcome.stop_reason}: {outcome.measured} runs measured in {outcome.wall_s:.1f} s "
            f"(benchmark time {outcome.bench_s:.1f} s, {outcome.launches} engine launches, {outcome.failed} runs "
            "failed)")
        if outcome.failures:  # a count alone says nothing of why (issue 58)
            where = f"; every failed run's reason in {event.failures_log}" if event.failures_log else ""
            self.console.print(f"  first failed run: {escape(outcome.failures[0])}{where}", soft_wrap=True)
        if outcome.decisions:
            counts = outcome.outcome_counts()
            launches = max((d.comparison.pairs for d in outcome.decisions.values() if d.comparison), default=1)
            self.console.print(
                f"decided across {launches} launches: {counts.get('tuned', 0)} cells for another algorithm, "
                f"{counts.get('tie', 0)} "
                f"ties (the library's default kept: no difference that held in every launch), "
                f"{counts.get('default', 0)} default")
            if outcome.state_blocks:
                self.console.print(
                    f"the machine was slower than its fastest state in some deciding launches (cross-core probe "
                    f"over 2.5x its fastest): {outcome.state_blocks} more measured after pauses of "
                    f"{outcome.state_wait_s:.0f} s in all, deciding on those of the fastest state")
            if outcome.turns_blocks:
                self.console.print(
                    f"{outcome.turns_blocks} more deciding launch(es) where the layout has more ranks than "
                    f"the node has cores (ranks take turns on them, and launches differ more)")
        if outcome.stop_reason == "interrupted":
            self.console.print("[yellow]interrupted[/]: measured points are kept in the store; rerun to resume.")
        elif outcome.stop_reason == "exhaustive-cost":
            self.console.print("ended at the cost of measuring every point once: another model round would "
                               "have cost more (points this cheap are not worth one)")

    def written(self, event: FilesWritten) -> None:
        self.close()
        manifest = event.manifest
        self.console.print(f"tuning files smoke-checked in {manifest.library.name} and written to "
                           f"{manifest.directory} ({event.manifest_path.name})")
        for collective, rule_set in sorted(manifest.rule_sets.items()):
            for block in rule_set.blocks:
                upto = "+" if block.max_ranks is None else f"..{block.max_ranks}"
                rules = ", ".join(
                    f"{'<=' + format_size(r.max_bytes) if r.max_bytes is not None else 'above'} {r.algorithm}"
                    for r in block.rules)
                self.console.print(f"  {collective} [{block.min_ranks}{upto} ranks]: {rules}", soft_wrap=True)
        self.console.print(files_select_line(manifest), soft_wrap=True)

    def _update(self, description: str, *, completed: float | None = None, points: int | None = None) -> None:
        if self.progress is None or self.task is None:
            return
        if points is None:
            self.progress.update(self.task, description=description, completed=completed)
        else:
            self.progress.update(self.task, description=description, completed=completed, points=points)

    def close(self) -> None:
        """Stop the progress bar or status line (also when tuning failed half-way)."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        if self.status is not None:
            self.status.stop()
            self.status = None
