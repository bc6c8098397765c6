"""Do two tunes give the same answer? Two independent tunes, and an exhaustive validation run to judge them.

In one run, on one machine (issue 28):
1. two tunes with the launches-as-blocks decision (`--launches`, default 2), each from an empty store with
   its own seed;
2. two tunes as before it (`launches=1`: the exploring launch alone), the same way: today's agreement and
   today's cost, side by side;
3. a validation run: every algorithm a tuning file can select, at every cell, measured in
   `--validation-launches` fresh launches, one run each per launch, in a seeded random order inside each
   launch. Per (cell, algorithm) the median over launches; the cell's best is the fastest of those, its
   gap default / best.

Printed (and written to --json), for each rule:
- agreement: of the cells both tunes call decided (a tie is undecided; launches=1 calls every cell
  decided), the share where they selected the same algorithm;
- decided_share_of_gap_cells: of the cells whose validation gap is above 10 %, the share each tune
  overrides with an algorithm decided faster (launches=1: overrides at all), and the share where that
  override is within 5 % of the validation best;
- slowdown: each tune's average over cells of validation(selected) / validation(best), and the default's;
- held_out_slowdown: the same against a choice that never saw the data judging it: per cell and launch k,
  the algorithm fastest by the median of the other launches, and time(selected) / time(that choice) in
  launch k (geometric mean over k). The fastest of 6-9 noisy medians, judged on those same medians, sits
  below every algorithm's true time, so `slowdown` is above 1 even for a perfect selection; this is not;
- held_out_gap_cells and decided_share_of_held_out_gap_cells: the gap cells and decided share with the
  default's held-out ratio instead (a gap that is noise in the validation is not one a tune should decide);
- cost: each tune's benchmark seconds and runs, against the validation run's and against today's rule.

    .venv/bin/python bench/tune_agreement.py --mpi mpich --ranks 2
    .venv/bin/python bench/tune_agreement.py --mpi openmpi --ranks 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.space import Cell
from tunempi.tune.driver import layout_of
from tunempi.tune.job import TuneOptions, TunePlan, run_tune
from tunempi.units import parse_duration, parse_size

GAP = 1.10  # a cell whose default is this much slower than its best is one a tune should decide
NEAR_BEST = 1.05


def add_live_tune_arguments(parser: argparse.ArgumentParser, mpi: str = "mpich", ranks: int = 2) -> None:
    """--mpi, --ranks, --collectives and --max-msg, as every bench script that tunes the real library takes them."""
    parser.add_argument("--mpi", default=mpi)
    parser.add_argument("--ranks", type=int, default=ranks)
    parser.add_argument("--collectives", default="allreduce,bcast,allgather,alltoall")
    parser.add_argument("--max-msg", default="1MiB")


def one_tune(args: argparse.Namespace, work: Path, name: str, seed: int, launches: int) -> dict:
    options = TuneOptions(
        out=work / name, collectives=args.collectives, mpi=args.mpi, ranks=args.ranks,
        max_msg=parse_size(args.max_msg), seed=seed, timeout_s=parse_duration(args.timeout),
        db=work / f"{name}.sqlite", settings=MeasureSettings(time_cap_s=parse_duration(args.time_cap), rel_ci=0.05),
        smoke=False, launches=launches,
    )
    started = time.monotonic()
    outcome = run_tune(options).outcome
    decided = {cell for cell in outcome.selection
               if cell not in outcome.decisions or outcome.decisions[cell].outcome != "tie"}
    tuned = {cell for cell, algorithm in outcome.selection.items() if algorithm != DEFAULT_ALGORITHM}
    return {"name": name, "seed": seed, "launches": launches, "selection": outcome.selection, "decided": decided,
            "tuned": tuned, "outcomes": outcome.outcome_counts(), "bench_s": outcome.bench_s,
            "runs": outcome.measured, "wall_s": time.monotonic() - started, "stop": outcome.stop_reason}


Samples = dict[tuple[Cell, str], dict[int, float]]
#: cell -> launch k -> (the other launches' choice, every algorithm's time in launch k)
HeldOut = dict[Cell, dict[int, tuple[str, dict[str, float]]]]


def validation(args: argparse.Namespace, work: Path) -> tuple[Samples, float, int]:
    """(cell, algorithm) -> {launch: median per call}; the run's benchmark seconds and runs."""
    plan = TunePlan.of(TuneOptions(
        out=work / "validation", collectives=args.collectives, mpi=args.mpi, ranks=args.ranks,
        max_msg=parse_size(args.max_msg), db=work / "validation.sqlite",
        settings=MeasureSettings(time_cap_s=parse_duration(args.time_cap), rel_ci=0.05)))
    runner = plan.runner()
    rng = np.random.default_rng(args.seed + 1000)
    samples: Samples = {}
    bench_s, runs = 0.0, 0
    try:
        for launch in range(args.validation_launches):
            work_points: dict = {}
            for collective, space in plan.spaces.items():
                for cell in space.cells:
                    for algorithm in space.algorithms:
                        work_points.setdefault(layout_of(cell), []).append(
                            (cell, BenchPoint(collective, algorithm, cell.msg_bytes, launch)))
            runner.relaunch()
            ordered = {layout: [items[i] for i in rng.permutation(len(items))] for layout, items in work_points.items()}
            results = runner.run({layout: [p for _, p in items] for layout, items in ordered.items()},
                                 settings=plan.options.settings)
            for result in results:
                bench_s += result.wall_s
                runs += 1
                m = result.measurement
                if m.ok and not m.errors and m.median_us is not None:
                    cell = Cell(m.collective, m.ranks, m.nodes, m.ppn, m.msg_bytes)
                    samples.setdefault((cell, m.algorithm), {})[launch] = m.median_us
            print(f"validation launch {launch + 1}/{args.validation_launches}: {len(results)} runs", flush=True)
    finally:
        runner.close()
    return samples, bench_s, runs


