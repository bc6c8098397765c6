"""tune --plan at Peak's 512 ranks, checked by replay (issue 57 part 4).

The plan (tune/plan.py) predicts the exploring runs and their seconds from the dataset's latencies; the replay
runs tune's own strategy (its live parameters) against the dataset's 512-rank cells, as `simulate` does, with a
budget of the exhaustive sweep (where tune's guard ends it) and the engine's cost per run (a launch per layout,
the plan's iterations per point), and counts what it measured. Prints both and the error. No MPI, no launch.
"""

from __future__ import annotations

import argparse

import numpy as np

from tunempi.bench.protocol import MeasureSettings
from tunempi.sim.cost import CostModel
from tunempi.sim.replay import ReplayBackend, load_frame
from tunempi.store.dataset import read_dataset
from tunempi.strategy import import_strategies, make_strategy
from tunempi.tune import plan
from tunempi.tune.job import LIVE_STRATEGY_PARAMS, TUNE_SETTINGS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="data/ornl-peak.csv.gz")
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--collectives", default="allreduce,bcast,allgather,alltoall")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    import_strategies("tunempi")
    frame = load_frame(args.dataset)
    frame = frame[frame["ranks"] == args.ranks]
    settings: MeasureSettings = TUNE_SETTINGS
    costs = plan.costs_from_measurements(read_dataset(args.dataset), args.dataset)
    engine = CostModel(launch_overhead_s=plan.ENGINE_START_S, launch_per="layout",
                       small_iterations=plan.TYPICAL_ITERATIONS, small_warmup=settings.warmup,
                       large_iterations=plan.TYPICAL_ITERATIONS, large_warmup=settings.warmup)
    print(f"{'collective':<11} {'points':>6} {'planned runs':>12} {'replayed runs':>13} {'error':>6} "
          f"{'planned s':>9} {'replayed s':>10} {'error':>6}")
    for collective in args.collectives.split(","):
        space = ReplayBackend(frame, collective).space()
        points = sum(len(space.algorithms) - len(space.unavailable.get(c, ())) for c in space.cells)
        planned_runs = plan.EXPLORE_RUNS_PER_POINT * points
        run_s = np.mean([plan.cell_run_s(cell, costs, settings) - costs.point_overhead_s for cell in space.cells])
        planned_s = plan.ENGINE_START_S + planned_runs * run_s
        budget = ReplayBackend(frame, collective, cost_model=engine)
        exhaustive = sum(engine.run_seconds(c.msg_bytes, float(np.median(values)))
                         for c in space.cells for a in space.algorithms
                         if (values := budget.runs(c, a)) is not None)
        runs, seconds = [], []
        for seed in range(args.seeds):
            backend = ReplayBackend(frame, collective, seed=seed, cost_model=engine)
            strategy = make_strategy("tunempi", space, seed=seed, budget_s=exhaustive,
                                     **LIVE_STRATEGY_PARAMS["tunempi"])
            while requests := strategy.ask():
                strategy.tell(backend.measure(requests))
            runs.append(len(strategy.records))
            seconds.append(strategy.spent_s)
        replayed_runs, replayed_s = float(np.mean(runs)), float(np.mean(seconds))
        print(f"{collective:<11} {points:>6} {planned_runs:>12.0f} {replayed_runs:>13.0f} "
              f"{(planned_runs - replayed_runs) / replayed_runs:>+6.0%} {planned_s:>9.1f} {replayed_s:>10.1f} "
              f"{(planned_s - replayed_s) / replayed_s:>+6.0%}")


if __name__ == "__main__":
    main()
