"""The report of a tuning directory: tables, PNG plots and an HTML page, from its manifest alone.

- speedup against the library default per message size, one line per (collective, scale): from
  `verify` where it ran (interleaved measurements, with confidence intervals), else from the tuning
  measurements (tuned and default medians where both were measured);
- the selected-algorithm map: message size x (collective, scale), one colour per algorithm;
- the training curve: the strategies' convergence measure and the measured runs against benchmark time.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from tunempi.tune.manifest import Manifest
from tunempi.units import format_size


@dataclass(frozen=True)
class SpeedupRow:
    collective: str
    ranks: int
    nodes: int
    ppn: int
    msg_bytes: int
    algorithm: str
    speedup: float | None  # default time / tuned time
    ci_low: float | None
    ci_high: float | None
    source: str  # "verify" | "tune" | "-"
    replaced_from: str = ""

    @property
    def scale_label(self) -> str:
        return f"{self.ranks} ranks" if self.nodes == 1 else f"{self.nodes}x{self.ppn}"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def speedup_rows(manifest: Manifest) -> list[SpeedupRow]:
    """One row per selection cell, with the best evidence of its speedup over default."""
    verified = {v.cell: v for v in manifest.verify.cells} if manifest.verify is not None else {}
    rows = []
    for row in manifest.selection:
        speedup = low = high = None
        source = "-"
        found = verified.get(row.cell)
        if row.algorithm == "default":
            speedup, low, high, source = 1.0, 1.0, 1.0, "default"
        elif found is not None and _finite(found.speedup) is not None:
            speedup, low, high, source = found.speedup, _finite(found.ci_low), _finite(found.ci_high), "verify"
        elif row.median_us and row.default_us:
            speedup, source = row.default_us / row.median_us, "tune"
        cell = row.cell
        rows.append(SpeedupRow(cell.collective, cell.ranks, cell.nodes, cell.ppn, cell.msg_bytes, row.algorithm,
                               speedup, low, high, source, row.replaced_from))
    return rows


def geo_mean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def rules_table(manifest: Manifest) -> Table:
    """The rule sets as written into the files: per collective and communicator-size block."""
    table = Table(title=f"{manifest.library.name}: selected algorithms (as written to the files)")
    for header in ("collective", "ranks", "message sizes", "algorithm"):
        table.add_column(header)
    for collective, rule_set in sorted(manifest.rule_sets.items()):
        for block in rule_set.blocks:
            ranks = f"{block.min_ranks}+" if block.max_ranks is None else f"{block.min_ranks}..{block.max_ranks}"
            low = 0
            for rule in block.rules:
                sizes = (f"{format_size(low)}..{format_size(rule.max_bytes)}" if rule.max_bytes is not None
                         else f">= {format_size(low)}")
                table.add_row(collective, ranks, sizes, rule.algorithm)
                low = (rule.max_bytes or 0) + 1
                collective = ranks = ""
    return table


def speedup_table(manifest: Manifest) -> Table:
    """Per (collective, scale): cells, geo-mean speedup over default, best and worst, where measured."""
    rows = speedup_rows(manifest)
    verify = manifest.verify
    table = Table(title="speedup over the library default" + (" (verify: interleaved, 95% CI)" if verify else
                                                             " (from tuning measurements; run verify)"))
    for header in ("collective", "scale", "cells", "tuned", "geo-mean", "best", "worst", "slower*", "replaced"):
        table.add_column(header, justify="left" if header in ("collective", "scale") else "right")
    groups: dict[tuple[str, str], list[SpeedupRow]] = {}
    for row in rows:
        groups.setdefault((row.collective, row.scale_label), []).append(row)
    for (collective, scale), members in sorted(groups.items()):
        values = [r.speedup for r in members if r.speedup is not None]
        slower = sum(1 for r in members if r.ci_high is not None and r.ci_high < 1.0 and not r.replaced_from)
        geo = geo_mean(values)
        table.add_row(collective, scale, str(len(members)), str(sum(r.algorithm != "default" for r in members)),
                      "-" if geo is None else f"{geo:.3f}x", f"{max(values):.2f}x" if values else "-",
                      f"{min(values):.2f}x" if values else "-", str(slower),
                      str(sum(bool(r.replaced_from) for r in members)))
    return table


def summary_lines(manifest: Manifest) -> list[str]:
    """A few lines for terminals and the demo."""
    run = manifest.run
    lines = [
        f"{manifest.library.name}: {', '.join(manifest.collectives)} at "
        f"{', '.join(str(s[0]) + ' ranks' for s in manifest.scales)}; strategy {manifest.strategy} "
        f"{run.stop_reason} after {run.measured} runs in {run.wall_s:.0f} s "
        f"(benchmark {run.bench_s:.0f} s, {run.resumed} resumed)",
        f"files: {', '.join(manifest.files.values())} (+ {manifest.env_file}); smoke: "
        + ", ".join(f"{s.ranks} ranks {'ok' if s.ok else 'FAILED'}" for s in manifest.smoke),
    ]
    for collective, reasons in manifest.excluded.items():
        lines.append(f"{collective}: no tuning file can select "
                     + "; ".join(f"{name} ({why})" for name, why in reasons.items()))
    verify = manifest.verify
    if verify:
        s = verify.summary
        lines.append(
            f"verify: {s['compared']} tuned cells, geo-mean speedup {s['geo_mean_speedup_compared_after']:.3f}x "
            f"over default (all {s['cells']} cells {s['geo_mean_speedup_all_cells']:.3f}x), "
            f"{s['faster_beyond_noise']} faster beyond noise, slower beyond noise {s['slower_beyond_noise_before']}"
            f" -> {s['slower_beyond_noise_after']} (replaced {s['replaced']}; "
            f"{s.get('slower_point_estimate_after', '?')} below 1 within noise)")
    else:
        lines.append("not verified yet: run `tunempi verify --tuning DIR`")
    return lines


# -- plots ------------------------------------------------------------------------------------------
def _first_known(*values: float | None) -> float:
    """The first value that is known, NaN (a gap in the plot) when none is."""
    return next((v for v in values if v is not None), math.nan)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on compute nodes
    import matplotlib.pyplot as plt

    return plt


def plot_speedup(manifest: Manifest, path: Path) -> Path:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    estimates: list[float] = []
    groups: dict[str, list[SpeedupRow]] = {}
    for row in speedup_rows(manifest):
        groups.setdefault(f"{row.collective}, {row.scale_label}", []).append(row)
    for label, rows in sorted(groups.items()):
        rows = sorted((r for r in rows if r.speedup is not None), key=lambda r: r.msg_bytes)
        if not rows:
            continue
        xs = [max(r.msg_bytes, 1) for r in rows]
        line, = axes.plot(xs, [r.speedup for r in rows], marker="o", markersize=3, linewidth=1.4, label=label)
        estimates += [r.speedup for r in rows if r.speedup is not None and r.speedup > 0]
        # A 95 % interval from 3 noisy pairs can span orders of magnitude: draw it clipped to the plot.
        lows = [max(_first_known(r.ci_low, r.speedup), 1e-3) for r in rows]
        highs = [min(_first_known(r.ci_high, r.speedup), 1e3) for r in rows]
        axes.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.12, linewidth=0)
    axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")  # speedups are ratios: 2x and 0.5x are equally far from 1
    if estimates:
        axes.set_ylim(min(0.8, min(estimates) / 1.2), max(1.25, max(estimates) * 1.2))
    axes.set_xlabel("message size (bytes, OSU convention)")
    axes.set_ylabel("speedup over library default")
    axes.set_title(f"{manifest.library.name}: tuned vs default")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def plot_algorithm_map(manifest: Manifest, path: Path) -> Path:
    plt = _pyplot()
    rows = manifest.selection
    lines = sorted({(r.cell.collective, *r.cell.scale) for r in rows})
    sizes = sorted({r.cell.msg_bytes for r in rows})
    algorithms = sorted({r.algorithm for r in rows})
    colour = {a: i for i, a in enumerate(algorithms)}
    cmap = plt.get_cmap("tab20", max(len(algorithms), 1))
    figure, axes = plt.subplots(figsize=(max(7.0, 0.22 * len(sizes) + 3), 0.45 * len(lines) + 1.8), dpi=110)
    for y, line in enumerate(lines):
        for r in rows:
            if (r.cell.collective, *r.cell.scale) == line:
                x = sizes.index(r.cell.msg_bytes)
                axes.add_patch(plt.Rectangle((x - 0.5, y - 0.4), 1.0, 0.8, color=cmap(colour[r.algorithm]),
                                             hatch="//" if r.replaced_from else None))
    axes.set_xlim(-0.5, len(sizes) - 0.5)
    axes.set_ylim(-0.6, len(lines) - 0.4)
    axes.set_yticks(range(len(lines)),
                    [f"{c} {r if n == 1 else f'{n}x{p}'}" for c, r, n, p in lines], fontsize=8)
    axes.set_xticks(range(len(sizes)), [format_size(s) for s in sizes], rotation=90, fontsize=6)
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(colour[a])) for a in algorithms]
    axes.legend(handles, algorithms, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes.set_title(f"{manifest.library.name}: selected algorithm (hatched: replaced by verify)")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def plot_training_curve(manifest: Manifest, path: Path) -> Path:
    plt = _pyplot()
    curve = manifest.training_curve
    figure, axes = plt.subplots(figsize=(7.0, 4.0), dpi=110)
    xs = [p.bench_s for p in curve]
    axes.plot(xs, [p.convergence for p in curve], color="tab:blue", linewidth=1.8, label="convergence (mean)")
    collectives = sorted({c for p in curve for c in p.per_collective})
    for collective in collectives:
        axes.plot(xs, [p.per_collective.get(collective, math.nan) for p in curve], linewidth=0.8,
                  alpha=0.6, label=collective)
    axes.set_xlabel("benchmark time (s)")
    axes.set_ylabel("convergence measure")
    axes.set_ylim(0, 1.05)
    twin = axes.twinx()
    twin.plot(xs, [p.points for p in curve], color="tab:grey", linestyle="--", linewidth=1.2, label="runs")
    twin.set_ylabel("measured runs")
    lines_a, labels_a = axes.get_legend_handles_labels()
    lines_b, labels_b = twin.get_legend_handles_labels()
    axes.legend(lines_a + lines_b, labels_a + labels_b, fontsize=7, loc="lower right")
    axes.set_title(f"{manifest.library.name}: training curve ({manifest.strategy})")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def write_plots(manifest: Manifest, directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "speedup": plot_speedup(manifest, directory / "speedup.png"),
        "algorithm_map": plot_algorithm_map(manifest, directory / "algorithm-map.png"),
        "training_curve": plot_training_curve(manifest, directory / "training-curve.png"),
    }


def write_html(manifest: Manifest, plots: dict[str, Path], path: Path) -> Path:
    """One self-contained HTML page (plots embedded), readable without tunempi."""
    rows = speedup_rows(manifest)
    body = [f"<h1>tunempi tuning report: {html.escape(manifest.library.name)}</h1>"]
    body += [f"<p>{html.escape(line)}</p>" for line in summary_lines(manifest)]
    for name, png in plots.items():
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        body.append(f'<h2>{html.escape(name.replace("_", " "))}</h2><img src="data:image/png;base64,{data}">')
    body.append("<h2>cells</h2><table border=1 cellspacing=0 cellpadding=3><tr><th>collective</th><th>scale</th>"
                "<th>size</th><th>algorithm</th><th>speedup</th><th>95% CI</th><th>source</th><th>note</th></tr>")
    for r in rows:
        ci = f"{r.ci_low:.3f}..{r.ci_high:.3f}" if r.ci_low is not None and r.ci_high is not None else ""
        note = f"replaced {r.replaced_from}" if r.replaced_from else ""
        body.append(f"<tr><td>{r.collective}</td><td>{r.scale_label}</td><td>{format_size(r.msg_bytes)}</td>"
                    f"<td>{html.escape(r.algorithm)}</td><td>{'' if r.speedup is None else f'{r.speedup:.3f}'}"
                    f"</td><td>{ci}</td><td>{r.source}</td><td>{html.escape(note)}</td></tr>")
    body.append("</table>")
    path.write_text("<!doctype html><html><head><meta charset='utf-8'><title>tunempi report</title></head><body>"
                    + "\n".join(body) + "</body></html>\n", encoding="utf-8")
    return path
