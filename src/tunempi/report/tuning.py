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
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from tunempi.collectives import is_nonblocking
from tunempi.rules import INTERPOLATED, LIBRARY, MEASURED, CommBlock
from tunempi.rules.ruleset import EXTENDED
from tunempi.tune.manifest import CompositionRecord, Manifest
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
    """One row per selection cell, with the best evidence of its speedup over default: verify's held-out
    launches (which chose nothing), else verify's own, else the tuning measurements."""
    verified = {v.cell: v for v in manifest.verify.cells} if manifest.verify is not None else {}
    held = {v.cell: v for v in manifest.verify.held_out} if manifest.verify is not None else {}
    rows = []
    for row in manifest.selection:
        speedup = low = high = None
        source = "-"
        found = verified.get(row.cell)
        kept = held.get(row.cell)
        if row.algorithm == "default":
            speedup, low, high, source = 1.0, 1.0, 1.0, "default"
        elif kept is not None and kept.algorithm == row.algorithm and _finite(kept.speedup) is not None:
            speedup, low, high, source = kept.speedup, _finite(kept.ci_low), _finite(kept.ci_high), "held-out"
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


def block_evidence(block: CommBlock) -> str:
    """How a block's communicator sizes got their rules (issue 57): 'measured 2, interpolated 3, measured 4',
    'extended by policy smoothed 9+' above the largest measured size."""
    words = {MEASURED: "measured", INTERPOLATED: "interpolated", LIBRARY: "library's own (not measured)"}
    return ", ".join(f"{f'extended by policy {c.policy}' if c.basis == EXTENDED else words[c.basis]} {c.text()}"
                     for c in block.coverage())


def rules_table(manifest: Manifest) -> Table:
    """The rule sets as written into the files: per collective and communicator-size block, and how each
    block's sizes got their rules (measured, interpolated, or the library's own)."""
    table = Table(title=f"{manifest.library.name}: selected algorithms (as written to the files)")
    for header in ("collective", "ranks", "evidence", "message sizes", "algorithm"):
        table.add_column(header)
    for collective, rule_set in sorted(manifest.rule_sets.items()):
        for block in rule_set.blocks:
            for ppn, rules in block.rules_by_ppn():
                ranks = f"{block.min_ranks}+" if block.max_ranks is None else f"{block.min_ranks}..{block.max_ranks}"
                ranks += ppn_words(block, ppn)
                evidence = block_evidence(block) if ppn is not None or not block.by_ppn else "library's own"
                low = 0
                for rule in rules:
                    sizes = (f"{format_size(low)}..{format_size(rule.max_bytes)}" if rule.max_bytes is not None
                             else f">= {format_size(low)}")
                    table.add_row(collective, ranks, evidence, sizes, rule.algorithm)
                    low = (rule.max_bytes or 0) + 1
                    collective = ranks = evidence = ""
    return table


def ppn_words(block: CommBlock, ppn: int | None) -> str:
    """' at 2 per node' / ' at other ppn' where the block keys on processes per node (MPICH), else ''."""
    if not block.by_ppn:
        return ""
    return f" at {ppn} per node" if ppn is not None else " at other ppn"


def speedup_table(manifest: Manifest) -> Table:
    """Per (collective, scale): cells, geo-mean speedup over default, best and worst, where measured."""
    rows = speedup_rows(manifest)
    verify = manifest.verify
    held = verify is not None and bool(verify.held_out)
    table = Table(title="speedup over the library default" + (
        " (verify, held-out launches under the final files)" if held else
        " (verify: launches under the files)" if verify else " (from tuning measurements; run verify)")
        + figure_heading(manifest))
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


def scale_text(scale: tuple[int, ...]) -> str:
    """(ranks, nodes, ppn) as people say it: '4 ranks' on one node, '2 nodes x 2' across nodes."""
    ranks, nodes, ppn = scale
    return f"{ranks} ranks" if nodes == 1 else f"{nodes} nodes x {ppn}"


#: What each objective's figure is, as the report says it (collectives.OBJECTIVES).
OBJECTIVE_WORDS = {
    "latency": "latency: start + MPI_Wait",
    "time": "time: start + a computation as long as the default's latency + MPI_Wait, the same for every algorithm",
    "overlap": "overlap: the time not hidden behind a computation as long as the algorithm's latency",
}


