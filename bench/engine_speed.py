"""How much the persistent engine saves, and whether it measures the same thing (a benchmark, not a test).

Measured in one run, for the same points (every algorithm of the chosen collectives at the chosen sizes):
1. the engine: ONE launch, algorithms switched through MPI_T between points -> points per second;
2. one launch per point, algorithm forced through the environment (what OSU-driven tuners do) -> points
   per second, and each point's median from that separate launch.
Prints the speed-up (goal >= 10x) and how the two medians of each point compare (agreement within noise:
the ratio's spread, and how often the two 95 % confidence intervals overlap).

    .venv/bin/python bench/engine_speed.py                       # MPICH, 2 ranks
    .venv/bin/python bench/engine_speed.py --mpi openmpi --ranks 4
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from tunempi.bench.engine import EngineSession, Layout, PointOutcome, build_engine, resolve_binding
from tunempi.bench.protocol import MeasureSettings, PointRequest
from tunempi.bench.sweep import BenchPoint, Sweep, plan_points, selection_for
from tunempi.bench.validate import parse_algorithms
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.units import format_size, parse_duration, parse_sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich", help="library SPEC (default: mpich)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--collectives", default="allreduce,bcast")
    parser.add_argument("--algorithms", default="all", help="'all' or a comma list (per collective)")
    parser.add_argument("--sizes", default="8,1KiB,64KiB")
    parser.add_argument("--bind", default="auto", help="bind ranks: auto (as tunempi bench), core, none")
    parser.add_argument("--time-cap", default="1s", help="measuring time per point at most (tunempi bench's default)")
    args = parser.parse_args()
    console = Console(width=120)

    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    executable = build_engine(library)
    layout = Layout(args.ranks)
    bind = resolve_binding(args.bind, layout)
    settings = MeasureSettings(time_cap_s=parse_duration(args.time_cap))  # otherwise tunempi bench's defaults
    collectives = [c.strip() for c in args.collectives.split(",") if c.strip()]
    algorithms = {c: parse_algorithms(adapter, c, args.algorithms) for c in collectives}
    points = plan_points(algorithms, parse_sizes(args.sizes), ranks=layout.ranks)
    console.print(f"{library.name}, {layout.ranks} ranks, {len(points)} points, time cap {args.time_cap}/point")

    def engine_pass() -> tuple[dict[BenchPoint, PointOutcome], float, int]:
        """Every point through ONE launch, algorithms switched through MPI_T."""
        outcomes: dict[BenchPoint, PointOutcome] = {}
        # Without strict selection, like the env-forced launches it is compared with (docs/bench.md).
        sweep = Sweep(library, adapter, layout, mode="mpit", settings=settings, executable=executable, strict=False,
                      bind=bind)
        started = time.perf_counter()
        sweep.run(points, lambda point, outcome, _: outcomes.__setitem__(point, outcome))
        return outcomes, time.perf_counter() - started, sweep.launches

    def separate_pass() -> tuple[dict[BenchPoint, PointOutcome], float]:
        """One launch per point, the algorithm forced through the environment."""
        outcomes: dict[BenchPoint, PointOutcome] = {}
        started = time.perf_counter()
        for number, point in enumerate(points, 1):
            selection = selection_for(adapter, point, "env")
            env = {**adapter.launch_env(), **adapter.single_node_env(), **selection.env}  # as Sweep does
            with EngineSession(library, layout, env=env, executable=executable, bind=bind) as session:
                outcomes[point] = session.measure(PointRequest(
                    number, point.collective, point.msg_bytes, selection.cvar, selection.set_value,
                    settings=settings,
                ))
        return outcomes, time.perf_counter() - started

    # Engine, separate launches, engine again: the two engine passes give the noise floor to judge by.
    engine, engine_s, launches = engine_pass()
    separate, separate_s = separate_pass()
    engine_again, _, _ = engine_pass()

    table = Table(title="median us: engine (MPI_T switch, two passes) vs separate env-forced launch")
    for header in ("collective", "size", "algorithm", "engine", "engine again", "separate", "engine/separate"):
        table.add_column(header, justify="left" if header in ("collective", "algorithm") else "right")
    versus_separate: list[float] = []
    versus_itself: list[float] = []
    for point in points:
        outcomes = (engine[point], engine_again[point], separate[point])
        if not all(o.ok and o.statistics for o in outcomes):
            table.add_row(point.collective, format_size(point.msg_bytes), point.algorithm,
                          *(o.status for o in outcomes), "-")
            continue
        a, b, c = (o.statistics.median_us for o in outcomes if o.statistics)
        versus_separate.append(a / c)
        versus_itself.append(a / b)
        table.add_row(point.collective, format_size(point.msg_bytes), point.algorithm, f"{a:.2f}", f"{b:.2f}",
                      f"{c:.2f}", f"{a / c:.2f}")
    console.print(table)

    engine_rate, separate_rate = len(points) / engine_s, len(points) / separate_s
    console.print(f"engine:            {len(points)} points in {engine_s:6.2f} s = {engine_rate:7.1f} points/s "
                  f"({launches} launch(es))")
    console.print(f"launch per point:  {len(points)} points in {separate_s:6.2f} s = {separate_rate:7.1f} points/s")
    console.print(f"[bold]speed-up: {engine_rate / separate_rate:.1f}x[/] (goal >= 10x)")

    def overhead_ms(outcomes: dict[BenchPoint, PointOutcome], wall_s: float) -> float:
        """Wall time per point beyond the engine's own measuring (launches, protocol, Python)."""
        measuring = sum(o.reply.elapsed_s for o in outcomes.values() if o.ok and o.reply is not None)
        return 1e3 * (wall_s - measuring) / len(outcomes)

    console.print(f"time per point beyond measuring: engine {overhead_ms(engine, engine_s):.2f} ms, "
                  f"launch per point {overhead_ms(separate, separate_s):.1f} ms "
                  f"(measuring itself: {1e3 * engine_s / len(points) - overhead_ms(engine, engine_s):.2f} ms/point)")
    for label, ratios in (("engine / separate launch", versus_separate), ("engine / engine again   ", versus_itself)):
        if len(ratios) > 1:
            q1, q2, q3 = statistics.quantiles(ratios, n=4)
            spread = statistics.median(abs(r - 1) for r in ratios)
            console.print(f"{label}: median ratio {q2:.3f}, quartiles {q1:.3f} .. {q3:.3f}, "
                          f"median |ratio - 1| {spread:.3f} over {len(ratios)} points")


if __name__ == "__main__":
    main()
