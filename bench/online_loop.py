"""The online-tuning loop end to end on an allreduce-heavy program (bench/online_app.c). Not a test.

1. Reference: each allreduce algorithm forced for the whole run through the online mode with that
   algorithm's probability pinned to 1 (the MPI_T path the benchmark engine uses), `--reference` runs
   each, interleaved: the fastest algorithm per phase (message size).
2. Baseline: the program without the interposer (the library's default), interleaved with the loop.
3. The loop: `--batches` batches of `--runs` runs in online mode from uniform probabilities, with
   `tunempi online update` after each batch (paper settings: 3 % floor).
Then: does the favourite of each size's cell match the reference's fastest, and does the program's
run time in the last batch fall back to at most the default's?

    .venv/bin/python bench/online_loop.py [--mpi mpich] [--sizes 262144,1048576] [--batches 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from tunempi.launch import run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.online.cells import Cell
from tunempi.online.run import open_state, rank_command, run_online
from tunempi.online.state import OnlineConfig, Probabilities
from tunempi.online.update import update_state
from tunempi.profile.build import build_interposer

PHASE = re.compile(r"^phase (\d+) ([0-9.]+)$", re.M)


def phases(stdout: str) -> dict[int, float]:
    return {int(size): float(seconds) for size, seconds in PHASE.findall(stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="262144,1048576", help="allreduce sizes (bytes) of the program")
    parser.add_argument("--calls", type=int, default=100, help="allreduce calls per size per run")
    parser.add_argument("--reference", type=int, default=3, help="runs per algorithm for the reference")
    parser.add_argument("--batches", type=int, default=5)
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
    interposer = build_interposer(library)

    with tempfile.TemporaryDirectory(prefix="tunempi-online-loop-") as tmp:
        state = open_state(Path(tmp) / "state", library,
                           OnlineConfig(collectives=["allreduce"], batch_runs=args.runs, record_ranks="all"))
        config = state.config
        names = state.switches["allreduce"].names
        cells = {size: Cell("allreduce", args.ranks, 1, args.ranks, config.sizes.index(size)) for size in sizes}

        # 1. Reference: every algorithm pinned, interleaved.
        reference: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for rep in range(args.reference):
            for name in names:
                pinned = {n: float(n == name) for n in names}
                table = state.write_table(rep, 0, Probabilities(0, {c.key: pinned for c in cells.values()}),
                                          path=Path(tmp) / "pinned.table")
                env = {"LD_PRELOAD": str(interposer), "TUNEMPI_MODE": "online", "TUNEMPI_ONLINE_TABLE": str(table),
                       "TUNEMPI_ONLINE_OUT": str(Path(tmp) / "pinned.csv"), **adapter.launch_env()}
                command = rank_command(program, env, library)
                result = run_launch(command.argv, command.full_env({**os.environ, **adapter.launch_env()}), timeout=600)
                if not result.ok:
                    raise SystemExit(f"{name}: {result.reason}")
                for size, seconds in phases(result.stdout).items():
                    reference[name][size].append(seconds)
            print(f"reference round {rep + 1}/{args.reference} done", flush=True)
        fastest = {size: min(names, key=lambda n: statistics.median(reference[n][size])) for size in sizes}

        # 2 + 3. The loop, with default runs interleaved.
        default_runs: list[dict[int, float]] = []
        online_runs: dict[int, list[dict[int, float]]] = defaultdict(list)
        for batch in range(args.batches):
            for _ in range(args.runs):
                command = rank_command(program, adapter.launch_env(), library)
                result = run_launch(command.argv, command.full_env({**os.environ, **adapter.launch_env()}),
                                    timeout=600)
                default_runs.append(phases(result.stdout))
                capture = Path(tmp) / "out.txt"
                with capture.open("w") as out:
                    import contextlib

                    with contextlib.redirect_stdout(out):
                        run = run_online(state, library, program, timeout=600)
                if run.returncode != 0:
                    raise SystemExit(f"online run failed ({run.returncode})")
                online_runs[batch].append(phases(capture.read_text()))
            update = update_state(state)
            favourites = {size: max(update.probabilities.cells[c.key], key=update.probabilities.cells[c.key].get)
                          for size, c in cells.items()}
            mean = statistics.mean(sum(r.values()) for r in online_runs[batch])
            print(f"batch {batch}: mean run time {mean:.3f} s; next favourites "
                  + ", ".join(f"{size} B: {name} {update.probabilities.cells[cells[size].key][name]:.2f}"
                              for size, name in favourites.items()), flush=True)

        print(f"\n{library.name}, {args.ranks} ranks, allreduce {args.calls} calls x sizes {sizes}")
        final = state.probabilities()
        print(f"reference (pinned through MPI_T, median s per phase over {args.reference} runs) and the final "
              "probabilities, fastest first:")
        for size in sizes:
            probs = final.cells[cells[size].key]
            for name in sorted(names, key=lambda n: statistics.median(reference[n][size])):
                times = reference[name][size]
                print(f"  {size:>8d} B {name:28s} median {statistics.median(times):.4f} s "
                      f"(min {min(times):.4f}, max {max(times):.4f})  p {probs[name]:.2f}")
        for size in sizes:
            probs = final.cells[cells[size].key]
            favourite = max(probs, key=probs.get)
            ranked = sorted(names, key=lambda n: statistics.median(reference[n][size]))
            best_times, fav_times = reference[fastest[size]][size], reference[favourite][size]
            ratio = statistics.median(fav_times) / statistics.median(best_times)
            overlap = "overlap" if min(fav_times) <= max(best_times) else "do not overlap"
            print(f"{size} B: reference fastest {fastest[size]} (then {', '.join(ranked[1:3])}); online favourite "
                  f"{favourite} p={probs[favourite]:.2f} (reference rank {ranked.index(favourite) + 1} of "
                  f"{len(names)}, median x{ratio:.2f} of the fastest; their reference ranges {overlap})")
        default_total = statistics.median(sum(r.values()) for r in default_runs)
        for batch, runs in online_runs.items():
            total = statistics.median(sum(r.values()) for r in runs)
            print(f"batch {batch}: median program allreduce time {total:.3f} s vs default {default_total:.3f} s "
                  f"({100 * (total - default_total) / default_total:+.1f} %)")


if __name__ == "__main__":
    main()
