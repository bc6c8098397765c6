"""Do the model's threads disturb what the ranks measure? Tunes side by side, model threads limited or not.

Alternating, per seed: a tune whose model (BLAS, OpenMP) may use the cores the ranks leave (`model_threads`,
at least 1: tune's default) and one where the libraries keep their own choice (a thread per core). Each
tune runs `--launches 3` (the exploring launch, then two fresh launches of every cell's contenders in a
random order: tune/launch_blocks.py), so every contender has one block value log(default / contender) per
launch. If the launches measure the same thing, a block value moves from the exploring launch to the first
fresh one (l1 - l2) about as much as between the two fresh ones (l2 - l3). Printed per mode: the standard
deviation of both differences over every contender of every cell, the tunes' outcomes (tuned / tie /
default cells), benchmark and wall seconds.

    .venv/bin/python bench/model_threads.py --mpi mpich --seeds 4
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from tune_agreement import add_live_tune_arguments

from tunempi.bench.protocol import MeasureSettings
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.tune.driver import TuneOutcome
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.launch_blocks import block_values, launch_runs
from tunempi.units import parse_size

MODES = {"limited": 0, "libraries' own": -1}  # TuneOptions.model_threads


def launch_differences(outcome: TuneOutcome) -> tuple[list[float], list[float]]:
    """Per contender of every contested cell: block value of launch 1 minus launch 2, and 2 minus 3."""
    first, fresh = [], []
    for strategy in outcome.strategies.values():
        for runs in launch_runs(strategy, 1).values():
            for algorithm in {a for a, block in runs if a != DEFAULT_ALGORITHM and block == 2}:
                value = block_values(runs, algorithm)
                if all(b in value for b in (1, 2, 3)):
                    first.append(value[1] - value[2])
                    fresh.append(value[2] - value[3])
    return first, fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_live_tune_arguments(parser)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="model-threads-"))
    found: dict[str, dict[str, list]] = {mode: {"first": [], "fresh": [], "lines": []} for mode in MODES}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for mode, threads in MODES.items():
            name = f"{'own' if threads < 0 else 'limited'}-{seed}"
            started = time.monotonic()
            outcome = run_tune(TuneOptions(
                out=work / name, collectives=args.collectives, mpi=args.mpi, ranks=args.ranks,
                max_msg=parse_size(args.max_msg), seed=seed, timeout_s=1200, db=work / f"{name}.sqlite",
                settings=MeasureSettings(time_cap_s=0.1, rel_ci=0.05), smoke=False, launches=3,
                model_threads=threads)).outcome
            first, fresh = launch_differences(outcome)
            found[mode]["first"] += first
            found[mode]["fresh"] += fresh
            line = (f"seed {seed}: {outcome.outcome_counts()}, {outcome.measured} runs, bench {outcome.bench_s:.1f} s, "
                    f"wall {time.monotonic() - started:.1f} s")
            found[mode]["lines"].append(line)
            print(f"{mode}: {line}", flush=True)
    for mode, values in found.items():
        print(f"model threads {mode}: {len(values['first'])} contenders; sd of block value, exploring - 1st fresh "
              f"launch {np.std(values['first']):.3f}, 1st - 2nd fresh launch {np.std(values['fresh']):.3f}")


if __name__ == "__main__":
    main()
