"""Search outputs: the env file and the PNG (objective per trial, best so far, per-parameter effect). Pure
functions of the records; the CLI decides where they go. The terminal tables are report/search_tables.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from tunempi.search.base import Trial
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
