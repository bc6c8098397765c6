"""Are the points of one engine launch exchangeable? (not a test)

Measures one point alone in a launch, then the same point first, another algorithm, and the same point
again in a second launch, and prints each point's median per call and the ratio of the later points to
the first. Every ratio near 1.0 means where a point sits in a launch does not change its time. Run it a
few times: this VM has a fast and a slow state minutes apart (docs/bench.md, "Points in one launch").

    .venv/bin/python bench/launch_order.py [--mpi mpich] [--bytes 262144] [--repeats 5]
"""

from __future__ import annotations

import argparse

from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import Sweep, plan_points
from tunempi.mpi.discovery import adapter_for, resolve_library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich")
    parser.add_argument("--collective", default="allreduce")
    parser.add_argument("--first", default="reduce_scatter_allgather", help="the point measured first and last")
    parser.add_argument("--other", default="nb", help="the point measured between")
    parser.add_argument("--bytes", type=int, default=262144)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    settings = MeasureSettings(time_cap_s=0.3, max_iters=2000, back_to_back=20)
    print(f"{library.name} {args.collective} {args.bytes} B, {args.ranks} ranks: median us per call")
    for _ in range(args.repeats):
        medians = []
        for algorithms in ([args.first], [args.first, args.other, args.first]):
            sweep = Sweep(library, adapter, Layout(ranks=args.ranks), settings=settings, mode="mpit")
            points = plan_points({args.collective: algorithms}, [args.bytes], ranks=args.ranks)
            medians += [(m.algorithm, m.median_us if m.median_us is not None else float("nan"))
                        for m in sweep.run(points)]
        first = medians[1][1]
        cells = "  ".join(f"{name}={us:.1f}" for name, us in medians)
        print(f"{cells}   later/first {medians[2][1] / first:.2f} {medians[3][1] / first:.2f}", flush=True)


if __name__ == "__main__":
    main()
