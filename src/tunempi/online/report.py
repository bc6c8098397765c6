"""What the online tuning has learnt: probabilities per cell over the batches (table, PNG) and the best
algorithm per cell written as tuning files with the same writers as `tunempi tune`."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.errors import MPIError, UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.online.cells import SizeRangeCell, SizeRanges
from tunempi.online.state import OnlineConfig, OnlineState, Probabilities, Record, uniform
from tunempi.online.update import verdict_of

if TYPE_CHECKING:
    from tunempi.rules import RuleSet, ScaledChoice
    from tunempi.space import Cell
    from tunempi.tune.files import WrittenFiles as TuningWritten
    from tunempi.tune.manifest import Manifest

_log = logging.getLogger(__name__)

#: `online best` smoke-checks its files at the measured single-node rank counts up to this many.
MAX_SMOKE_RANKS = 8


@dataclass(frozen=True)
class CellHistory:
    """One cell's probabilities in every batch (uniform where a batch had no entry for it)."""

    cell: SizeRangeCell
    algorithms: tuple[str, ...]
    batches: tuple[int, ...]
    probabilities: tuple[dict[str, float], ...]
    estimates_ns: dict[str, float] = field(default_factory=dict)  # latest batch's

    @property
    def favourite(self) -> tuple[str, float]:
        latest = self.probabilities[-1]
        name = max(latest, key=lambda k: latest[k])
        return name, latest[name]


def cell_histories(state: OnlineState, contains: str | None = None) -> list[CellHistory]:
    history = state.history()
    if not history:
        raise UsageError(f"{state.dir} has no probability history yet")
    switches = state.switches
    keys = sorted({key for p in history for key in p.cells}, key=lambda k: SizeRangeCell.from_key(k))
    out = []
    for key in keys:
        if contains and contains not in key:
            continue
        cell = SizeRangeCell.from_key(key)
        switch = switches.get(cell.collective)
        if switch is None:
            continue
        names = tuple(switch.names)
        probs = tuple(p.cells.get(key, uniform(names)) for p in history)
        estimates = next((p.estimates.get(key, {}) for p in reversed(history) if key in p.estimates), {})
        out.append(CellHistory(cell, names, tuple(p.batch for p in history), probs, estimates))
    return out


def cell_label(cell: SizeRangeCell, sizes: SizeRanges) -> str:
    size = "-" if cell.collective == "barrier" else sizes.label(cell.size_index) + " B"
    return f"{cell.collective} {cell.ranks}r {cell.nodes}x{cell.ppn} {size}"


