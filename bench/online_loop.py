"""The online-tuning loop end to end on an allreduce-heavy program (bench/online_app.c). Not a test.

1. Reference: the benchmark engine (`tunempi.bench.sweep.Sweep`, mode mpit: the same MPI_T switching
   as `tunempi bench`, including MPICH's shared-memory pin), every allreduce algorithm and the default
   at the program's sizes, `--reference` repetitions, each a fresh sweep (fresh launches) in alternating
   algorithm order. The engine times `--back-to-back` calls in a row per iteration (default 20), as the
   program calls them (1: every call between barriers, as `tunempi bench` does). Per size: the best
   (lowest median over repetitions of the engine's per-call median) and the set TIED with it: algorithms
   within `--tie` (default 5 %) of it (median over repetitions of the per-repetition ratio) or not
   significantly slower (one-sided Wilcoxon signed-rank test over the repetitions' log ratios,
   p >= 0.05). A favourite within the tie set counts as a match.
2. The loop: `--batches` batches of `--runs` runs in online mode from uniform probabilities, with
   `tunempi online update` after each batch (paper settings: 3 % floor). Each online run is preceded by
   a run of the untouched program (the library's default, no interposer): program time is compared
   within the same batch, side by side.
3. Exploitation: `tunempi online best` writes the tuning files; `--final-pairs` rotating triplets of runs
   of the program (no interposer): untouched, with those files, and with files holding the engine's
   best per size (of the algorithms a tuning file can select), compared within each triplet.
Then: is each size's favourite (and the `tunempi online best` choice) the engine's best or tied with
it, how much probability the tie set holds, and does the program's run time fall back to at most the
default's?

    .venv/bin/python bench/online_loop.py [--mpi mpich] [--sizes 262144,1048576] [--batches 5]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import re
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from tunempi import evidence
from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import Sweep, plan_points
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.launch import run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.online.cells import SizeRangeCell
from tunempi.online.report import write_best
from tunempi.online.run import open_state, rank_command, run_online
from tunempi.online.state import OnlineConfig
from tunempi.online.update import probabilities_from_times, update_state
from tunempi.rules import ScaledChoice, SelectionTable, build_rule_sets
from tunempi.tune.files import write_tuning_files
from tunempi.writers.env_file import read_env_file

PHASE = re.compile(r"^phase (\d+) ([0-9.]+)$", re.M)


def phases(stdout: str) -> dict[int, float]:
    return {int(size): float(seconds) for size, seconds in PHASE.findall(stdout)}


def machine_states(default_times: list[float]) -> list[str]:
    """'fast' or 'slow' per observation, from the default's own time in it: this shared VM has launch-level
    states minutes long that move every algorithm by up to 3x (and can reorder close ones). The split is
    the geometric middle of the extremes; with less than 1.5x between them every observation is 'one'."""
    low, high = min(default_times), max(default_times)
    if high < 1.5 * low:
        return ["one"] * len(default_times)
    middle = math.sqrt(low * high)
    return ["fast" if t < middle else "slow" for t in default_times]


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
    parser.add_argument("--min-prob", type=float, default=0.03, help="probability floor (the paper's 3 %%)")
    parser.add_argument("--settled-prob", type=float, default=0.01,
                        help="floor of losers the runs show clearly slower (0.03: the paper's behaviour)")
    parser.add_argument("--back-to-back", type=int, default=20,
                        help="engine calls per timed iteration, in a row (1: each call between barriers)")
    parser.add_argument("--final-pairs", type=int, default=12,
                        help="triplets of runs (untouched, online best files, engine best files) after the loop")
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
                           OnlineConfig(collectives=["allreduce"], batch_runs=args.runs, record_ranks="all",
                                        min_probability=args.min_prob, settled_probability=args.settled_prob))
        config = state.config
        names = state.switches["allreduce"].names
        cells = {size: SizeRangeCell("allreduce", args.ranks, 1, args.ranks, config.sizes.index(size))
                 for size in sizes}

        # 1. Reference: the benchmark engine, repeated in fresh sweeps with alternating order.
        algorithms = [DEFAULT_ALGORITHM, *(n for n in names if n != DEFAULT_ALGORITHM)]
        settings = MeasureSettings(time_cap_s=args.cap, max_iters=2000, back_to_back=args.back_to_back)
        reference: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        reference_mean: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        rounds = 0
        failed: set[str] = set()  # e.g. MPICH's smp on one node: tried once, then left out (a failure relaunches)

        def reference_round() -> None:
            nonlocal rounds
            usable = [n for n in algorithms if n not in failed]
            order = usable if rounds % 2 == 0 else usable[::-1]
            sweep = Sweep(library, adapter, Layout(ranks=args.ranks), settings=settings)
            measured_now: dict[tuple[str, int], tuple[float, float]] = {}
            for m in sweep.run(plan_points({"allreduce": order}, sizes, ranks=args.ranks)):
                if m.status != "ok" or m.errors or m.median_us is None or m.mean_us is None:
                    if m.algorithm not in failed:
                        print(f"  reference {m.algorithm} {m.msg_bytes} B: {m.status} {m.reason[:80]}; left out",
                              flush=True)
                    failed.add(m.algorithm)
                    continue
                measured_now[(m.algorithm, m.msg_bytes)] = (m.median_us, m.mean_us)
            for (name, size), (median, mean) in measured_now.items():
                reference[name][size].append(median)
                reference_mean[name][size].append(mean)
            rounds += 1

        for _ in range(args.reference):
            reference_round()
        print(f"reference: {rounds} engine rounds before the loop", flush=True)

        # 2. The loop, each online run next to a run of the untouched program.
        default_runs: dict[int, list[dict[int, float]]] = defaultdict(list)
        online_runs: dict[int, list[dict[int, float]]] = defaultdict(list)
        favourite_p: dict[int, dict[int, tuple[str, float]]] = {}
        capture = Path(tmp) / "out.txt"
        def run_plain(extra_env: dict[str, str]) -> dict[int, float]:
            """The program without the interposer: the library's default, or with tuning files."""
            env = {**adapter.launch_env(), **extra_env}
            command = rank_command(program, env, library)
            result = run_launch(command.argv, command.full_env({**os.environ, **env}), timeout=600)
            if not result.ok:
                raise SystemExit(f"run failed: {result.reason}")
            return phases(result.stdout)

        for batch in range(args.batches):
            for _ in range(args.runs):
                default_runs[batch].append(run_plain({}))
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
            reference_round()  # the reference sees the machine in the same states as the loop

        # Only algorithms measured in every repetition (the tie test pairs repetitions).
        measured = [n for n in names if all(len(reference[n][s]) == rounds for s in sizes)]
        ranked = {size: sorted(measured, key=lambda n: statistics.median(reference[n][size])) for size in sizes}
        fastest = {size: ranked[size][0] for size in sizes}

        def tied(size: int, name: str) -> bool:
            """Within the --tie margin of the best (median over repetitions of the per-repetition ratio), or
            not "slower" than it by the shared paired rule (tunempi.evidence). Paired by repetition because
            a whole launch can run fast or slow (this VM has such states)."""
            if name == fastest[size]:
                return True
            ratios = [t / b for t, b in zip(reference[name][size], reference[fastest[size]][size], strict=False)]
            if statistics.median(ratios) <= 1 + args.tie:
                return True
            return evidence.compare(reference[name][size], reference[fastest[size]][size]).verdict != "slower"

        tie_sets = {size: [n for n in ranked[size] if tied(size, n)] for size in sizes}
        print(f"reference (engine, {args.back_to_back} calls in a row per timed iteration; per-call median us "
              f"over {rounds} repetitions, {args.reference} before the loop and one after each batch; mean us in brackets):")
        for size in sizes:
            for name in ranked[size]:
                times = reference[name][size]
                print(f"  {size:>8d} B {name:28s} {statistics.median(times):9.1f} "
                      f"(range {min(times):.1f}-{max(times):.1f}; mean {statistics.median(reference_mean[name][size]):.1f})"
                      f"{'  TIED' if name in tie_sets[size] else ''}")
        largest = max(sizes)
        round_states = machine_states(reference[DEFAULT_ALGORITHM][largest])
        for state_name in sorted(set(round_states)):
            picked = [i for i, st in enumerate(round_states) if st == state_name]
            for size in sizes:
                order = sorted(measured, key=lambda n: statistics.median(reference[n][size][i] for i in picked))
                print(f"  machine state {state_name} ({len(picked)} rounds), {size} B: " + ", ".join(
                    f"{n} {statistics.median(reference[n][size][i] for i in picked):.1f}" for n in order[:5]))

        final = state.probabilities()

        # 3. Exploitation: the `online best` files against the untouched program, in alternating pairs.
        best_list, written = write_best(state, library, Path(tmp) / "best")
        choices = {choice.cell.key: choice.algorithm for choice in best_list}
        tuned_env = read_env_file(written.files["env"].read_text())
        for note in written.notes:
            print(f"online best: {note}", flush=True)
        # The engine's own best (of what a tuning file can select), written the same way: the yardstick
        # for what the online files give.
        writable = list(adapter.tuning_file_algorithms("allreduce").selectable)
        engine_pick = {size: next(n for n in ranked[size] if n == DEFAULT_ALGORITHM or n in writable)
                       for size in sizes}
        engine_rules = build_rule_sets(SelectionTable.from_scaled(
            [ScaledChoice("allreduce", 1, args.ranks, size, engine_pick[size]) for size in sizes]))
        engine_files = write_tuning_files(Path(tmp) / "engine-best", library, adapter, engine_rules,
                                          smoke_ranks=[args.ranks])
        engine_env = engine_files.activation_env(Path(tmp) / "engine-best")
        engine_env.update(read_env_file((Path(tmp) / "engine-best" / engine_files.env_file).read_text()))
        variants = {"default": {}, "online best": tuned_env, "engine best": engine_env}
        trials: dict[str, list[dict[int, float]]] = defaultdict(list)
        for trial in range(args.final_pairs):
            order = list(variants)[trial % 3:] + list(variants)[:trial % 3]  # rotate who goes first
            for label in order:
                trials[label].append(run_plain(variants[label]))
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
            favourite = max(probs, key=lambda name: probs[name])
            best = choices.get(cells[size].key, "?")
            estimates = final.estimates.get(cells[size].key, {})
            tie_mass = sum(probs.get(name, 0.0) for name in tie_sets[size])
            verdict = ("the engine's best" if favourite == fastest[size] else
                       "tied with the engine's best" if favourite in tie_sets[size] else "NOT in the tie set")
            print(f"  {size} B: engine best {fastest[size]}, tie set {{{', '.join(tie_sets[size])}}}; "
                  f"online favourite {favourite} p={probs[favourite]:.2f} ({verdict}; engine rank "
                  f"{ranked[size].index(favourite) + 1 if favourite in ranked[size] else '?'} of {len(ranked[size])}); "
                  f"`online best` {best} ({'match' if best in tie_sets[size] else 'NO match'}); "
                  f"p of the tie set {tie_mass:.2f} ({len(tie_sets[size])} of {len(names)} algorithms); "
                  "online estimates us/call: "
                  + ", ".join(f"{k} {v / 1000:.0f}" for k, v in sorted(estimates.items(), key=lambda kv: kv[1])[:4]))
            # What exploring costs: the table's expected time per call against always the best estimate
            # and always the default, and what the same estimates give with the paper's floor for all.
            if estimates and all(n in estimates for n in probs):
                paper = probabilities_from_times(estimates, sharpness=config.sharpness,
                                                 min_p=config.min_probability, max_p=config.max_probability)
                expected = sum(probs[n] * estimates[n] for n in probs)
                expected_paper = sum(paper[n] * estimates[n] for n in paper)
                best_estimate = min(estimates.values())
                print(f"    expected time per call of this table: {expected / best_estimate:.3f}x the best estimate, "
                      f"{expected / estimates[DEFAULT_ALGORITHM]:.3f}x the default's; with the paper's "
                      f"{config.min_probability:.0%} floor for every loser: {expected_paper / best_estimate:.3f}x, "
                      f"{expected_paper / estimates[DEFAULT_ALGORITHM]:.3f}x")

        print(f"exploitation: tuning files vs untouched, {args.final_pairs} rotating triplets (default, `online "
              f"best` files, files with the engine's best per size: {engine_pick}); ratio to the default's "
              "allreduce time in the same triplet: median [bootstrap 95 % interval], triplets faster")
        rng = random.Random(0)
        for label in ("online best", "engine best"):
            for part, key in [*((f"{size} B", size) for size in sizes), ("both phases", None)]:
                ratios = [(t[key] / d[key]) if key is not None else sum(t.values()) / sum(d.values())
                          for t, d in zip(trials[label], trials["default"], strict=True)]
                boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
                print(f"  {label:11s} {part:12s}: {statistics.median(ratios):.3f} [{boot[50]:.3f}, {boot[1949]:.3f}], "
                      f"{sum(r < 1 for r in ratios)} of {len(ratios)} faster")
        ratios = [sum(o.values()) / sum(e.values()) for o, e in zip(trials["online best"], trials["engine best"],
                                                                      strict=True)]
        print(f"  online best / engine best, both phases: {statistics.median(ratios):.3f}")
        trial_states = machine_states([d[max(sizes)] for d in trials["default"]])
        for state_name in sorted(set(trial_states)):
            picked = [i for i, st in enumerate(trial_states) if st == state_name]
            parts = []
            for label in ("online best", "engine best"):
                for size in sizes:
                    ratios = [trials[label][i][size] / trials["default"][i][size] for i in picked]
                    parts.append(f"{label} {size} B {statistics.median(ratios):.3f}")
            print(f"  machine state {state_name} ({len(picked)} triplets): " + ", ".join(parts))

if __name__ == "__main__":
    main()