def objective_words(manifest: Manifest) -> str:
    """'--objective; time: start + ...': where the objective came from (the manifest's objective_from: the
    command line, the application's profile, online records) and what its figure is; for time with the
    application's own computations (tune --from-profile, online best), that they are the application's."""
    words = OBJECTIVE_WORDS.get(manifest.objective, "")
    own = sorted({source.split(":")[0] for source in manifest.compute_from.values()
                  if source.startswith(("profile", "online records"))})
    if manifest.objective == "time" and own:
        words = (f"time: start + the application's own computation between start and wait ({', '.join(own)}) + "
                 "MPI_Wait, the same for every algorithm")
    return f"{manifest.objective_from or '--objective'}; {words}"


def figure_heading(manifest: Manifest) -> str:
    """What the speedups of the non-blocking collectives are of, for a table's title ('' if none is tuned)."""
    if not any(is_nonblocking(c) for c in manifest.collectives):
        return ""
    return f"; non-blocking collectives by their {manifest.objective}"


def files_select_line(manifest: Manifest) -> str:
    """What the files select, counted from them (Manifest.tuned_cells), and where tune decided otherwise, that its
    decisions are not all in the files (IS.B: "3 cells tuned" where every file selected the default)."""
    tuned, cells = manifest.tuned_cells(), len(manifest.selection)
    line = (f"the files select another algorithm than the library's default in {tuned} of {cells} cells" if tuned
            else f"the files select the library's default in all {cells} cells")
    decided = int(manifest.run.decisions.get("tuned", 0))
    if decided > tuned:
        held = f"{tuned} of them" if tuned else "none of them"
        how = (f"; {', '.join(sorted(manifest.one_choice))}: one algorithm {', '.join(sorted(set(manifest.one_choice.values())))} "
               "where one is no slower than the default at every size" if manifest.one_choice else "")
        line += (f" (tune decided {decided} cells for another algorithm across launches; the files hold {held}: "
                 f"the selection as the library's files can hold it{how})")
    return line


def unselectable_line(excluded: Mapping[str, Mapping[str, str]], directory: Path | None = None) -> str | None:
    """What no tuning file can select, counted in one line (one per collective made 28 of the demo's 222 lines);
    `report` lists each algorithm with its reason (`exclusions`)."""
    counts = {collective: len(reasons) for collective, reasons in sorted(excluded.items()) if reasons}
    if not counts:
        return None
    where = f"`tunempi report --tuning {directory}`" if directory is not None else "`tunempi report`"
    total = sum(counts.values())
    return (f"no tuning file can select {total} algorithm{'s' if total != 1 else ''} of {len(counts)} "
            f"collective{'s' if len(counts) != 1 else ''} ("
            + ", ".join(f"{c} {n}" for c, n in counts.items()) + f"; {where} lists them with the reasons)")