def plot_histories(histories: Sequence[CellHistory], sizes: SizeRanges, path: Path | str, *,
                   max_cells: int = 12) -> Path:
    """Stacked probabilities over the batches, one panel per cell (like OMPICollTune's Figure 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = list(histories)[:max_cells]
    if not shown:
        raise UsageError("no cells to plot")
    columns = min(3, len(shown))
    rows = (len(shown) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.8 * rows), squeeze=False)
    every = sorted({name for h in shown for name in h.algorithms})
    colours = {name: plt.get_cmap("tab20")(i % 20) for i, name in enumerate(every)}
    for ax, h in zip(axes.flat, shown, strict=False):
        series = [[p.get(name, 0.0) for p in h.probabilities] for name in h.algorithms]
        ax.stackplot(list(h.batches), series, labels=list(h.algorithms),
                     colors=[colours[name] for name in h.algorithms])
        ax.set_title(cell_label(h.cell, sizes), fontsize=9)
        ax.set_ylim(0, 1)
        ax.set_xlabel("batch", fontsize=8)
        ax.set_ylabel("probability", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[name]) for name in every]
    fig.legend(handles, every, loc="lower center", ncol=min(6, len(every)), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.04 + 0.02 * (len(every) // 6), 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class BestChoice:
    cell: SizeRangeCell
    algorithm: str
    time_ns: float
    default_ns: float | None
    fastest: str = ""  # the fastest estimate of all (differs when it may not replace the default)
    measured: bool = False  # the cell has paired evidence against the default (else: predicted)


def best_choices(probabilities: Probabilities, sizes: SizeRanges,
                 writable: Mapping[str, Collection[str]] | None = None) -> list[BestChoice]:
    """The best algorithm of every cell with estimates: the fastest estimate among `default` and the
    algorithms that may replace it. With `writable` (collective -> algorithms a tuning file can select)
    only those may. In a measured cell (paired evidence present) an algorithm may replace the default
    only when the runs that drew both show it "faster" by the shared paired rule (tunempi.evidence: at
    its level, and in at least 3 of 4 of those runs): the default costs nothing, and a ranking that flips
    with the machine's state is no reason to leave it.
    Predicted cells have no such evidence and follow the estimates."""
    def may_replace_default(name: str, collective: str, evidence: Mapping[str, Mapping[str, float]] | None) -> bool:
        if writable is not None and name not in writable.get(collective, ()):
            return False
        if evidence is None:
            return True
        found = evidence.get(name)
        return found is not None and verdict_of(found) == "faster"

    out = []
    for key, estimates in sorted(probabilities.estimates.items(), key=lambda kv: SizeRangeCell.from_key(kv[0])):
        cell = SizeRangeCell.from_key(key)
        evidence = probabilities.versus_default.get(key)
        candidates = {k: v for k, v in estimates.items()
                      if k == DEFAULT_ALGORITHM or may_replace_default(k, cell.collective, evidence)}
        if not candidates:
            continue
        name = min(candidates, key=lambda k: candidates[k])
        out.append(BestChoice(cell, name, candidates[name], estimates.get(DEFAULT_ALGORITHM),
                              min(estimates, key=lambda k: estimates[k]), evidence is not None))
    return out


@dataclass(frozen=True)
class WrittenFiles:
    files: dict[str, Path]
    notes: list[str]


def write_best(state: OnlineState, library: MPILibrary, out_dir: Path | str) -> tuple[list[BestChoice], WrittenFiles]:
    """Write the best algorithm per cell as the library's tuning file(s) plus an env file.

    The files come from `tunempi tune`'s writer path (tune.files.write_tuning_files): MPICH leaf
    parameters from the library's cvars (what the online runs used), the POSIX-level companion, and a
    smoke check in the real library at the measured single-node rank counts before anything is kept.
    The env file also sets the variables that load the files, so sourcing it is enough.
    """
    from tunempi.mpi.discovery import adapter_for
    from tunempi.rules import ScaledChoice, SelectionTable, build_rule_sets
    from tunempi.tune.files import TuningFileError, write_tuning_files
    from tunempi.writers import write_env_file

    state.check_library(library.fingerprint, library.name)
    sizes = state.config.sizes
    adapter = adapter_for(library)
    selectable = {c: adapter.tuning_file_algorithms(c) for c in state.config.collectives}
    writable = {c: list(found.selectable) for c, found in selectable.items()}
    choices = best_choices(state.probabilities(), sizes, writable)
    if not choices:
        raise UsageError(f"no estimates in {state.dir} yet: run a batch, then `tunempi online update`")
    scaled = [ScaledChoice(c.cell.collective, c.cell.nodes, c.cell.ppn, written_size(sizes, c.cell), c.algorithm)
              for c in choices]
    rule_sets = build_rule_sets(SelectionTable.from_scaled(scaled))
    out = Path(out_dir).resolve()
    # Smoke-check where it can run here: the single-node layouts (predicted multi-node ones cannot).
    smoke_ranks = sorted({c.cell.ranks for c in choices if c.cell.nodes == 1 and c.cell.ranks <= MAX_SMOKE_RANKS})
    try:
        written = write_tuning_files(out, library, adapter, rule_sets, smoke_ranks=smoke_ranks or (2,))
    except TuningFileError as exc:
        raise MPIError(f"cannot write the tuning files: {exc}") from None
    env = write_env_file(rule_sets, adapter.force_env, extra_env=written.activation_env(out),
                         title=f"tunempi online best ({library.name})")
    (out / written.env_file).write_text(env.text)
    files = {role: out / name for role, name in written.files.items()}
    files["env"] = out / written.env_file
    files["manifest"] = best_manifest(state, library, out, choices, scaled, rule_sets, written,
                                      {c: dict(found.excluded) for c, found in selectable.items()}).save()
    notes = []
    for c in choices:
        if c.fastest == c.algorithm:
            continue
        excluded = selectable[c.cell.collective].excluded if c.cell.collective in selectable else {}
        why = (f"no tuning file of {library.name} can select it ({excluded.get(c.fastest, 'not offered')})"
               if c.fastest not in writable.get(c.cell.collective, ())
               else "the runs that drew it and the default do not show it consistently faster")
        notes.append(f"{cell_label(c.cell, sizes)}: {c.fastest} was estimated fastest but {why}; wrote {c.algorithm}")
    notes += [f"loaded and run by {library.name} at {record.ranks} ranks ({record.points} sizes): {record.message}"
             for record in written.smoke]
    return choices, WrittenFiles(files, notes)


def written_size(sizes: SizeRanges, cell: SizeRangeCell) -> int:
    """The size a cell's choice is written, and later verified, at: its range's geometric middle; a
    reduction's as a whole number of the engine's elements (REDUCTION_ELEMENT_BYTES); barrier's 1."""
    from tunempi.bench.validate import REDUCTION_ELEMENT_BYTES
    from tunempi.collectives import REDUCTIONS

    if cell.collective == "barrier":
        return 1
    if cell.collective in REDUCTIONS:
        return sizes.whole_elements(cell.size_index, REDUCTION_ELEMENT_BYTES)
    return sizes.representative(cell.size_index)


