"""The online-tuning loop end to end on an allreduce-heavy program (bench/online_app.c). Not a test.

1. Reference: the benchmark engine (`tunempi.bench.sweep.Sweep`, mode mpit: the same MPI_T switching
   as `tunempi bench`, including MPICH's shared-memory pin), every allreduce algorithm and the default
   at the program's sizes, `--reference` repetitions, each a fresh sweep (fresh launches) in alternating
   algorithm order. Per size: the best (lowest median over repetitions of the engine's per-call median)
   and the set TIED with it: algorithms not significantly slower (one-sided Mann-Whitney U over the
   per-repetition medians, p >= 0.05) or within `--tie` (default 5 %) of it. A favourite within the tie set counts as a match.
2. The loop: `--batches` batches of `--runs` runs in online mode from uniform probabilities, with
   `tunempi online update` after each batch (paper settings: 3 % floor). Each online run is preceded by
   a run of the untouched program (the library's default, no interposer): program time is compared
   within the same batch, side by side.
Then: is each size's favourite (and the `tunempi online best` choice) the engine's best or tied with
it, and does the program's run time fall back to at most the default's?

    .venv/bin/python bench/online_loop.py [--mpi mpich] [--sizes 262144,1048576] [--batches 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from scipy.stats import mannwhitneyu

from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import Sweep, plan_points
from tunempi.launch import run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.vendor import DEFAULT_ALGORITHM
from tunempi.online.cells import Cell
from tunempi.online.report import best_choices
from tunempi.online.run import open_state, rank_command, run_online
from tunempi.online.state import OnlineConfig
from tunempi.online.update import update_state

PHASE = re.compile(r"^phase (\d+) ([0-9.]+)$", re.M)


def phases(stdout: str) -> dict[int, float]:
    return {int(size): float(seconds) for size, seconds in PHASE.findall(stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="262144,1048576", help="allreduce sizes (bytes) of the program")
    parser.add_argument("--calls", type=int, default=100, help="allreduce calls per size per run")
    parser.add_argument("--reference", type=int, default=3, help="engine repetitions (fresh sweeps) for the reference")
    parser.add_argument("--cap", type=float, default=0.3, help="engine time cap per point (s)")
    parser.add_argument("--tie", type=float, default=0.05, help="relative margin counted as a tie with the best")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--state", help="keep the online state (records, probabilities) in this new directory")
    parser.add_argument("--runs", type=int, default=4, help="runs per batch")
    args = parser.parse_args()

    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    sizes = [int(s) for s in args.sizes.split(",")]
    app = build_c(library, [Path(__file__).with_name("online_app.c")], "online-app")
    launcher = [str(library.mpiexec), "-n", str(args.ranks)]
    if library.vendor == "openmpi":
        launcher += ["--oversubscribe"]
    program = [*launcher, str(app), str(args.calls), *map(str, sizes)]

    with tempfile.TemporaryDirectory(prefix="tunempi-online-loop-") as tmp:
        state_dir = Path(args.state) if args.state else Path(tmp) / "state"
        if state_dir.exists() and any(state_dir.iterdir()):
            raise SystemExit(f"{state_dir} is not empty: the loop starts from uniform probabilities")
        state = open_state(state_dir, library,
                           OnlineConfig(collectives=["allreduce"], batch_runs=args.runs, record_ranks="all"))
        config = state.config
        names = state.switches["allreduce"].names
        cells = {size: Cell("allreduce", args.ranks, 1, args.ranks, config.sizes.index(size)) for size in sizes}

        # 1. Reference: the benchmark engine, repeated in fresh sweeps with alternating order.
        algorithms = [DEFAULT_ALGORITHM, *(n for n in names if n != DEFAULT_ALGORITHM)]
        settings = MeasureSettings(time_cap_s=args.cap, max_iters=2000)
        reference: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        reference_mean: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for rep in range(args.reference):
            order = algorithms if rep % 2 == 0 else algorithms[::-1]
            sweep = Sweep(library, adapter, Layout(ranks=args.ranks), settings=settings)
            points = plan_points({"allreduce": order}, sizes, ranks=args.ranks)
            for m in sweep.run(points):
                if m.status != "ok" or m.errors:
                    print(f"  reference {m.algorithm} {m.msg_bytes} B: {m.status} {m.reason}", flush=True)
                    continue
                reference[m.algorithm][m.msg_bytes].append(m.median_us)
                reference_mean[m.algorithm][m.msg_bytes].append(m.mean_us)
            print(f"reference round {rep + 1}/{args.reference} done", flush=True)
        measured = [n for n in names if all(reference[n][s] for s in sizes)]
        ranked = {size: sorted(measured, key=lambda n: statistics.median(reference[n][size])) for size in sizes}
        fastest = {size: ranked[size][0] for size in sizes}

        def tied(size: int, name: str) -> bool:
            """Not significantly slower than the best (one-sided Mann-Whitney U over the per-repetition
            medians, p >= 0.05), or within the --tie margin of it."""
            best, times = reference[fastest[size]][size], reference[name][size]
            if name == fastest[size] or statistics.median(times) <= (1 + args.tie) * statistics.median(best):
                return True
            return bool(mannwhitneyu(times, best, alternative="greater").pvalue >= 0.05)

        tie_sets = {size: [n for n in ranked[size] if tied(size, n)] for size in sizes}
        print(f"reference (engine, per-call median us over {args.reference} repetitions; mean us in brackets):")
        for size in sizes:
            for name in ranked[size]:
                times = reference[name][size]
                print(f"  {size:>8d} B {name:28s} {statistics.median(times):9.1f} "
                      f"(range {min(times):.1f}-{max(times):.1f}; mean {statistics.median(reference_mean[name][size]):.1f})"
                      f"{'  TIED' if name in tie_sets[size] else ''}")

        # 2 + 3. The loop, each online run next to a run of the untouched program.
        default_runs: dict[int, list[dict[int, float]]] = defaultdict(list)
        online_runs: dict[int, list[dict[int, float]]] = defaultdict(list)
        favourite_p: dict[int, dict[int, tuple[str, float]]] = {}
        capture = Path(tmp) / "out.txt"
        for batch in range(args.batches):
            for _ in range(args.runs):
                command = rank_command(program, adapter.launch_env(), library)
                result = run_launch(command.argv, command.full_env({**os.environ, **adapter.launch_env()}),
                                    timeout=600)
                if not result.ok:
                    raise SystemExit(f"default run failed: {result.reason}")
                default_runs[batch].append(phases(result.stdout))
                with capture.open("w") as out, contextlib.redirect_stdout(out):
                    run = run_online(state, library, program, timeout=600)
                if run.returncode != 0:
                    raise SystemExit(f"online run failed ({run.returncode})")
                online_runs[batch].append(phases(capture.read_text()))
            used = state.probabilities()  # the probabilities this batch ran with
            favourite_p[batch] = {size: max(used.cells[c.key].items(), key=lambda kv: kv[1]) if c.key in used.cells
                                  else ("uniform", 1 / len(names)) for size, c in cells.items()}
            update_state(state)
            online = statistics.median(sum(r.values()) for r in online_runs[batch])
            default = statistics.median(sum(r.values()) for r in default_runs[batch])
            print(f"batch {batch}: program allreduce time median {online:.3f} s vs default {default:.3f} s "
                  f"({100 * (online - default) / default:+.1f} %)", flush=True)

        final = state.probabilities()
        choices = {choice.cell.key: choice.algorithm for choice in best_choices(final, config.sizes)}
        print(f"\n{library.name}, {args.ranks} ranks, allreduce {args.calls} calls x sizes {sizes}, "
              f"{args.batches} batches x {args.runs} runs")
        print("per batch: favourite (p) of the probabilities the batch ran with; program time vs default "
              "(medians of the batch's runs, phase by phase)")
        for batch in range(args.batches):
            parts = []
            for size in sizes:
                name, p = favourite_p[batch][size]
                online = statistics.median(r[size] for r in online_runs[batch])
                default = statistics.median(r[size] for r in default_runs[batch])
                parts.append(f"{size} B: {name} p={p:.2f}, {online:.3f} s vs default {default:.3f} s "
                             f"({100 * (online - default) / default:+.0f} %)")
            print(f"  batch {batch}: " + "; ".join(parts))
        print("final (after the last update):")
        for size in sizes:
            probs = final.cells[cells[size].key]
            favourite = max(probs, key=probs.get)
            best = choices.get(cells[size].key, "?")
            estimates = final.estimates.get(cells[size].key, {})
            verdict = ("the engine's best" if favourite == fastest[size] else
                       "tied with the engine's best" if favourite in tie_sets[size] else "NOT in the tie set")
            print(f"  {size} B: engine best {fastest[size]}, tie set {{{', '.join(tie_sets[size])}}}; "
                  f"online favourite {favourite} p={probs[favourite]:.2f} ({verdict}; engine rank "
                  f"{ranked[size].index(favourite) + 1 if favourite in ranked[size] else '?'} of {len(ranked[size])}); "
                  f"`online best` {best} ({'match' if best in tie_sets[size] else 'NO match'}); "
                  "online estimates us/call: "
                  + ", ".join(f"{k} {v / 1000:.0f}" for k, v in sorted(estimates.items(), key=lambda kv: kv[1])[:4]))


if __name__ == "__main__":
    main()
