"""What the online tuning has learnt: probabilities per cell over the batches (table, PNG) and the best
algorithm per cell written as tuning files with the same writers as `tunempi tune`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tunempi.errors import UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.online.cells import Cell, SizeRanges
from tunempi.online.state import OnlineState, Probabilities, uniform

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CellHistory:
    """One cell's probabilities in every batch (uniform where a batch had no entry for it)."""

    cell: Cell
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
    keys = sorted({key for p in history for key in p.cells}, key=lambda k: Cell.from_key(k))
    out = []
    for key in keys:
        if contains and contains not in key:
            continue
        cell = Cell.from_key(key)
        switch = switches.get(cell.collective)
        if switch is None:
            continue
        names = tuple(switch.names)
        probs = tuple(p.cells.get(key, uniform(names)) for p in history)
        estimates = next((p.estimates.get(key, {}) for p in reversed(history) if key in p.estimates), {})
        out.append(CellHistory(cell, names, tuple(p.batch for p in history), probs, estimates))
    return out


def cell_label(cell: Cell, sizes: SizeRanges) -> str:
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
    cell: Cell
    algorithm: str
    time_ns: float
    default_ns: float | None


def best_choices(probabilities: Probabilities, sizes: SizeRanges) -> list[BestChoice]:
    """The fastest estimated algorithm of every cell with estimates."""
    out = []
    for key, estimates in sorted(probabilities.estimates.items(), key=lambda kv: Cell.from_key(kv[0])):
        if not estimates:
            continue
        name = min(estimates, key=lambda k: estimates[k])
        out.append(BestChoice(Cell.from_key(key), name, estimates[name], estimates.get("default")))
    return out


@dataclass(frozen=True)
class WrittenFiles:
    files: dict[str, Path]
    notes: list[str]


def write_best(state: OnlineState, library: MPILibrary, out_dir: Path | str) -> tuple[list[BestChoice], WrittenFiles]:
    """Write the best algorithm per cell as the library's tuning file(s) plus an env file."""
    from tunempi.mpi.discovery import adapter_for
    from tunempi.rules import ScaledChoice, SelectionTable, build_rule_sets
    from tunempi.writers import write_env_file, write_mpich_json, write_mpich_posix_json, write_openmpi_rules

    state.check_library(library.fingerprint, library.name)
    sizes = state.config.sizes
    choices = best_choices(state.probabilities(), sizes)
    if not choices:
        raise UsageError(f"no estimates in {state.dir} yet: run a batch, then `tunempi online update`")
    scaled = [ScaledChoice(c.cell.collective, c.cell.nodes, c.cell.ppn,
                           sizes.representative(c.cell.size_index) if c.cell.collective != "barrier" else 1,
                           c.algorithm) for c in choices]
    rule_sets = build_rule_sets(SelectionTable.from_scaled(scaled))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    adapter = adapter_for(library)
    files: dict[str, Path] = {}
    notes: list[str] = []
    extra_env: dict[str, str] = {}
    if library.vendor == "openmpi":
        ids = {coll: {a.name: a.value for a in adapter.algorithms(coll)} for coll in rule_sets}
        path = out / "openmpi-rules.conf"
        path.write_text(write_openmpi_rules(rule_sets, ids))
        files["openmpi-rules"] = path
        mechanism = adapter.tuning_file_mechanisms()[0]
        extra_env.update(adapter.tuning_file_env(mechanism, str(path.resolve())))
    elif library.vendor == "mpich":
        from tunempi.mpi.default_tree import default_trees, find_libmpi, known_leaves

        libmpi = find_libmpi(library.prefix)
        trees = default_trees(libmpi)
        try:
            path = out / "mpich-tuning.json"
            path.write_text(write_mpich_json(trees["mpir"].tree, rule_sets, known_leaves=known_leaves(libmpi)))
            files["mpich-json"] = path
            mechanisms = adapter.tuning_file_mechanisms()
            extra_env.update(adapter.tuning_file_env(mechanisms[0], str(path.resolve())))
            if "posix" in trees and len(mechanisms) > 2:
                posix = out / "mpich-tuning-posix.json"
                posix.write_text(write_mpich_posix_json(trees["posix"].tree, rule_sets))
                files["mpich-posix-json"] = posix
                extra_env.update(adapter.tuning_file_env(mechanisms[-1], str(posix.resolve())))
        except UsageError as exc:
            notes.append(f"no MPICH JSON file: {exc}")
    env = write_env_file(rule_sets, adapter.force_env, extra_env=extra_env,
                         title=f"tunempi online best ({library.name})")
    env_path = out / "tunempi.env"
    env_path.write_text(env.text)
    files["env"] = env_path
    return choices, WrittenFiles(files, notes)
