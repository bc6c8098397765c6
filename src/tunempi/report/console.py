"""Terminal rendering shared by the CLI and the demo: a console for tables, and the progress of library
calls (their listeners) as Rich progress bars. The library calls themselves never print."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn

from tunempi.tune.runner import PointResult
from tunempi.tune.verify_run import VerifyListener, VerifyPlan, VerifyReport
from tunempi.units import format_size


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 120 columns when output goes to a file or pipe."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


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
