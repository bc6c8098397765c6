"""Average slowdown against benchmark cost, one line per strategy (the figure of ACCLAiM's paper)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_slowdown_curves(summaries: Sequence[dict[str, Any]], path: str | Path, *, title: str = "",
                         target: float = 1.03) -> Path:
    """Write a PNG (or any format matplotlib infers from the suffix) of the `curve` of every summary.

    x: cost as a fraction of the exhaustive cost; y: average slowdown against the oracle (mean over seeds).
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on compute nodes
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.0, 4.2), dpi=120)
    for summary in summaries:
        curve = summary["curve"]
        exhaustive = summary["exhaustive_cost_s"]
        xs = [c / exhaustive for c, y in zip(curve["cost_s"], curve["avg_slowdown"], strict=True) if y is not None]
        ys = [y for y in curve["avg_slowdown"] if y is not None]
        axes.plot(xs, ys, label=summary["strategy"], linewidth=1.6)
    default = next((s["default_slowdown"] for s in summaries if s.get("default_slowdown")), None)
    if default:
        axes.axhline(default, color="grey", linestyle=":", linewidth=1, label=f"library default ({default:.2f})")
    axes.axhline(target, color="black", linestyle="--", linewidth=0.8, label=f"{target:g}")
    axes.set_xlabel("benchmark cost / exhaustive cost")
    axes.set_ylabel("average slowdown vs best algorithm")
    axes.set_ylim(0.98, min(2.0, max(1.3, (default or 1.3) + 0.05)))
    axes.set_xlim(0.0, max(s["curve"]["cost_s"][-1] / s["exhaustive_cost_s"] for s in summaries))
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    if title:
        axes.set_title(title)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path)
    plt.close(figure)
    return path
