"""The terminal tables of `tunempi search` (Rich): every trial with the best so far, and the strategies
compared on landscapes. Rendering lives here, not in search/ (it sees records and summaries only)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from tunempi.search.base import Trial
from tunempi.search.evaluate import Summary
from tunempi.search.report import best_so_far
from tunempi.search.space import ParamSpace


def trials_table(space: ParamSpace, trials: Sequence[Trial], title: str = "trials") -> Table:
    table = Table(title=title)
    table.add_column("#", justify="right")
    for name in space.names:
        table.add_column(name)
    table.add_column("status")
    table.add_column("value", justify="right")
    table.add_column("best so far", justify="right")
    for t, best in zip(trials, best_so_far(trials), strict=True):
        table.add_row(
            str(t.number), *[escape(str(t.params.get(n, "-"))) for n in space.names],
            t.status.value if t.is_ok else f"[red]{t.status.value}[/]",
            f"{t.value:.6g}" if t.value is not None else "-",
            f"{best:.6g}" if best is not None else "-",
        )
    return table


def comparison_table(summaries: Sequence[Summary], budget: int, target: float) -> Table:
    table = Table(title=f"trials until the recommendation is within {target:.0%} of the optimum "
                        f"(budget {budget})")
    for col in ("landscape", "strategy", "reached", "median", "median|reached", "slowdown", "failed"):
        table.add_column(col, justify="left" if col in ("landscape", "strategy") else "right", no_wrap=True)
    for s in summaries:
        table.add_row(
            s.landscape, s.strategy, f"{s.reached}/{s.seeds}",
            f"{s.median_trials:g}" if s.median_trials is not None else f">{budget}",
            f"{s.median_trials_reached:g}" if s.median_trials_reached is not None else "-",
            f"{s.median_final_slowdown:.3f}" if math.isfinite(s.median_final_slowdown) else "fails",
            f"{s.failed_fraction:.0%}",
        )
    return table
