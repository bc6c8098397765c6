"""Does tune's in-launch figure predict what the written tuning file does? (issue 39; a benchmark, not a test)

For every algorithm a tuning file of the library can select, at the chosen sizes, two ways per round:
1. **as tune measures**: ONE engine launch (algorithms switched through MPI_T, strict selection, tune's
   measuring settings), every point in a seeded random order, so each point follows others as in a tune;
2. **under the written file**: for each (collective, algorithm) a tuning file that selects it at every size,
   written by the adapter as `tune` writes its files, and a fresh engine launch under it that measures every
   size with nothing switched (the library's default: a launch with no file).
Each figure is taken relative to the default of its own way and round; per point the fidelity is
(in-launch ratio) / (file ratio), with its 95 % t-interval over the rounds. A point is *biased* when that
interval lies wholly outside +-10 % (noise alone gives about 5 %). Where the file way's interval separates two
algorithms of a cell, the in-launch way should order them the same.

    .venv/bin/python bench/fidelity.py --mpi mpich --ranks 2 --rounds 3
    .venv/bin/python bench/fidelity.py --mpi openmpi --ranks 4 --collectives allreduce,bcast
    .venv/bin/python bench/fidelity.py --mpi mpich --nodes 2 --hostfile hosts   # emulated nodes (multinode.md)
Prints the share of biased points (goal <= 5 %) and of pairs ordered alike; --json writes every figure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from scipy import stats as scipy_stats

from tunempi.bench.engine import EngineSession, Layout, PointOutcome, build_engine, resolve_binding
from tunempi.bench.protocol import SET_KEEP, PointRequest
from tunempi.bench.sweep import BenchPoint, Sweep
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.launch.hosts import NodeAllocation
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.space import Cell
from tunempi.tune.files import rule_sets_for, selection_table
from tunempi.tune.job import TUNE_SETTINGS
from tunempi.units import format_size, parse_sizes

BAND = math.log(1.1)  # +-10 %


@dataclass(frozen=True)
class Key:
    collective: str
    algorithm: str
    msg_bytes: int


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich", help="library SPEC (default: mpich)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--hostfile", default=None, help="host list for --nodes > 1")
    parser.add_argument("--collectives", default="allreduce,bcast,allgather,alltoall")
    parser.add_argument("--sizes", default="8,256,4KiB,32KiB,128KiB,1MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write every figure here")
    args = parser.parse_args()
    console = Console(width=140)

    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    executable = build_engine(library)
    layout = Layout(args.ranks, nodes=args.nodes, ppn=-(-args.ranks // args.nodes) if args.nodes > 1 else None)
    allocation = NodeAllocation.given_or_found(args.hostfile) if args.nodes > 1 or args.hostfile else None
    bind = resolve_binding("auto", layout, allocation)
    sizes = parse_sizes(args.sizes)
    collectives = [c.strip() for c in args.collectives.split(",") if c.strip()]
    algorithms = {c: [DEFAULT_ALGORITHM, *[a for a in adapter.tuning_file_algorithms(c).selectable
                                           if a != DEFAULT_ALGORITHM]]
                  for c in collectives if c in adapter.collectives()}
    keys = [Key(c, a, s) for c, names in algorithms.items() for a in names for s in sizes]
    base_env = {**adapter.launch_env(), **(adapter.single_node_env() if layout.nodes == 1 and allocation is None
                                          else {})}
    console.print(f"{library.name}, {layout.ranks} ranks on {layout.nodes} node(s), {len(keys)} points, "
                  f"{args.rounds} rounds")
    rng = random.Random(args.seed)
    in_launch: dict[Key, list[float | None]] = {k: [] for k in keys}
    per_file: dict[Key, list[float | None]] = {k: [] for k in keys}

    def in_launch_round(progress: Progress, task: object) -> None:
        points = [BenchPoint(k.collective, k.algorithm, k.msg_bytes, 0) for k in keys]
        rng.shuffle(points)
        got: dict[Key, float | None] = {}

        def on_result(point: BenchPoint, outcome: PointOutcome, _measurement: object) -> None:
            key = Key(point.collective, point.algorithm, point.msg_bytes)
            got[key] = outcome.statistics.median_us if outcome.ok and outcome.statistics else None
            progress.advance(task)  # type: ignore[arg-type]

        sweep = Sweep(library, adapter, layout, mode="mpit", settings=TUNE_SETTINGS, executable=executable,
                      allocation=allocation, bind=bind)
        sweep.run(points, on_result)
        for k in keys:
            in_launch[k].append(got.get(k))

    def file_round(progress: Progress, task: object) -> None:
        pairs = [(c, a) for c, names in algorithms.items() for a in names]
        rng.shuffle(pairs)
        for collective, algorithm in pairs:
            env = dict(base_env)
            with tempfile.TemporaryDirectory() as directory:
                if algorithm != DEFAULT_ALGORITHM:
                    selection = {Cell(collective, layout.ranks, layout.nodes, layout.ppn_or_derived, s): algorithm
                                 for s in sizes}
                    files = adapter.write_tuning_files(rule_sets_for(selection_table(selection)), Path(directory))
                    env.update(files.activation_env(Path(directory)))
                order = list(sizes)
                rng.shuffle(order)
                with EngineSession(library, layout, env=env, executable=executable, allocation=allocation,
                                   bind=bind) as session:
                    for number, size in enumerate(order, 1):
                        outcome = session.measure(PointRequest(number, collective, size, None, SET_KEEP,
                                                               settings=TUNE_SETTINGS))
                        value = outcome.statistics.median_us if outcome.ok and outcome.statistics else None
                        per_file[Key(collective, algorithm, size)].append(value)
                        progress.advance(task)  # type: ignore[arg-type]

    with Progress(console=console) as progress:
        for round_number in range(1, args.rounds + 1):
            # Alternate which way goes first, so a drift of the machine favours neither.
            ways = [("in-launch", in_launch_round), ("under the file", file_round)]
            if round_number % 2 == 0:
                ways.reverse()
            for label, way in ways:
                task = progress.add_task(f"round {round_number}: {label}", total=len(keys))
                way(progress, task)

    # Per point and round: log(in-launch ratio to its default) - log(file ratio to its default).
    rows: list[tuple[Key, Figures | None]] = []
    biased = 0
    judged = 0
    for k in keys:
        if k.algorithm == DEFAULT_ALGORITHM:
            continue
        logs_in, logs_file = paired_logs(k, Key(k.collective, DEFAULT_ALGORITHM, k.msg_bytes), in_launch, per_file)
        if len(logs_in) < 2:
            rows.append((k, None))
            continue
        diffs = [x - y for x, y in zip(logs_in, logs_file, strict=True)]
        low, high = interval(diffs)
        is_biased = bool(low > BAND or high < -BAND)
        judged += 1
        biased += is_biased
        rows.append((k, Figures(math.exp(statistics.fmean(logs_in)), math.exp(statistics.fmean(logs_file)),
                                math.exp(statistics.fmean(diffs)), math.exp(low), math.exp(high), is_biased)))

    table = Table(title="each algorithm relative to the default of its own way (geometric mean over rounds)")
    for header in ("collective", "size", "algorithm", "in-launch", "under file", "fidelity", "95 % interval", ""):
        table.add_column(header, justify="left" if header in ("collective", "algorithm", "") else "right")
    for k, fig in rows:
        if fig is None:
            table.add_row(k.collective, format_size(k.msg_bytes), k.algorithm, "-", "-", "-", "-", "not measured")
            continue
        table.add_row(k.collective, format_size(k.msg_bytes), k.algorithm, f"{fig.in_launch:.2f}", f"{fig.under_file:.2f}",
                      f"{fig.fidelity:.2f}", f"[{fig.low:.2f}, {fig.high:.2f}]", "BIASED" if fig.biased else "")
    console.print(table)

    # Order: pairs of algorithms in one cell that the file way separates (interval of the log ratio
    # excludes 0): does the in-launch way put them the same way round?
    separated = alike = 0
    for collective, names in algorithms.items():
        for size in sizes:
            for first, second in itertools.combinations(names, 2):
                logs_in, logs_file = paired_logs(Key(collective, first, size), Key(collective, second, size),
                                                 in_launch, per_file)
                if len(logs_file) < 2:
                    continue
                low, high = interval(logs_file)
                if low > 0 or high < 0:
                    separated += 1
                    alike += int((statistics.fmean(logs_in) > 0) == (low > 0))
    share = biased / judged if judged else float("nan")
    console.print(f"[bold]biased: {biased} of {judged} points ({100 * share:.1f} %)[/] (goal <= 5 %); "
                  f"ordered alike: {alike} of {separated} pairs the file way separates")
    # Headroom: per cell, the fastest algorithm a file can select that the file way puts ahead of the default
    # beyond noise (interval of log(default / it) above 0), else 1: what any tuning could gain at these cells.
    best: dict[tuple[str, int], float] = {}
    for collective, names in algorithms.items():
        for size in sizes:
            gains = [1.0]
            for name in names[1:]:
                _, logs_file = paired_logs(Key(collective, DEFAULT_ALGORITHM, size), Key(collective, name, size),
                                           in_launch, per_file)
                if len(logs_file) >= 2 and interval(logs_file)[0] > 0:
                    gains.append(math.exp(statistics.fmean(logs_file)))
            best[(collective, size)] = max(gains)
    ahead = sum(g > 1.0 for g in best.values())
    headroom = math.exp(statistics.fmean(math.log(g) for g in best.values())) if best else float("nan")
    console.print(f"headroom under files: {ahead} of {len(best)} cells have an algorithm faster than the default "
                  f"beyond noise; the best of them everywhere would give {headroom:.3f}x (geometric mean over the "
                  "cells, 1 where none is)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "library": library.name, "ranks": layout.ranks, "nodes": layout.nodes, "rounds": args.rounds,
            "in_launch": {f"{k.collective}/{k.algorithm}/{k.msg_bytes}": v for k, v in in_launch.items()},
            "under_file": {f"{k.collective}/{k.algorithm}/{k.msg_bytes}": v for k, v in per_file.items()},
            "biased": biased, "judged": judged, "separated_pairs": separated, "ordered_alike": alike,
            "headroom": headroom, "cells_ahead": ahead,
        }, indent=1))


@dataclass(frozen=True)
class Figures:
    in_launch: float  # geometric mean over rounds of the algorithm / default, in-launch
    under_file: float  # the same under the written file, fresh launches
    fidelity: float  # in_launch / under_file
    low: float  # its 95 % interval over the rounds
    high: float
    biased: bool


def paired_logs(key: Key, base: Key, in_launch: dict[Key, list[float | None]],
                per_file: dict[Key, list[float | None]]) -> tuple[list[float], list[float]]:
    """log(key / base) per round, in-launch and under the file, over the rounds where all four ran."""
    logs_in: list[float] = []
    logs_file: list[float] = []
    for a, b, f, g in zip(in_launch[key], in_launch[base], per_file[key], per_file[base], strict=True):
        if a is not None and b is not None and f is not None and g is not None:
            logs_in.append(math.log(a / b))
            logs_file.append(math.log(f / g))
    return logs_in, logs_file


def interval(values: list[float]) -> tuple[float, float]:
    """95 % t-interval of the mean."""
    mean = statistics.fmean(values)
    half = scipy_stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return float(mean - half), float(mean + half)


if __name__ == "__main__":
    main()
