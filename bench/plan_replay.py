"""tune --plan at Peak's 512 ranks, checked by replay (issue 57 part 4).

The plan (tune/plan.py) predicts the exploring runs and their seconds by replaying tune's own strategy (its live
parameters, tune's guard; the mean of its seeds 0..REPLAY_SEEDS-1) on the dataset's runs of every point (`replayed_exploration`). The
check replays the same loop (`plan.replay_exploration`, one copy) on the dataset's 512-rank cells with other
seeds (REPLAY_SEEDS.., N of them: other draws of the repeated runs and of the strategy), each run priced as the plan prices it
(`plan.priced_runs`: the engine stopped at the time cap), and prints both, the error (against their mean, and
against each seed's as against each tune's actual), and what the constant
(EXPLORE_RUNS_PER_POINT x points) would have said. The library's default is a candidate, as in tune. No MPI, no
launch.
"""

from __future__ import annotations

import argparse
import functools

import numpy as np

from tunempi.bench.protocol import MeasureSettings
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.sim.cost import CostModel
from tunempi.sim.replay import ReplayBackend, load_frame
from tunempi.space import FeatureSpace
from tunempi.store.dataset import read_dataset
from tunempi.tune import plan
from tunempi.tune.job import LIVE_STRATEGY_PARAMS, TUNE_SETTINGS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="data/ornl-peak.csv.gz")
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--collectives", default="allreduce,bcast,allgather,alltoall")
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    frame = load_frame(args.dataset)
    frame = frame[frame["ranks"] == args.ranks]
    settings: MeasureSettings = TUNE_SETTINGS
    params = LIVE_STRATEGY_PARAMS["tunempi"]
    rows = [row for row in read_dataset(args.dataset) if row.ranks == args.ranks]
    print(f"{'collective':<11} {'points':>6} {'constant':>8} {'planned runs':>12} {'replayed runs':>13} "
          f"{'error':>6} {'planned s':>9} {'replayed s':>10} {'error':>6}")
    for collective in args.collectives.split(","):
        data = ReplayBackend(frame, collective).space()
        space = FeatureSpace(collective, data.cells, (DEFAULT_ALGORITHM, *data.algorithms), data.unavailable)
        points = space.points
        costs = plan.costs_from_measurements([r for r in rows if r.collective == collective], args.dataset)
        planned = plan.replayed_exploration({collective: space}, costs, settings, strategy="tunempi",
                                            params=params, seed=0)
        planned_runs, planned_s = (float(sum(v)) for v in zip(*planned.explored[collective].values(), strict=True))
        runs, seconds = [], []
        for seed in range(plan.REPLAY_SEEDS, plan.REPLAY_SEEDS + args.seeds):
            backend = ReplayBackend(frame, collective, seed=seed, cost_model=CostModel(launch_per="layout"),
                                    measure_default=True)
            records = plan.replay_exploration(
                {collective: space}, {collective: functools.partial(plan.priced_runs, backend, costs, settings)},
                strategy="tunempi", params=params, seed=seed).strategies[collective].records
            (count, spent), = plan.explored_by_layout(records, costs).values()
            runs.append(count)
            seconds.append(spent)
        replayed_runs, replayed_s = float(np.mean(runs)), float(np.mean(seconds))
        print(f"{collective:<11} {points:>6} {plan.EXPLORE_RUNS_PER_POINT * points:>8.0f} {planned_runs:>12.0f} "
              f"{replayed_runs:>13.0f} {(planned_runs - replayed_runs) / replayed_runs:>+6.0%} {planned_s:>9.1f} "
              f"{replayed_s:>10.1f} {(planned_s - replayed_s) / replayed_s:>+6.0%}  (seeds: {runs} runs)")
        # issue 57's goal is per tune: the plan's seconds against each replay's, as against each tune's actual
        errors = [planned_s / spent - 1 for spent in seconds]
        print(f"{'':<11} seconds' error per seed: {' '.join(f'{e:+.0%}' for e in errors)}; "
              f"{sum(abs(e) <= 0.25 for e in errors)} of {len(errors)} within +-25 %")


if __name__ == "__main__":
    main()
