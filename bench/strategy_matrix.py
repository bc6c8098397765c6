"""Issue 15's evaluation matrix: one strategy over every (dataset x collective x cost model), N seeds.

For each combination, the seed-mean slowdown curve (as `tunempi simulate`) gives: the slowdown at 15 % of
the exhaustive cost, its mean between 10 % and 20 % (steadier: one seed's batch in flight at exactly 15 %
moves the first by up to 0.03), and the first cost fraction where it is <= 1.03 and <= 1.02. With
`--train-max-ranks R` (goal 2, extrapolation) the final slowdown over all cells and over the cells above R.
Every (combination, seed) run is one task of a pool of `--jobs` processes (same results as `simulate`:
each run is seeded on its own).

    .venv/bin/python bench/strategy_matrix.py --seeds 5 --jobs 2 --budget-fraction 0.4
    .venv/bin/python bench/strategy_matrix.py --seeds 5 --jobs 2 --train-max-ranks 128 --budget-fraction 0.5 \
        --files data/ornl-peak.csv.gz
    .venv/bin/python bench/strategy_matrix.py --params '{"distance_uncertainty": 0.2}' --json out.json
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from tunempi.sim import CostModel, Oracle, ReplayBackend, Trace, load_frame, run_strategy, summarize

FILES = ("data/ornl-peak.csv.gz", "data/ornl-peak-pr7730.csv.gz")
COLLECTIVES = ("allreduce", "bcast", "allgather", "alltoall")
COST_MODELS = ("acclaim", "engine")
RESOLUTION = 200
K = TypeVar("K")
R = TypeVar("R")


@functools.cache
def replay_frame(path: str) -> pd.DataFrame:
    """A replayed sweep, loaded once per process (also used by the other strategy bench scripts)."""
    return load_frame(Path(path))


def replay_setup(path: str, collective: str, cost_model: str, budget_fraction: float) -> tuple[Oracle, float, np.ndarray]:
    """The oracle, the exhaustive cost and the curve's grid up to `budget_fraction` of it."""
    oracle = Oracle(ReplayBackend(replay_frame(path), collective, seed=0, cost_model=CostModel.named(cost_model)))
    exhaustive = oracle.exhaustive_cost(cells=np.ones(len(oracle.cells), dtype=bool))
    grid = np.arange(0, int(np.floor(budget_fraction * RESOLUTION + 1e-9)) + 1) * exhaustive / RESOLUTION
    return oracle, exhaustive, grid


def add_replay_arguments(parser: argparse.ArgumentParser, seeds: int = 5) -> None:
    """--files, --collectives, --seeds and --jobs, as every strategy bench script takes them."""
    parser.add_argument("--files", default=",".join(FILES))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--seeds", type=int, default=seeds)
    parser.add_argument("--jobs", type=int, default=2)


def run_in_pool(jobs: int, calls: dict[K, tuple[Callable[..., R], tuple[Any, ...]]]) -> dict[K, R]:
    """Each call (function, arguments) in a pool of `jobs` spawned processes; results by the calls' keys."""
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {key: pool.submit(function, *arguments) for key, (function, arguments) in calls.items()}
        return {key: future.result() for key, future in futures.items()}


def _run(strategy: str, path: str, collective: str, cost_model: str, seed: int, budget_fraction: float,
         max_ranks: int | None, params: dict[str, Any]) -> Trace:
    threadpool_limits(limits=1)
    oracle, exhaustive, grid = replay_setup(path, collective, cost_model, budget_fraction)
    return run_strategy(strategy, replay_frame(path), collective, seed=seed, budget_s=budget_fraction * exhaustive,
                        grid_s=grid, max_ranks=max_ranks, params=params, oracle=oracle,
                        cost_model=CostModel.named(cost_model))


def _band(summary: dict[str, Any], exhaustive: float, low: float, high: float) -> float | None:
    """Mean of the seed-mean curve between two cost fractions: steadier than its value at one fraction,
    which catches whatever batch one seed is in the middle of (comparisons of settings use both)."""
    cost = np.array(summary["curve"]["cost_s"]) / exhaustive
    values = np.array([np.nan if v is None else v for v in summary["curve"]["avg_slowdown"]], dtype=float)
    inside = (cost >= low - 1e-9) & (cost <= high + 1e-9) & np.isfinite(values)
    return float(values[inside].mean()) if inside.any() else None