def held_out(samples: Samples) -> HeldOut:
    """Per cell and launch k: the algorithm fastest by the median of the *other* launches (an exhaustive
    validation of one launch fewer), and every algorithm's time in launch k. Judging a tune against that
    choice on data the choice never saw is fair: the fastest of 6-9 noisy medians, judged on the same
    medians, is below every algorithm's true time, so even a perfect selection scores above 1 against it."""
    launches = sorted({k for values in samples.values() for k in values})
    by_cell: dict[Cell, dict[str, dict[int, float]]] = {}
    for (cell, algorithm), values in samples.items():
        by_cell.setdefault(cell, {})[algorithm] = values
    out: HeldOut = {}
    for cell, timed in by_cell.items():
        for k in launches:
            others = {a: statistics.median([t for j, t in v.items() if j != k]) for a, v in timed.items()
                      if k in v and any(j != k for j in v)}
            if others:
                out.setdefault(cell, {})[k] = (min(others, key=others.__getitem__),
                                               {a: v[k] for a, v in timed.items() if k in v})
    return out


def held_out_ratio(choices: dict[int, tuple[str, dict[str, float]]], algorithm: str) -> float | None:
    """Geometric mean over launches of time(algorithm) / time(the other launches' choice), in each launch."""
    logs = [np.log(times[algorithm] / times[best]) for best, times in choices.values() if algorithm in times]
    return float(np.exp(np.mean(logs))) if logs else None