#: Where best's objective came from when neither a profile nor the records say what the application computes
NO_PROFILE = ("online: each record ran from the start to the completing wait in the application, whose "
              "computation between them is not known without a profile (online run --from-profile): latency")
RECORDS = "online records"


def record_computations(records: Iterable[Record], sizes: SizeRanges) -> list[dict[str, Any]]:
    """What the online records say the application computes between a non-blocking collective's start and its
    wait, per (collective, ranks, nodes, ppn, size range): the median of the records' windows (Record.window_ns;
    records written before they held the waits' time give none), as tune.objective.ApplicationComputation's
    fields, with the objective each cell fits (profile/nonblocking.py's rule: a window of at least 1 us and 5 % of
    the median start to completion, else 0, its latency)."""
    from statistics import median

    from tunempi.collectives import is_nonblocking
    from tunempi.profile.nonblocking import NO_WINDOW_SHARE, NO_WINDOW_US

    groups: dict[tuple[str, int, int, int, int], list[Record]] = {}
    for r in records:
        if is_nonblocking(r.collective) and r.window_ns is not None:
            groups.setdefault((r.collective, r.ranks, r.nodes, r.ppn, sizes.index(r.msg_bytes)), []).append(r)
    rows = []
    for (collective, ranks, nodes, ppn, index), found in sorted(groups.items()):
        window = median(r.window_ns or 0 for r in found) / 1e3
        completion = median(r.time_ns for r in found) / 1e3
        overlaps = window >= NO_WINDOW_US and window >= NO_WINDOW_SHARE * completion
        lo, hi = sizes.range(index)
        rows.append({"collective": collective, "ranks": ranks, "nodes": nodes, "ppn": ppn, "size_lo": lo,
                     "size_hi": hi if hi is not None else max(r.msg_bytes for r in found),
                     "compute_us": round(window, 3) if overlaps else 0.0,
                     "source": f"{RECORDS}: {collective} {ranks} ranks ({nodes}x{ppn}) {sizes.label(index)}, "
                               f"median of {len(found)} calls: computes {window:.1f}us of {completion:.1f}us"})
    return rows


