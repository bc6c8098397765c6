"""What one run per point can reach on a replayed sweep: the floor under issue 15's per-point goal.

The replay answers each (cell, algorithm) with one of the dataset's runs (3 per point on Peak), and the
oracle is their median. This measures, per file and collective, the average slowdown of
- `raw`: the exhaustive sweep at 100 % of its cost, every point measured once, the fastest run selected;
- `model`: the `tunempi` strategy's model told that same full single-run sweep (its selection smooths
  the noise across neighbouring cells);
so the figure a strategy at 15 % of the cost is asked to reach can be set against what measuring
everything once gives.

    .venv/bin/python bench/single_run_floor.py --seeds 5 --jobs 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from strategy_matrix import add_replay_arguments, replay_frame, run_in_pool
from threadpoolctl import threadpool_limits

from tunempi.sim import Oracle, ReplayBackend
from tunempi.space import Cell
from tunempi.strategy import Request, make_strategy


def _one(path: str, collective: str, seed: int) -> tuple[float, float]:
    """(raw, model) average slowdown of one seed's full single-run sweep."""
    threadpool_limits(limits=1)
    frame = replay_frame(path)
    oracle = Oracle(ReplayBackend(frame, collective, seed=0))
    backend = ReplayBackend(frame, collective, seed=seed)
    space = backend.space()
    records = backend.measure([Request(c, tuple(space.candidates(c))) for c in space.cells])
    fastest: dict[Cell, tuple[float, str]] = {}
    for record in records:
        if record.latency_us is not None and (record.cell not in fastest
                                              or record.latency_us < fastest[record.cell][0]):
            fastest[record.cell] = (record.latency_us, record.algorithm)
    raw = oracle.average_slowdown({cell: algorithm for cell, (_, algorithm) in fastest.items()})
    strategy = make_strategy("tunempi", space, seed=seed, measurable=space)
    strategy.tell(records)
    return raw, oracle.average_slowdown(strategy.select())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_replay_arguments(parser)
    args = parser.parse_args()
    combos = [(f, c) for f in args.files.split(",") for c in args.collectives.split(",")]
    results = run_in_pool(args.jobs, {(f, c, s): (_one, (f, c, s)) for f, c in combos for s in range(args.seeds)})
    print(f"one run per point, every point ({args.seeds} seeds): average slowdown against the oracle (median of the runs)")
    print("| file | collective | raw: fastest single run | tunempi model on the same runs |")
    print("|---|---|---|---|")
    for f, c in combos:
        raw, model = np.mean([results[(f, c, s)] for s in range(args.seeds)], axis=0)
        print(f"| {Path(f).name.removesuffix('.csv.gz')} | {c} | {raw:.4f} | {model:.4f} |")


if __name__ == "__main__":
    main()
