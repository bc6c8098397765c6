"""Terminal rendering shared by the CLI and the demo: a console for tables, and the progress of library
calls (their listeners) as Rich progress bars. The library calls themselves never print."""

from __future__ import annotations

import os

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn

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
                           f"default, {plan.repeats} interleaved pairs each ({plan.runs} runs)")
        self.progress.start()
        self.task = self.progress.add_task("verifying", total=plan.runs)

    def measured(self, result: PointResult, done: int, total: int) -> None:
        if self.task is not None:
            p = result.point
            self.progress.update(self.task, completed=done, total=total,
                                 description=f"{p.collective} {format_size(p.msg_bytes)} {p.algorithm}")

    def rewriting(self) -> None:
        self.progress.stop()
        self.console.print("rewriting the tuning files (smoke run)")


def print_verify_report(console: Console, report: VerifyReport) -> None:
    for line in report.lines():
        console.print(line.replace("replaced ", "[yellow]replaced[/] ", 1) if line.startswith("replaced ") else line)
