"""Tuning wall time against an exhaustive `tunempi bench` of the same space, in the same run (goal <= 0.2x).

Both start from empty stores and use the same per-point measuring settings:
1. `tune`: the strategy drives the engine until it converges (or the timeout); wall time of the tuning
   loop (files and smoke run excluded: the exhaustive run writes none) and of the whole command;
2. exhaustive: every candidate algorithm (the library default included) at every cell, one run each,
   through bench.sweep.Sweep (one engine launch per layout, as `tunempi bench` does).
Quality, from the exhaustive measurements (the oracle is the fastest measured algorithm per cell): the
average and geometric-mean slowdown of tune's selection and of the library default. Because the
exhaustive sweep's own fastest is partly luck (the minimum over noisy runs), a third, independent sweep
(`--no-validate` skips it) measures in every cell the default, tune's selection and the exhaustive
sweep's fastest, side by side: the geometric-mean speedup over the default of each selection
(`validate_*`), i.e. is tuned/default as good as what the exhaustive data would have chosen.

    .venv/bin/python bench/tune_vs_exhaustive.py --mpi openmpi --ranks 4 --max-msg 1MiB
    .venv/bin/python bench/tune_vs_exhaustive.py --mpi mpich --ranks 2 --collectives allreduce,bcast
Prints one JSON object (also written to --json).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from rich.console import Console

from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint, Sweep, plan_points
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.report.console import TuneProgress
from tunempi.store.results import ResultStore
from tunempi.strategy import setting_value
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.units import parse_duration, parse_size


def add_live_tune_arguments(parser: argparse.ArgumentParser, mpi: str = "mpich", ranks: int = 2) -> None:
    """--mpi, --ranks, --collectives and --max-msg, as a bench script that tunes the real library takes them."""
    parser.add_argument("--mpi", default=mpi)
    parser.add_argument("--ranks", type=int, default=ranks)
    parser.add_argument("--collectives", default="allreduce,bcast,allgather,alltoall")
    parser.add_argument("--max-msg", default="1MiB")


def parse_params(items: list[str]) -> dict[str, object]:
    params: dict[str, object] = {}
    for item in items:
        name, value = item.split("=", 1)
        params[name] = setting_value(value)
    return params


def validate(library, adapter, settings, spaces, selection, exhaustive) -> dict[str, object]:  # noqa: ANN001
    """One fresh run of the default, tune's selection and the exhaustive sweep's fastest in every cell (all of
    a cell's next to each other in one launch per layout); geometric-mean speedup over the default."""
    exhaustive_choice: dict[tuple, str] = {}
    for (collective, ranks, size, algorithm), median in exhaustive.items():
        key = (collective, ranks, size)
        if key not in exhaustive_choice or median < exhaustive[(*key, exhaustive_choice[key])]:
            exhaustive_choice[key] = algorithm
    plan: dict[int, list[BenchPoint]] = {}
    cells = []
    for cell, tuned in sorted(selection.items(), key=lambda item: (item[0].ranks, item[0].collective, item[0].msg_bytes)):
        key = (cell.collective, cell.ranks, cell.msg_bytes)
        if key not in exhaustive_choice:
            continue
        cells.append((key, tuned, exhaustive_choice[key]))
        for algorithm in dict.fromkeys((DEFAULT_ALGORITHM, tuned, exhaustive_choice[key])):
            plan.setdefault(cell.ranks, []).append(BenchPoint(cell.collective, algorithm, cell.msg_bytes))
    fresh: dict[tuple, float] = {}
    started = time.monotonic()
    for ranks, points in plan.items():
        for m in Sweep(library, adapter, Layout(ranks=ranks), settings=settings).run(points):
            if m.ok and not m.errors and m.median_us is not None:
                fresh[(m.collective, m.ranks, m.msg_bytes, m.algorithm)] = m.median_us
    tuned_logs, exhaustive_logs, same = [], [], 0
    for key, tuned, best in cells:
        default = fresh.get((*key, DEFAULT_ALGORITHM))
        if default is None or (*key, tuned) not in fresh or (*key, best) not in fresh:
            continue
        tuned_logs.append(math.log(default / fresh[(*key, tuned)]))
        exhaustive_logs.append(math.log(default / fresh[(*key, best)]))
        same += tuned == best
    n = len(tuned_logs)
    return {
        "validate_s": round(time.monotonic() - started, 2), "validate_cells": n, "validate_same_choice": same,
        "validate_tuned_speedup_geo": round(math.exp(sum(tuned_logs) / n), 4) if n else None,
        "validate_exhaustive_choice_speedup_geo": round(math.exp(sum(exhaustive_logs) / n), 4) if n else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_live_tune_arguments(parser, mpi="openmpi", ranks=4)
    parser.add_argument("--time-cap", default="100ms")
    parser.add_argument("--timeout", default="20m")
    parser.add_argument("--strategy", default="tunempi")
    parser.add_argument("--param", action="append", default=[], help="strategy parameter name=value")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lanes", type=int, default=0, help="1: no overlap of model fitting and measuring; 0: auto")
    parser.add_argument("--no-guard", action="store_true",
                        help="let the strategy run past the cost of measuring every point (tune/guard.py)")
    parser.add_argument("--no-validate", action="store_true", help="skip the independent validation sweep")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console(width=120)
    settings = MeasureSettings(time_cap_s=parse_duration(args.time_cap), rel_ci=0.05)
    work = Path(tempfile.mkdtemp(prefix="tune-vs-exhaustive-"))

    options = TuneOptions(
        out=work / "tuning", collectives=args.collectives, mpi=args.mpi, ranks=args.ranks,
        max_msg=parse_size(args.max_msg), strategy=args.strategy, seed=args.seed,
        timeout_s=parse_duration(args.timeout), db=work / "tune.sqlite", settings=settings,
        strategy_params=parse_params(args.param), lanes=args.lanes, exhaustive_guard=not args.no_guard,
    )
    started = time.monotonic()
    progress = TuneProgress(console)
    try:
        report = run_tune(options, progress)
    finally:
        progress.close()
    tune_total_s = time.monotonic() - started
    outcome = report.outcome

    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    started = time.monotonic()
    exhaustive: dict[tuple, float] = {}
    launches = 0
    n_points = 0
    with ResultStore(work / "exhaustive.sqlite") as store:
        layouts = sorted({(c.ranks, c.nodes, c.ppn) for s in report.spaces.values() for c in s.cells})
        for ranks, _, _ in layouts:
            algorithms = {c: list(s.algorithms) for c, s in report.spaces.items()}
            sizes = sorted({c.msg_bytes for s in report.spaces.values() for c in s.cells})
            sweep = Sweep(library, adapter, Layout(ranks=ranks), settings=settings, store=store)
            points = plan_points(algorithms, sizes, ranks=ranks)
            n_points += len(points)
            for m in sweep.run(points):
                if m.ok and not m.errors and m.median_us is not None:
                    exhaustive[(m.collective, m.ranks, m.msg_bytes, m.algorithm)] = m.median_us
            launches += sweep.launches
    exhaustive_s = time.monotonic() - started

    slowdowns, default_slowdowns = [], []
    worst: list[tuple[float, str]] = []
    tuned_medians = outcome.measured_medians()
    for cell, algorithm in outcome.selection.items():
        row = {a: t for (c, r, m, a), t in exhaustive.items()
               if (c, r, m) == (cell.collective, cell.ranks, cell.msg_bytes)}
        if not row:
            continue
        best = min(row.values())
        chosen = row.get(algorithm)
        slowdowns.append(chosen / best if chosen else float("nan"))
        if chosen:
            fastest = min(row, key=row.__getitem__)
            seen = tuned_medians.get((cell, algorithm))
            worst.append((chosen / best, f"{cell.collective} {cell.ranks}r {cell.msg_bytes}B: tuned {algorithm} "
                          f"{chosen:.1f} us (tune saw {seen if seen is None else round(seen, 1)}), "
                          f"exhaustive best {fastest} {best:.1f} us"))
        if DEFAULT_ALGORITHM in row:
            default_slowdowns.append(row[DEFAULT_ALGORITHM] / best)

    validation = {} if args.no_validate else validate(library, adapter, settings, report.spaces,
                                                      outcome.selection, exhaustive)

    def avg(values: list[float]) -> float | None:
        ok = [v for v in values if math.isfinite(v)]
        return round(sum(ok) / len(ok), 4) if ok else None

    def geo(values: list[float]) -> float | None:
        ok = [v for v in values if math.isfinite(v) and v > 0]
        return round(math.exp(sum(math.log(v) for v in ok) / len(ok)), 4) if ok else None

    result = {
        "library": library.name, "ranks": args.ranks, "collectives": args.collectives, "max_msg": args.max_msg,
        "time_cap": args.time_cap, "strategy": args.strategy, "params": parse_params(args.param), "lanes": args.lanes,
        "guard": not args.no_guard,
        "cells": len(outcome.selection), "exhaustive_points": n_points,
        "tune_loop_s": round(outcome.wall_s, 2), "tune_bench_s": round(outcome.bench_s, 2),
        "tune_total_s": round(tune_total_s, 2), "tune_model_s": round(outcome.model_s, 2),
        "tune_files_s": round(tune_total_s - outcome.wall_s, 2), "tune_launches": outcome.launches, "tune_runs": outcome.measured, "tune_stop": outcome.stop_reason,
        "exhaustive_s": round(exhaustive_s, 2), "exhaustive_launches": launches,
        "ratio_loop": round(outcome.wall_s / exhaustive_s, 3),
        "ratio_total": round(tune_total_s / exhaustive_s, 3),
        "ratio_bench_time": round(outcome.bench_s / exhaustive_s, 3),
        "tuned_avg_slowdown": avg(slowdowns), "tuned_geo_slowdown": geo(slowdowns),
        "tuned_missing": sum(not math.isfinite(v) for v in slowdowns),
        "default_avg_slowdown": avg(default_slowdowns), "default_geo_slowdown": geo(default_slowdowns),
        **validation,
        "worst_cells": [text for _, text in sorted(worst, reverse=True)[:5]],
        "work_dir": str(work),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