def summary_lines(manifest: Manifest) -> list[str]:
    """A few lines for terminals and the demo."""
    run = manifest.run
    lines = [
        f"{manifest.library.name}: {', '.join(manifest.collectives)} at "
        f"{', '.join(scale_text(s) for s in manifest.scales)}; strategy {manifest.strategy} "
        f"{run.stop_reason} after {run.measured} runs in {run.wall_s:.0f} s "
        f"(benchmark {run.bench_s:.0f} s, {run.resumed} resumed)",
        f"files: {', '.join(manifest.files.values())} (+ {manifest.env_file}); smoke: "
        + ", ".join(f"{s.ranks} ranks {'ok' if s.ok else 'FAILED'}" for s in manifest.smoke),
    ]
    unselectable = unselectable_line(manifest.excluded, manifest.directory)
    if unselectable:
        lines.append(unselectable)
    for collective, how in sorted(manifest.one_choice.items()):
        lines.append(f"{collective}: one algorithm {how} (the library's files cannot choose it by message size)")
    nonblocking = [c for c in manifest.collectives if is_nonblocking(c)]
    if nonblocking:
        lines.append(f"{', '.join(nonblocking)}: tuned for their {manifest.objective} ({objective_words(manifest)})")
    lines += assumption_lines(manifest)
    lines += composition_lines(manifest)
    verify = manifest.verify
    if verify:
        s = verify.summary
        lines.append(
            f"verify: {s['compared']} tuned cells, geo-mean speedup {s['geo_mean_speedup_compared_after']:.3f}x "
            f"over default (all {s['cells']} cells {s['geo_mean_speedup_all_cells']:.3f}x), "
            f"{s['faster_beyond_noise']} faster beyond noise, slower beyond noise {s['slower_beyond_noise_before']}"
            f" -> {s['slower_beyond_noise_after']} (replaced {s['replaced']}; "
            f"{s.get('slower_point_estimate_after', '?')} below 1 within noise)")
        if verify.stopped is not None:  # at its deadline (autotune's share): what it did not measure
            lines.append("verify: " + verify.stopped.line())
        from tunempi.tune.verify_run import held_out_lines

        # the held-out figures of the files as shipped, and every cell hold-out sent back or could not
        lines += ["verify: " + line for line in held_out_lines(verify.held_out_summary or None, verify.sent_back,
                                                               verify.held_out_rounds)]
        for v in verify.compositions:
            said = {"faster": "faster than", "slower": "slower than", "failed": "failed against"}.get(
                v.verdict, "not told apart from")
            lines.append(f"verify: composition {v.composition} of {v.collective} {said} the default "
                         f"side by side (speedup {v.speedup:.3f}, 95% CI {v.ci_low:.3f}..{v.ci_high:.3f}, "
                         f"{v.pairs} pairs): {'dropped' if v.dropped else 'kept'}")
    else:
        lines.append("not verified yet: run `tunempi verify --tuning DIR`")
    newest = {check.command: check for check in manifest.applications}
    for command, check in newest.items():
        interval = f", 95% CI {check.low:.3f}..{check.high:.3f}" if check.low is not None else ""
        speedup = f" {check.speedup:.3f}x{interval}" if check.speedup is not None else ""
        lines.append(f"application `{' '.join(command)}`: {check.verdict}{speedup} ({check.pairs} pairs), results "
                     f"{check.results} ({check.at})")
    lines += [f"warning: {line}" for line in application_warnings(manifest)]
    return lines


def composition_parts(record: CompositionRecord) -> tuple[str, list[str], list[str], str]:
    """(layout label, `name m1/m2/.. us` per composition that ran (default first), `name (status)` per one
    that did not, the decision)."""
    ranks, nodes, ppn = record.layout
    names = sorted({r.name for r in record.results}, key=lambda name: (name != "default", name))
    ran, other = [], []
    for name in names:
        mine = sorted((r for r in record.results if r.name == name), key=lambda r: r.msg_bytes)
        if all(r.status == "ok" and r.median_us is not None for r in mine):
            ran.append(f"{name} " + "/".join(f"{r.median_us:.1f}" for r in mine) + " us")
        else:
            statuses = sorted({r.status for r in mine if r.status != "ok"})
            other.append(f"{name} ({', '.join(statuses)})")
    choice = record.choice
    decision = (f"chose {choice.chosen}: {choice.reason}" if choice.chosen is not None
                else f"kept the library's default: {choice.reason}")
    return f"{nodes} nodes x {ppn} ({ranks} ranks)", ran, other, decision


def composition_line(record: CompositionRecord) -> str:
    """One line per collective: the compositions measured, those the library could not run, the decision."""
    layout, ran, other, decision = composition_parts(record)
    sizes = sorted({r.msg_bytes for r in record.results})
    line = f"{record.collective} compositions at {layout}, {'/'.join(format_size(s) for s in sizes)}: {', '.join(ran)}"
    if other:
        line += f"; not run: {', '.join(other)}"
    return f"{line}; {decision}"


def composition_lines(manifest: Manifest) -> list[str]:
    """The composition step of the manifest (nothing where it measured none)."""
    record = manifest.compositions
    lines = [composition_line(r) for r in record.collectives]
    if record.files:
        lines.append(f"composition files: {', '.join(record.files.values())}")
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


