"""What an oracle strategy would pay: the cost of measuring only the algorithms that are in contention.

Issue 15 asks `tune` to cost <= 0.3x the exhaustive sweep of the same space. This measures a lower bound
for any strategy that must measure the algorithms it chooses between: one exhaustive sweep (every
candidate, the library default included, at every cell of `tune`'s space: powers of two and in-between
sizes, 4 B..--max-msg, at 2..--ranks ranks), with each point's wall time; then the sum of the wall times
of only the points an oracle that knew the answer would still have to measure: per cell the fastest
algorithm and the default (X = 0), or every algorithm within X of the fastest (they cannot be told apart
without measuring them). No model time, no repeats: a strategy pays at least this.

    .venv/bin/python bench/contender_cost.py --mpi openmpi --ranks 4
    .venv/bin/python bench/contender_cost.py --mpi mpich --ranks 2
Prints one JSON object (also written to --json): the sweep's wall time, per (ranks, size band) points and seconds, and the
oracle's cost as a fraction of the sweep for each X.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint, Sweep, plan_points
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.tune.scope import message_sizes
from tunempi.units import parse_duration, parse_size

BANDS = ((1024, "<=1KiB"), (65536, "<=64KiB"), (None, ">64KiB"))


def band(size: int) -> str:
    return next(name for limit, name in BANDS if limit is None or size <= limit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="openmpi")
    parser.add_argument("--ranks", type=int, default=4, help="largest scale; every power of two from 2")
    parser.add_argument("--collectives", default="allreduce,bcast,allgather,alltoall")
    parser.add_argument("--max-msg", default="1MiB")
    parser.add_argument("--time-cap", default="100ms")
    parser.add_argument("--json", type=Path, help="also write the JSON object here")
    args = parser.parse_args()
    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    settings = MeasureSettings(time_cap_s=parse_duration(args.time_cap), rel_ci=0.05)
    collectives = args.collectives.split(",")
    sizes = message_sizes(parse_size(args.max_msg))
    scales = [r for r in (2, 4, 8, 16, 32, 64) if r <= args.ranks]

    points: list[tuple[int, BenchPoint, float, float | None]] = []  # (ranks, point, wall s, median us)
    started = time.monotonic()
    for ranks in scales:
        algorithms = {c: [a.name for a in adapter.algorithms(c)] + [DEFAULT_ALGORITHM] for c in collectives}
        last = [time.monotonic()]

        def on_result(point, outcome, measurement, ranks=ranks, last=last):  # noqa: ANN001, ANN202
            now = time.monotonic()
            good = measurement.ok and not measurement.errors and measurement.median_us is not None
            points.append((ranks, point, now - last[0], measurement.median_us if good else None))
            last[0] = now

        Sweep(library, adapter, Layout(ranks=ranks), settings=settings).run(
            plan_points(algorithms, sizes, ranks=ranks), on_result)
    sweep_s = time.monotonic() - started
    total = sum(wall for _, _, wall, _ in points)

    bands: dict[str, list[float]] = {}
    cells: dict[tuple, list[tuple[str, float, float | None]]] = {}
    for ranks, point, wall, median in points:
        key = f"{ranks} ranks {band(point.msg_bytes)}"
        bands.setdefault(key, [0, 0.0])
        bands[key][0] += 1
        bands[key][1] += wall
        cells.setdefault((point.collective, ranks, point.msg_bytes), []).append((point.algorithm, wall, median))
    oracle = {}
    for within in (0.0, 0.02, 0.05, 0.1, 0.2):
        cost = 0.0
        for row in cells.values():
            ok = [m for _, _, m in row if m is not None]
            best = min(ok) if ok else None
            cost += sum(wall for algorithm, wall, median in row
                        if algorithm == DEFAULT_ALGORITHM
                        or (median is not None and best is not None and median <= best * (1 + within)))
        oracle[f"within {within:g}"] = round(cost / total, 3)
    text = json.dumps({
        "library": library.name, "scales": scales, "collectives": collectives, "sizes": len(sizes),
        "points": len(points), "sweep_s": round(sweep_s, 2), "points_wall_s": round(total, 2),
        "per_band": {k: {"points": int(n), "s": round(s, 2), "ms_per_point": round(1000 * s / n, 2)}
                     for k, (n, s) in sorted(bands.items())},
        "oracle_cost_fraction": oracle,
    }, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
