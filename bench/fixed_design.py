"""What the adaptive loop buys: the tunempi model told a *fixed* design of the same cost, no loop.

Per file and collective, every usable algorithm is measured once (one run each, `acclaim` cost model: one
launch per run) in a fixed set of cells, and the `tunempi` strategy's model, told those runs, selects:
- `random`: cells in a seeded random order while the cost stays within `--budget-fraction` of the
  exhaustive cost;
- `lattice`: every k-th message size at each scale, shifted by two sizes from one scale to the next (a
  space-filling design; k = 7 costs about 15 % of the sweep on the Peak files).
Set the result against `bench/strategy_matrix.py`'s per-point figure at the same fraction.

    .venv/bin/python bench/fixed_design.py --seeds 3 --jobs 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from strategy_matrix import add_replay_arguments, replay_frame, replay_setup, run_in_pool
from threadpoolctl import threadpool_limits

from tunempi.sim import CostModel, ReplayBackend
from tunempi.strategy import Request, make_strategy


def _one(path: str, collective: str, seed: int, design: str, budget_fraction: float,
         lattice_step: int) -> tuple[float, float]:
    """(average slowdown, fraction of the exhaustive cost spent) of one seed's fixed design."""
    threadpool_limits(limits=1)
    oracle, exhaustive, _ = replay_setup(path, collective, "acclaim", budget_fraction)
    backend = ReplayBackend(replay_frame(path), collective, seed=seed, cost_model=CostModel.named("acclaim"))
    space = backend.space()
    rng = np.random.default_rng(seed)
    cells = list(space.cells)
    if design == "lattice":
        sizes = sorted({c.msg_bytes for c in cells})
        scales = sorted({c.scale for c in cells})
        offset = int(rng.integers(lattice_step))
        order = [i for i, c in enumerate(cells)
                 if (sizes.index(c.msg_bytes) + 2 * scales.index(c.scale) + offset) % lattice_step == 0]
    else:
        order = list(rng.permutation(len(cells)))
    records, spent = [], 0.0
    for i in order:
        runs = backend.measure([Request(cells[i], tuple(space.candidates(cells[i])))])
        cost = sum(r.cost_s for r in runs)
        if design == "random" and spent + cost > budget_fraction * exhaustive:
            continue  # left out: the design knows each cell's cost, which only favours it
        spent += cost
        records += runs
    strategy = make_strategy("tunempi", space, seed=seed, measurable=space)
    strategy.tell(records)
    return oracle.average_slowdown(strategy.select()), spent / exhaustive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_replay_arguments(parser, seeds=3)
    parser.add_argument("--budget-fraction", type=float, default=0.15, help="the random design's cost")
    parser.add_argument("--lattice-step", type=int, default=7, help="the lattice measures every k-th size")
    args = parser.parse_args()
    combos = [(f, c, d) for f in args.files.split(",") for c in args.collectives.split(",")
              for d in ("random", "lattice")]
    results = run_in_pool(args.jobs, {(f, c, d, s): (_one, (f, c, s, d, args.budget_fraction, args.lattice_step))
                                      for f, c, d in combos for s in range(args.seeds)})
    print(f"fixed designs, every algorithm once per cell, tunempi model, {args.seeds} seeds, acclaim cost")
    print("| file | collective | design | average slowdown | fraction of exhaustive cost |")
    print("|---|---|---|---|---|")
    for f, c, d in combos:
        slowdown, spent = np.mean([results[(f, c, d, s)] for s in range(args.seeds)], axis=0)
        print(f"| {Path(f).name.removesuffix('.csv.gz')} | {c} | {d} | {slowdown:.4f} | {spent:.3f} |")


if __name__ == "__main__":
    main()
