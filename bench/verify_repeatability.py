"""Does `verify` give the same verdict twice? One tune, then `verify` twice on two copies of its result.

Each verify measures the tuned rules against the library's default in its own launches (3 pairs, a second
pass where undecided) and may send rules back to the default; both start from the same files, so any
difference between them is the verdicts' noise. Printed (and written to --json): per verified cell, the
share where both verifies gave the same verdict (faster / same / slower ...), and the share where both
did the same to the rule (kept or sent back to the default), over the rules both compared (cells the tuning
leaves at the default have nothing to compare); the goal (issue 28) is >= 95 % of the rules.

    .venv/bin/python bench/verify_repeatability.py --mpi mpich --ranks 2
    .venv/bin/python bench/verify_repeatability.py --mpi openmpi --ranks 2 --launches 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from tunempi.bench.protocol import MeasureSettings
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.verify_run import run_verify
from tunempi.units import parse_duration, parse_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--collectives", default="allreduce,bcast,allgather,alltoall")
    parser.add_argument("--max-msg", default="1MiB")
    parser.add_argument("--launches", type=int, default=1, help="tune's launches per decision (tune --launches)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="verify-repeatability-"))
    tuned = work / "tuned"
    run_tune(TuneOptions(out=tuned, collectives=args.collectives, mpi=args.mpi, ranks=args.ranks,
                         max_msg=parse_size(args.max_msg), seed=args.seed, db=work / "tune.sqlite",
                         settings=MeasureSettings(time_cap_s=parse_duration("100ms"), rel_ci=0.05),
                         launches=args.launches))
    reports = []
    for k in range(2):
        copy = work / f"verify-{k}"
        shutil.copytree(tuned, copy)
        reports.append(run_verify(copy, mpi=args.mpi))
    first, second = ({v.cell: v for v in r.verified} for r in reports)
    # the rules verify compared (a cell the tuning leaves at the default has nothing to compare)
    cells = sorted((c for c in set(first) & set(second) if "default" not in (first[c].verdict, second[c].verdict)),
                   key=lambda c: (c.collective, c.ranks, c.msg_bytes))
    same_verdict = sum(first[c].verdict == second[c].verdict for c in cells)
    same_action = sum(first[c].replaced == second[c].replaced for c in cells)
    result = {
        "mpi": args.mpi, "ranks": args.ranks, "launches": args.launches, "compared_rules": len(cells),
        "same_verdict": round(same_verdict / len(cells), 4) if cells else None,
        "same_action": round(same_action / len(cells), 4) if cells else None,
        "verdicts": [dict(Counter(v.verdict for v in r.verified)) for r in reports],
        "replaced": [r.replaced for r in reports],
        "geo_mean_speedup_all_cells": [r.summary.get("geo_mean_speedup_all_cells") for r in reports],
        "different": [f"{c.collective} {c.msg_bytes} B: {first[c].verdict} / {second[c].verdict}"
                      for c in cells if first[c].verdict != second[c].verdict],
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
