"""Search outputs: the env file, the per-trial table and the PNG (objective per trial, best so far,
per-parameter effect). Pure functions of the records; the CLI decides where they go.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from tunempi.search.base import Trial
from tunempi.search.evaluate import Summary
from tunempi.search.space import CategoricalParam, ParamSpace


def format_env_file(env: Mapping[str, str] | None, comment: str) -> str:
    """NAME=value lines (the variables that apply the recommendation), with `comment` as a header;
    no lines = keep the defaults."""
    lines = [f"# {line}" for line in comment.splitlines()]
    if env:
        lines += [f"{name}={value}" for name, value in env.items()]
    return "\n".join(lines) + "\n"


def best_so_far(trials: Sequence[Trial]) -> list[float | None]:
    out: list[float | None] = []
    best = math.inf
    for t in trials:
        if t.is_ok and t.value is not None:
            best = min(best, t.value)
        out.append(None if math.isinf(best) else best)
    return out


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


def plot_trials(space: ParamSpace, trials: Sequence[Trial], path: str | Path, title: str = "") -> Path:
    """PNG: objective per trial with best-so-far (failed runs as red marks), one effect panel per parameter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_params = len(space)
    fig, axes = plt.subplots(1 + n_params, 1, figsize=(8, 3 + 2.2 * n_params), squeeze=False)
    ax = axes[0][0]
    ok = [t for t in trials if t.is_ok]
    failed = [t for t in trials if not t.is_ok]
    ax.plot([t.number for t in ok], [t.value for t in ok], "o", ms=4, label="trial")
    xs = [t.number for t in trials]
    ax.step(xs, [v if v is not None else float("nan") for v in best_so_far(trials)], where="post",
            color="black", label="best so far")
    if failed:
        top = max((t.value for t in ok if t.value is not None), default=1.0)
        ax.plot([t.number for t in failed], [top] * len(failed), "x", color="red", label="failed/timeout")
    ax.set_xlabel("trial")
    ax.set_ylabel("objective")
    ax.set_title(title or "search")
    ax.legend(loc="upper right", fontsize=8)
    for row, p in enumerate(space, start=1):
        pax = axes[row][0]
        pts = [(t.params[p.name], t.value) for t in ok if p.name in t.params]
        if isinstance(p, CategoricalParam):
            pax.plot([p.grid_index(v) for v, _ in pts], [y for _, y in pts], "o", ms=3)
            pax.set_xticks(range(len(p.choices)), [str(c) for c in p.choices])
        else:
            pax.plot([float(v) for v, _ in pts], [y for _, y in pts], "o", ms=3)
            if getattr(p, "log", False):
                pax.set_xscale("log")
        pax.set_xlabel(p.name)
        pax.set_ylabel("objective")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