def apply_commands(manifest: Manifest) -> list[tuple[str, str]]:
    """(what it does, command) to apply a tuning directory, for the report and the terminal."""
    directory = str(manifest.directory)
    ranks = max((int(scale[0]) for scale in manifest.scales), default=2)
    launch = f"mpiexec -n {ranks} ./app"
    commands = [
        ("run an application with the tuning applied (a bare mpiexec is the tuned library's own launcher)",
         f"tunempi run --tuning {shlex.quote(directory)} -- {launch}"),
        # The launch line after -- lets --print-env leave out what cannot bound itself off the measured layouts.
        ("or set the variables in your shell or job script, without tunempi at run time",
         f'eval "$(tunempi run --tuning {shlex.quote(directory)} --print-env -- {launch})"; {launch}'),
    ]
    env_file = manifest.env_file
    if env_file:
        needs = list(manifest.needs_file)
        covers = ("every tuned collective" if not needs else
                  f"the collectives with one algorithm everywhere; {', '.join(needs)} "
                  f"{'needs' if len(needs) == 1 else 'need'} the tuning files")
        commands.append((f"or the environment file: forcing variables only ({covers})",
                         f"source {shlex.quote(str(manifest.directory / env_file))}"))
    return commands


def assumption_lines(manifest: Manifest) -> list[str]:
    """What the user vouched for at tune time (--assume-contiguous-datatypes, --assume-same-counts), said wherever the files are
    shown or applied: with another program these files may compute wrong results."""
    from tunempi.mpi.restrictions import REQUIREMENTS

    if not manifest.assumes:
        return []
    from tunempi.mpi.restrictions import ASSUME_FLAGS

    said = "; ".join(REQUIREMENTS.get(r, r) for r in manifest.assumes)
    flags = [flag for flag, requirements in ASSUME_FLAGS.items() if requirements & set(manifest.assumes)]
    return [f"assumes every collective call passes {said} (tuned with {' '.join(flags)}): the files "
            "may select algorithms that compute wrong results for other calls"]


def application_warnings(manifest: Manifest) -> list[str]:
    """The newest `tunempi compare` of each application command, when it found the directory slower, failing,
    or computing something else: said by `run` and `report`, so a tuning found bad is not applied unawares."""
    newest = {check.command: check for check in manifest.applications}
    lines = []
    for command, check in newest.items():
        if not check.warns:
            continue
        what = "changed the results" if check.results == "changed" else check.verdict
        lines.append(f"`tunempi compare` found this tuning {what} for `{' '.join(command)}` ({check.at}: "
                     f"{check.reason}); do not use it for that application")
    return lines


def exclusions(manifest: Manifest) -> list[dict[str, str]]:
    """What tuning left out of the files and why (the manifest's `excluded`: collective -> algorithm -> why)."""
    return [{"collective": collective, "algorithm": algorithm, "reason": why}
            for collective, reasons in sorted(manifest.excluded.items()) for algorithm, why in reasons.items()]


_STYLE = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#dfe3ea; --bg:#f6f7f9; --good:#1a7f37; --bad:#b42318;
        --accent:#2457c5; }
* { box-sizing:border-box; }
body { margin:0; font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
       color:var(--fg); background:var(--bg); }
