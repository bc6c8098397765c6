"""Batches that cost far more than planned: the strategy's cost prediction far from what it has measured.

Runs the `tunempi` strategy on the replayed Peak sweeps (as `bench/strategy_matrix.py`) and prints every
batch, before `--until` of the exhaustive cost, that cost more than `--over` of the exhaustive cost, with
the cell that cost most. A batch is planned to cost about 3 % of what was spent so far (at least 3 cells);
one that costs several times what was spent means the predicted latency of its costliest cell was far
off (after the initial design, allgather at 512 ranks x 1 MiB was predicted e^7.9 us, measured e^13-e^14).

    .venv/bin/python bench/batch_overshoot.py --cost-model acclaim --jobs 2
    .venv/bin/python bench/batch_overshoot.py --cost-model engine --params '{"shared_surface": false}'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from strategy_matrix import add_replay_arguments, replay_frame, replay_setup, run_in_pool
from threadpoolctl import threadpool_limits

from tunempi.sim import CostModel, ReplayBackend
from tunempi.strategy import make_strategy


def _overshoots(path: str, collective: str, cost_model: str, seed: int, over: float, until: float,
                params: dict[str, Any]) -> list[str]:
    threadpool_limits(limits=1)
    _, exhaustive, _ = replay_setup(path, collective, cost_model, until)
    backend = ReplayBackend(replay_frame(path), collective, seed=seed, cost_model=CostModel.named(cost_model))
    space = backend.space()
    strategy = make_strategy("tunempi", space, seed=seed, measurable=space, budget_s=exhaustive, **params)
    found = []
    while strategy.spent_s < until * exhaustive:
        requests = strategy.ask()
        if not requests:
            break
        before = strategy.spent_s
        records = backend.measure(requests)
        strategy.tell(records)
        if (strategy.spent_s - before) / exhaustive > over:
            costliest = max(records, key=lambda r: r.cost_s)
            found.append(f"{before / exhaustive:.3f} -> {strategy.spent_s / exhaustive:.3f} "
                         f"({'the initial design, ' if before == 0 else ''}{len(requests)} cells; costliest {costliest.cell.ranks} ranks x "
                         f"{costliest.cell.msg_bytes} B {costliest.algorithm}: {costliest.cost_s:.0f} s)")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_replay_arguments(parser)
    parser.add_argument("--cost-model", default="acclaim", choices=("acclaim", "engine"))
    parser.add_argument("--over", type=float, default=0.03, help="report batches costing more than this "
                        "fraction of the exhaustive cost")
    parser.add_argument("--until", type=float, default=0.2, help="stop at this fraction of the exhaustive cost")
    parser.add_argument("--params", default="{}", help="JSON keyword arguments of the strategy")
    args = parser.parse_args()
    params = json.loads(args.params)
    keys = [(f, c, s) for f in args.files.split(",") for c in args.collectives.split(",") for s in range(args.seeds)]
    found = run_in_pool(args.jobs, {key: (_overshoots, (key[0], key[1], args.cost_model, key[2], args.over,
                                                        args.until, params)) for key in keys})
    print(f"cost model {args.cost_model}; batches costing > {args.over} of the exhaustive cost before {args.until}")
    total = 0
    for (f, c, s), lines in found.items():
        for line in lines:
            total += 1
            print(f"{Path(f).name.removesuffix('.csv.gz')} {c} seed {s}: {line}")
    print(f"{total} such batches in {len(keys)} runs")


if __name__ == "__main__":
    main()