def _fraction(value: float | None, exhaustive: float) -> str:
    return "never" if value is None else f"{value / exhaustive:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strategy", default="tunempi")
    parser.add_argument("--params", default="{}", help="JSON keyword arguments of the strategy")
    add_replay_arguments(parser)
    parser.add_argument("--cost-models", default=",".join(COST_MODELS))
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed+seeds-1")
    parser.add_argument("--budget-fraction", type=float, default=0.4)
    parser.add_argument("--train-max-ranks", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    params = json.loads(args.params)
    combos = [(f, c, m) for f in args.files.split(",") for c in args.collectives.split(",")
              for m in args.cost_models.split(",")]
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    tasks = [(combo, seed) for combo in combos for seed in seeds]
    started = time.perf_counter()
    traces = run_in_pool(args.jobs, {(combo, seed): (_run, (args.strategy, *combo, seed, args.budget_fraction,
                                                             args.train_max_ranks, params))
                                     for combo, seed in tasks})
    rows = []
    for combo in combos:
        path, collective, cost_model = combo
        oracle, exhaustive, _ = replay_setup(path, collective, cost_model, args.budget_fraction)
        runs = [traces[(combo, s)] for s in seeds]
        summary = summarize(runs, oracle, exhaustive, args.train_max_ranks)
        row = {"file": Path(path).name.removesuffix(".csv.gz"), "collective": collective, "cost_model": cost_model,
               "at_15": summary["slowdown_at_fraction"].get("0.15"),
               "first_1_02": None if summary["cost_to_1_02_s"] is None else summary["cost_to_1_02_s"] / exhaustive,
               "first_1_03": None if summary["cost_to_1_03_s"] is None else summary["cost_to_1_03_s"] / exhaustive,
               "band_10_20": _band(summary, exhaustive, 0.10, 0.20),
               "final": summary["avg_slowdown"], "cost_fraction": summary["cost_fraction"],
               "cpu_s": summary["total_cpu_s"]}
        if args.train_max_ranks is not None:
            row["measurable"] = summary["avg_slowdown_measurable"]
            row["extrapolated"] = summary["avg_slowdown_extrapolated"]
        rows.append(row)
    wall = time.perf_counter() - started
    extra = " | all cells | above R" if args.train_max_ranks is not None else ""
    print(f"strategy {args.strategy} params {json.dumps(params)} seeds {seeds.start}..{seeds.stop - 1} "
          f"budget {args.budget_fraction}"
          + (f" train-max-ranks {args.train_max_ranks}" if args.train_max_ranks is not None else ""))
    print(f"| file | collective | cost model | @15% | 10-20% | first 1.02 | first 1.03 | final | CPU s{extra} |")
    print("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if extra else ""))
    for r in rows:
        at = "-" if r["at_15"] is None else f"{r['at_15']:.3f}"
        f2 = "never" if r["first_1_02"] is None else f"{r['first_1_02']:.3f}"
        f3 = "never" if r["first_1_03"] is None else f"{r['first_1_03']:.3f}"
        band = "-" if r["band_10_20"] is None else f"{r['band_10_20']:.3f}"
        line = (f"| {r['file']} | {r['collective']} | {r['cost_model']} | {at} | {band} | {f2} | {f3} | {r['final']:.3f} "
                f"| {r['cpu_s']:.0f} |")
        if extra:
            line += f" {r['final']:.3f} | {r['extrapolated']:.3f} |"
        print(line)
    at15 = [r["at_15"] for r in rows if r["at_15"] is not None]
    never = args.budget_fraction
    f2s = [never if r["first_1_02"] is None else r["first_1_02"] for r in rows]
    if at15:
        print(f"mean @15%: {np.mean(at15):.4f}; max @15%: {np.max(at15):.4f}; cells meeting 1.02 @15%: "
              f"{sum(a <= 1.02 for a in at15)}/{len(at15)}")
    bands = [r["band_10_20"] for r in rows if r["band_10_20"] is not None]
    if bands:
        print(f"mean 10-20%: {np.mean(bands):.4f}")
    print(f"mean first 1.02 (never = budget): {np.mean(f2s):.3f}")
    if args.train_max_ranks is not None:
        print(f"mean all cells: {np.mean([r['final'] for r in rows]):.4f}; "
              f"mean above R: {np.mean([r['extrapolated'] for r in rows]):.4f}")
    print(f"wall {wall:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps({"params": params, "strategy": args.strategy, "seeds": args.seeds,
                                         "budget_fraction": args.budget_fraction,
                                         "train_max_ranks": args.train_max_ranks, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