def best_figures(config: OnlineConfig, cells: Sequence[Cell], records: Iterable[Record] = ()) -> dict[str, Any]:
    """The manifest's objective fields for the non-blocking cells `best` writes, so verify measures them for what
    the online records measured: start + the application's computation + wait. With the profile's computations
    (online run --from-profile, objective time) each cell gets its collective's nearest one
    (tune.objective.application_lengths; a cell of a collective without one: 0, its latency); with the profile's
    latency, latency. Without a profile, what the records say (`record_computations`: time where some cell's
    calls compute between start and wait, else latency), or latency where they cannot say (NO_PROFILE). No
    non-blocking cell: nothing."""
    from tunempi.collectives import is_nonblocking
    from tunempi.tune.objective import ApplicationComputation, application_lengths, capped_computation

    nonblocking = [cell for cell in cells if is_nonblocking(cell.collective)]
    if not nonblocking:
        return {}
    if not config.objective:
        rows = record_computations(records, config.sizes)
        if not rows:
            return {"objective": "latency", "objective_from": NO_PROFILE}
        if not any(row["compute_us"] > 0 for row in rows):
            return {"objective": "latency", "objective_from": f"{RECORDS}: every call waited right after starting"}
        config = replace(config, objective="time", objective_from=RECORDS, computations=rows)
    if config.objective != "time":
        return {"objective": "latency", "objective_from": config.objective_from or NO_PROFILE}
    found = {cell: capped_computation(c.compute_us, c.source) for cell, c in application_lengths(
        nonblocking, [ApplicationComputation(**row) for row in config.computations]).items()}
    return {"objective": "time", "objective_from": config.objective_from,
            "compute_us": {cell: found[cell][0] if cell in found else 0.0 for cell in nonblocking},
            "compute_from": {cell: found[cell][1] if cell in found else "no computation in the profile: 0 "
                             "(its latency)" for cell in nonblocking}}


def best_manifest(state: OnlineState, library: MPILibrary, out: Path, choices: Sequence[BestChoice],
                  scaled: Sequence[ScaledChoice], rule_sets: Mapping[str, RuleSet], written: TuningWritten,
                  excluded: Mapping[str, Mapping[str, str]]) -> Manifest:
    """The manifest of what `best` wrote, as `tune` writes one (tune/manifest.py), so `tunempi run`, `report`,
    `verify` and `compare` take the directory like any tuning: the library, the files and how to activate them,
    the rule sets, and a selection row per cell at the size its choice was written for (the size range's
    geometric middle), with the estimated times per call (us) of its choice and of the default."""
    from tunempi.space import Cell
    from tunempi.store.results import utc_timestamp
    from tunempi.tune.job import files_fields
    from tunempi.tune.manifest import LibraryRecord, Manifest, RunRecord, SelectionRow

    rows = tuple(SelectionRow(Cell(c.cell.collective, c.cell.ranks, c.cell.nodes, c.cell.ppn, point.msg_bytes),
                              c.algorithm, c.time_ns / 1e3, c.default_ns / 1e3 if c.default_ns is not None else None)
                 for c, point in zip(choices, scaled, strict=True))
    return Manifest(
        **best_figures(state.config, [row.cell for row in rows],
                       (r for f in state.record_files() for r in f.records)),
        directory=out, library=LibraryRecord.of(library), created=utc_timestamp(),
        collectives=tuple(sorted({row.cell.collective for row in rows})),
        scales=tuple(sorted({(row.cell.ranks, row.cell.nodes, row.cell.ppn) for row in rows})),
        sizes=tuple(sorted({row.cell.msg_bytes for row in rows})), strategy="online",
        seed=state.config.seed, strategy_params={"state": str(state.dir.resolve()), "batch": state.batch},
        run=RunRecord(stop_reason="best", measured=len(list((state.dir / "runs").glob("batch-*/run-*.json")))),
        excluded={c: dict(reasons) for c, reasons in excluded.items() if reasons}, selection=rows,
        **files_fields(written, rule_sets))
