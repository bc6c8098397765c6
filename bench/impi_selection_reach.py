"""How far an Intel MPI selection string reaches (issue 27): does setting I_MPI_ADJUST_<COLL> for one range of
sizes keep the library's own tuned choice at the other sizes?

Arms, each one engine launch per round, in an order drawn per round, measuring the library's own choice (the
engine forces nothing) at sizes outside the string's range: `unset` (no variable), `one-range` (a preset
for 3072-6143 bytes only, as a tune writes), `zero` (preset 0, "the basic logic of the selection"). If the
string only acted on its range, `one-range` would match `unset` everywhere else. Prints the median over
rounds of each arm's median latency per size, and each arm's ratio to `unset`.

Usage: .venv/bin/python bench/impi_selection_reach.py [--collective allreduce] [--preset 27] [--rounds 3]
       [--sizes 8,1KiB,64KiB,512KiB,1MiB]
"""

from __future__ import annotations

import argparse
import random
import statistics

from tunempi.bench.engine import EngineSession, Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint, measure_point, selection_for
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.units import format_size, parse_sizes
from tunempi.writers.impi_adjust import UNBOUNDED


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collective", default="allreduce")
    parser.add_argument("--preset", type=int, default=27)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="8,1KiB,64KiB,512KiB,1MiB")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    library = resolve_library("impi")
    adapter = adapter_for(library)
    (variable,) = adapter.force_env(args.collective, adapter.algorithms(args.collective)[0].name)
    arms = {"unset": {}, "one-range": {variable: f"{args.preset}:3072-6143@1-{UNBOUNDED}"}, "zero": {variable: "0"}}
    sizes = parse_sizes(args.sizes)
    settings = MeasureSettings(time_cap_s=0.3)
    medians: dict[str, dict[int, list[float]]] = {arm: {size: [] for size in sizes} for arm in arms}
    counter = iter(range(1, 1 << 30))
    rng = random.Random(args.seed)
    for _ in range(args.rounds):
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            with EngineSession(library, Layout(2), env=arms[arm]) as session:
                for size in sizes:
                    point = BenchPoint(args.collective, "default", size)
                    outcome = measure_point(session, point, selection_for(adapter, point, "mpit"), settings,
                                            next_id=lambda: next(counter), retries=1,
                                            says_not_usable=adapter.says_not_usable)
                    if outcome.ok and outcome.statistics is not None:
                        medians[arm][size].append(outcome.statistics.median_us)
    print(f"{library.name}, 2 ranks, {args.collective}, {args.rounds} interleaved rounds: median us (ratio to unset)")
    print(f"{'arm':<10} {'setting':<36} " + " ".join(f"{format_size(s):>16}" for s in sizes))
    unset = {size: statistics.median(values) for size, values in medians["unset"].items()}
    for arm, by_size in medians.items():
        cells = []
        for size in sizes:
            value = statistics.median(by_size[size])
            cells.append(f"{value:8.2f} ({value / unset[size]:4.2f}x)")
        setting = arms[arm].get(variable, "(nothing)")
        print(f"{arm:<10} {setting[:36]:<36} " + " ".join(f"{c:>16}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