main { max-width:1100px; margin:0 auto; padding:28px 24px 48px; }
h1 { font-size:26px; margin:0 0 4px; }
h2 { font-size:19px; margin:34px 0 10px; padding-bottom:4px; border-bottom:1px solid var(--line); }
p, li { max-width:80ch; }
.muted { color:var(--muted); }
.cards { display:grid; grid-template-columns:repeat(auto-fit,minmax(190px,1fr)); gap:12px; margin:18px 0; }
.card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 14px; }
.card .value { font-size:24px; font-weight:650; }
.card .label { color:var(--muted); font-size:13px; }
.panel { background:#fff; border:1px solid var(--line); border-radius:8px; padding:14px 16px; }
pre { background:#0f1729; color:#e6edf6; border-radius:6px; padding:10px 12px; margin:4px 0 12px;
      white-space:pre-wrap; overflow-wrap:anywhere; font-size:13.5px; }
table { border-collapse:collapse; width:100%; background:#fff; font-size:14px; }
th, td { text-align:left; padding:5px 10px; border-bottom:1px solid var(--line); vertical-align:top;
         overflow-wrap:break-word; }
th { background:#eef1f6; font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
.good { color:var(--good); font-weight:600; } .bad { color:var(--bad); font-weight:600; }
.bar { display:inline-block; height:9px; border-radius:5px; background:var(--good); vertical-align:middle; }
.ci { position:relative; display:inline-block; width:160px; height:14px; vertical-align:middle; }
.ci .range { position:absolute; top:5px; height:4px; background:#9fc3a9; border-radius:2px; }
.ci .point { position:absolute; top:2px; width:3px; height:10px; background:var(--good); }
.ci .one { position:absolute; top:0; width:1px; height:14px; background:#888; }
figure { margin:0 0 18px; background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px; }
figure img { display:block; max-width:100%; height:auto; margin:0 auto; }
figcaption { color:var(--muted); font-size:13px; margin-top:6px; }
.chip { display:inline-block; margin:2px 6px 2px 0; padding:1px 8px; border-radius:10px; background:#e3ecfb;
        font-size:13px; white-space:nowrap; }
.chip.default { background:#eceef2; color:var(--muted); }
.chip .range { color:var(--muted); font-variant-numeric:tabular-nums; }
details summary { cursor:pointer; color:var(--accent); margin:8px 0; }
"""


def _ci_bar(low: float, point: float, high: float, span: tuple[float, float]) -> str:
    """An inline interval on a log axis: where the speedup and its 95 % interval lie against 1."""
    lo, hi = math.log(span[0]), math.log(span[1])

    def at(value: float) -> float:
        return 100.0 * (min(max(math.log(value), lo), hi) - lo) / (hi - lo)

    return (f'<span class="ci" title="95% CI {low:.3f}..{high:.3f}"><span class="range" style="left:{at(low):.1f}%;'
            f'width:{max(at(high) - at(low), 1.0):.1f}%"></span><span class="one" style="left:{at(1.0):.1f}%">'
            f'</span><span class="point" style="left:calc({at(point):.1f}% - 1px)"></span></span>')


def write_html(manifest: Manifest, plots: dict[str, Path], path: Path) -> Path:
    """One self-contained HTML page (plots embedded as data URIs), readable without tunempi: what was tuned,
    where the tuned choice beats the default (verify's speedups and intervals), what was excluded and why,
    and how to apply it."""
    e = html.escape
    rows = speedup_rows(manifest)
    verify = manifest.verify
    library = manifest.library
    scales = ", ".join(scale_text(s) for s in manifest.scales)
    body = [f"<h1>tunempi tuning report: {e(library.name)}</h1>",
            f"<p class='muted'>{e(', '.join(manifest.collectives))} at {e(scales)}; "
            f"{e(library.prefix)}; tuned {e(manifest.created)} in "
            f"<code>{e(str(manifest.directory))}</code></p>"]
    nonblocking = [c for c in manifest.collectives if is_nonblocking(c)]
    if nonblocking:  # what their speedups are of (--objective)
        body.append(f"<p class='muted'>{e(', '.join(nonblocking))}: speedups of their {e(manifest.objective)} "
                    f"({e(objective_words(manifest))})</p>")

    tuned = [r for r in rows if r.algorithm != "default"]
    faster = [r for r in rows if r.source in ("verify", "held-out") and r.ci_low is not None and r.ci_low > 1.0]
    geo = geo_mean([r.speedup for r in rows if r.speedup is not None])
    cards = [(str(len(rows)), "cells (collective x scale x size)"),
             (str(len(tuned)), "cells where tuning picked an algorithm"),
             (str(len(faster)) if verify else "-", "faster than default beyond noise (verify)"),
             (f"{geo:.3f}x" if geo else "-", "geo-mean speedup, all cells" + ("" if verify else " (tuning data)"))]
    body.append("<div class='cards'>" + "".join(
        f"<div class='card'><div class='value'>{e(v)}</div><div class='label'>{e(label)}</div></div>"
        for v, label in cards) + "</div>")

    body.append("<h2>Where the tuned choice beats the default</h2>")
    if not verify:
        body.append("<p>Not verified yet: the speedups below are from the tuning measurements, without an "
                    "interval. Run <code>tunempi verify --tuning DIR</code> to measure tuned against default "
                    "side by side.</p>")
        winners = sorted((r for r in tuned if r.speedup is not None and r.speedup > 1.0), key=lambda r: -(r.speedup or 0.0))
    else:
        body.append("<p class='muted'>Cells whose speedup (default time / tuned time) has its 95% confidence "
                    "interval above 1, from <code>tunempi verify</code> (launches under the written files against "
                    "launches without them; where verify held launches out, from those, which chose nothing).</p>")
        winners = sorted(faster, key=lambda r: -(r.speedup or 0))
    if winners:
        values = [v for r in winners for v in (r.ci_low, r.speedup, r.ci_high) if v is not None and v > 0]
        span = (min(0.9, min(values) / 1.05), max(1.1, max(values) * 1.05))
        body.append("<table><tr><th>collective</th><th>scale</th><th class='num'>size</th><th>algorithm</th>"
                    "<th class='num'>speedup</th><th class='num'>95% CI</th><th>interval (log scale; grey: 1x)"
                    "</th></tr>")
        for r in winners:
            ci, bar = "-", ""
            if r.ci_low is not None and r.ci_high is not None and r.speedup is not None:
                ci, bar = f"{r.ci_low:.2f} - {r.ci_high:.2f}", _ci_bar(r.ci_low, r.speedup, r.ci_high, span)
            body.append(f"<tr><td>{e(r.collective)}</td><td>{e(r.scale_label)}</td>"
                        f"<td class='num'>{format_size(r.msg_bytes)}</td><td>{e(r.algorithm)}</td>"
                        f"<td class='num good'>{r.speedup:.2f}x</td><td class='num'>{ci}</td><td>{bar}</td></tr>")
        body.append("</table>")
    else:
        body.append("<p><b>Nowhere</b>: no tuned cell is faster than the library default beyond noise.</p>")

    body.append("<h2>Apply it</h2><div class='panel'>")
    for what, command in apply_commands(manifest):
        body.append(f"<div class='muted'>{e(what)}</div><pre>{e(command)}</pre>")
    body.append("<div class='muted'>the files must be read by the same library build they were tuned for "
                f"(fingerprint <code>{e(library.fingerprint)}</code>); "
                "<code>tunempi run</code> refuses any other.</div></div>")

    body.append("<h2>What was tuned</h2><p>The selection as written to the files: per collective and "
                "communicator size, the algorithm of each message-size range (grey: the library's own "
                "choice).</p><table><tr><th>collective</th><th>ranks</th><th>evidence</th>"
                "<th>message sizes: algorithm</th></tr>")
    for collective, rule_set in sorted(manifest.rule_sets.items()):
        for block in rule_set.blocks:
            for ppn, rules in block.rules_by_ppn():
                ranks = f"{block.min_ranks}+" if block.max_ranks is None else f"{block.min_ranks}..{block.max_ranks}"
                ranks += ppn_words(block, ppn)
                evidence = block_evidence(block) if ppn is not None or not block.by_ppn else "library's own"
                low, chips = 0, []
                for rule in rules:
                    sizes = (f"{format_size(low)}-{format_size(rule.max_bytes)}" if rule.max_bytes is not None
                             else f"{format_size(low)}+")
                    kind = "chip default" if rule.algorithm == "default" else "chip"
                    chips.append(f"<span class='{kind}'><span class='range'>{e(sizes)}</span> {e(rule.algorithm)}"
                                 "</span>")
                    low = (rule.max_bytes or 0) + 1
                body.append(f"<tr><td>{e(collective)}</td><td>{e(ranks)}</td><td>{e(evidence)}</td>"
                            f"<td>{''.join(chips)}</td></tr>")
    body.append("</table>")
    files = ", ".join(e(name) for name in manifest.files.values())
    smoke = ", ".join(f"{s.ranks} ranks {'passed' if s.ok else 'FAILED'}" for s in manifest.smoke)
    body.append(f"<p class='muted'>files: {files}; smoke check in the real library: {e(smoke or 'not run')}</p>")
    if manifest.compositions.collectives:
        body.append("<h2>Compositions across nodes</h2><p class='muted'>Each composition and the library's "
                    "default in an engine launch of its own at the largest multi-node layout (medians per "
                    f"size); one is written only where it beats the default by "
                    f"{manifest.compositions.margin:.0%} over the sizes.</p><table><tr><th>collective</th>"
                    "<th>layout</th><th>measured (us)</th><th>not run</th><th>decision</th></tr>")
        for record in manifest.compositions.collectives:
            layout, ran, other, decision = composition_parts(record)
            body.append(f"<tr><td>{e(record.collective)}</td><td>{e(layout)}</td><td>{e('; '.join(ran))}</td>"
                        f"<td>{e(', '.join(other) or '-')}</td><td>{e(decision)}</td></tr>")
        body.append("</table>")

    body.append("<h2>What was excluded, and why</h2>")
    excluded = exclusions(manifest)
    replaced = [r for r in rows if r.replaced_from]
    if excluded:
        columns = list(dict.fromkeys(k for entry in excluded for k in entry))
        body.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in columns) + "</tr>")
        for entry in excluded:
            body.append("<tr>" + "".join(f"<td>{e(entry.get(c, ''))}</td>" for c in columns) + "</tr>")
        body.append("</table>")
    else:
        body.append("<p>No algorithm was excluded from the tuning files (the manifest records none).</p>")
    if replaced:
        body.append(f"<p>Sent back to the library default by verify: {len(replaced)} cells where the tuned "
                    "algorithm showed no evidence of helping.</p><details><summary>show them</summary><table><tr>"
                    "<th>collective</th><th>scale</th><th class='num'>size</th><th>tuned algorithm</th></tr>")
        for r in replaced:
            body.append(f"<tr><td>{e(r.collective)}</td><td>{e(r.scale_label)}</td>"
                        f"<td class='num'>{format_size(r.msg_bytes)}</td><td>{e(r.replaced_from)}</td></tr>")
        body.append("</table></details>")

    captions = {
        "speedup": "speedup over the library default per message size (band: 95% interval where verified)",
        "algorithm_map": "the selected algorithm per message size and scale (hatched: replaced by verify)",
        "training_curve": "how tuning converged against benchmark time",
    }
    body.append("<h2>Plots</h2>")
    for name, png in plots.items():
        encoded = base64.b64encode(png.read_bytes()).decode("ascii")
        caption = captions.get(name, name.replace("_", " "))
        body.append(f"<figure><img alt='{e(caption)}' src='data:image/png;base64,{encoded}'>"
                    f"<figcaption>{e(caption)}</figcaption></figure>")

    body.append(f"<h2>Every cell</h2><details><summary>show all {len(rows)} cells</summary><table><tr>"
                "<th>collective</th><th>scale</th><th class='num'>size</th><th>algorithm</th>"
                "<th class='num'>speedup</th><th class='num'>95% CI</th><th>evidence</th><th>note</th></tr>")
    for r in rows:
        ci = f"{r.ci_low:.3f} - {r.ci_high:.3f}" if r.ci_low is not None and r.ci_high is not None else ""
        speed = "" if r.speedup is None else f"{r.speedup:.3f}x"
        tone = ("good" if r.ci_low is not None and r.ci_low > 1.0 else
                "bad" if r.ci_high is not None and r.ci_high < 1.0 else "")
        note = f"replaced {r.replaced_from}" if r.replaced_from else ""
        body.append(f"<tr><td>{e(r.collective)}</td><td>{e(r.scale_label)}</td>"
                    f"<td class='num'>{format_size(r.msg_bytes)}</td><td>{e(r.algorithm)}</td>"
                    f"<td class='num {tone}'>{speed}</td><td class='num'>{ci}</td><td>{e(r.source)}</td>"
                    f"<td>{e(note)}</td></tr>")
    body.append("</table></details>")
    body.append("<p class='muted'>" + "<br>".join(e(line) for line in summary_lines(manifest)) + "</p>")

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>tunempi report: {e(library.name)}</title><style>{_STYLE}</style></head><body><main>"
        + "\n".join(body) + "</main></body></html>\n", encoding="utf-8")
    return path