def judge(tunes: list[dict], samples: Samples, fair: HeldOut) -> dict:
    """Both tunes of a rule against the validation: `samples` per launch, `fair` = held_out(samples)."""
    truth = {key: statistics.median(v.values()) for key, v in samples.items()}
    cells = sorted({cell for cell, _ in truth}, key=lambda c: (c.collective, c.msg_bytes))
    best = {cell: min(v for (c, _), v in truth.items() if c == cell) for cell in cells}
    gap_cells = [c for c in cells if (c, DEFAULT_ALGORITHM) in truth and truth[(c, DEFAULT_ALGORITHM)] > GAP * best[c]]
    default_held_out = {c: held_out_ratio(fair[c], DEFAULT_ALGORITHM) for c in fair}
    held_out_gap_cells = [c for c, r in default_held_out.items() if r is not None and r > GAP]
    a, b = tunes
    both = [c for c in cells if c in a["decided"] and c in b["decided"]]
    agree = sum(a["selection"].get(c) == b["selection"].get(c) for c in both)
    result: dict = {"cells": len(cells), "gap_cells": len(gap_cells), "held_out_gap_cells": len(held_out_gap_cells),
                    "both_decided": len(both),
                    "agreement": round(agree / len(both), 4) if both else None, "tunes": []}
    for tune in tunes:
        ratios = [truth.get((c, tune["selection"].get(c, DEFAULT_ALGORITHM))) for c in cells]
        slowdowns = [r / best[c] for r, c in zip(ratios, cells, strict=True) if r is not None]
        overridden = [c for c in gap_cells if c in tune["tuned"] and c in tune["decided"]]
        held = [held_out_ratio(fair[c], tune["selection"].get(c, DEFAULT_ALGORITHM)) for c in fair]
        overridden_held_out = [c for c in held_out_gap_cells if c in tune["tuned"] and c in tune["decided"]]
        near = [c for c in overridden if truth.get((c, tune["selection"][c]), float("inf")) <= NEAR_BEST * best[c]]
        result["tunes"].append({
            "name": tune["name"], "launches": tune["launches"], "stop": tune["stop"], "outcomes": tune["outcomes"],
            "tuned_cells": len(tune["tuned"]), "decided_cells": len(tune["decided"]),
            "decided_share_of_gap_cells": round(len(overridden) / len(gap_cells), 4) if gap_cells else None,
            "near_best_share_of_gap_cells": round(len(near) / len(gap_cells), 4) if gap_cells else None,
            "decided_share_of_held_out_gap_cells": (round(len(overridden_held_out) / len(held_out_gap_cells), 4)
                                                    if held_out_gap_cells else None),
            "slowdown": round(float(np.mean(slowdowns)), 4), "unjudged_cells": len(cells) - len(slowdowns),
            "held_out_slowdown": round(float(np.mean([h for h in held if h is not None])), 4),
            "bench_s": round(tune["bench_s"], 2), "runs": tune["runs"], "wall_s": round(tune["wall_s"], 2),
        })
    defaults = [truth[(c, DEFAULT_ALGORITHM)] / best[c] for c in cells if (c, DEFAULT_ALGORITHM) in truth]
    result["default_slowdown"] = round(float(np.mean(defaults)), 4)
    result["default_held_out_slowdown"] = round(float(np.mean([r for r in default_held_out.values()
                                                                if r is not None])), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_live_tune_arguments(parser)
    parser.add_argument("--time-cap", default="100ms")
    parser.add_argument("--timeout", default="20m")
    parser.add_argument("--launches", type=int, default=2, help="the new rule's launches per decision")
    parser.add_argument("--validation-launches", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console(width=120)
    work = Path(tempfile.mkdtemp(prefix="tune-agreement-"))
    rules = {"blocks": args.launches, "today": 1}
    tunes = {rule: [one_tune(args, work, f"{rule}-{k}", args.seed + k, launches) for k in range(2)]
             for rule, launches in rules.items()}
    for rule, pair in tunes.items():
        console.print(f"{rule}: " + ", ".join(f"{t['name']} {t['runs']} runs {t['bench_s']:.1f} s {t['outcomes']}"
                                             for t in pair))
    samples, validation_s, validation_runs = validation(args, work)
    report: dict = {"mpi": args.mpi, "ranks": args.ranks, "collectives": args.collectives, "max_msg": args.max_msg,
                    "validation_launches": args.validation_launches, "validation_bench_s": round(validation_s, 2),
                    "validation_runs": validation_runs}
    fair = held_out(samples)
    for rule, pair in tunes.items():
        report[rule] = judge(pair, samples, fair)
    today_cost = statistics.mean(t["bench_s"] for t in tunes["today"])
    report["blocks_cost_vs_today"] = round(statistics.mean(t["bench_s"] for t in tunes["blocks"]) / today_cost, 3)
    report["blocks_cost_vs_validation"] = round(
        statistics.mean(t["bench_s"] for t in tunes["blocks"]) / validation_s, 3)
    text = json.dumps(report, indent=1)
    console.print_json(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
