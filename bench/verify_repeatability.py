"""Does `verify` give the same verdict twice? One tune, then `verify` twice on two copies of its result.

Each verify measures the tuned rules against the library's default in its own launches (3, one pair per
cell in each; more for a rule that looks slower) and may send rules back to the default; both start from the same files, so any
difference between them is the verdicts' noise. Printed (and written to --json), over the rules both
compared (a rule: neighbouring sizes with one tuned algorithm, as the file writes it and verify judges
it; cells the tuning leaves at the default have nothing to compare): the share of rules where both verifies
gave the same verdict (faster / same / slower ...) and did the same to the rule (kept or sent back to the
default); the same per cell; and, from the same runs, each cell's own verdict across the launches (the
rule's cells judged one by one). The goal (issue 28) is >= 95 % of the rules.

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

from tune_agreement import add_live_tune_arguments

from tunempi.bench.protocol import MeasureSettings
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.verify import VerifiedCell
from tunempi.tune.verify_run import run_verify
from tunempi.units import parse_duration, parse_size


def tune_for_verify(args: argparse.Namespace, out: Path, db: Path, seed: int, *, launches: int = 1,
                    smoke: bool = True) -> None:
    """The tune whose result the verifies judge: `add_live_tune_arguments`' space, 100 ms per point."""
    run_tune(TuneOptions(out=out, collectives=args.collectives, mpi=args.mpi, ranks=args.ranks,
                         max_msg=parse_size(args.max_msg), seed=seed, db=db,
                         settings=MeasureSettings(time_cap_s=parse_duration("100ms"), rel_ci=0.05),
                         launches=launches, smoke=smoke))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_live_tune_arguments(parser)
    parser.add_argument("--launches", type=int, default=1, help="tune's launches per decision (tune --launches)")
    parser.add_argument("--repeats", type=int, default=3, help="verify's repetitions, each a launch (verify --repeats)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="verify-repeatability-"))
    tuned = work / "tuned"
    tune_for_verify(args, tuned, work / "tune.sqlite", args.seed, launches=args.launches)
    reports = []
    for k in range(2):
        copy = work / f"verify-{k}"
        shutil.copytree(tuned, copy)
        reports.append(run_verify(copy, mpi=args.mpi, repeats=args.repeats))
    first, second = ({v.cell: v for v in r.verified} for r in reports)
    # the cells verify compared (a cell the tuning leaves at the default has nothing to compare)
    cells = sorted((c for c in set(first) & set(second) if "default" not in (first[c].verdict, second[c].verdict)),
                   key=lambda c: (c.collective, c.ranks, c.msg_bytes))
    rules: dict[tuple, list] = {}
    for c in cells:
        rules.setdefault(first[c].rule, []).append(c)

    def share(agree: int, total: int) -> float | None:
        return round(agree / total, 4) if total else None

    def same_rule(members: list) -> tuple[bool, bool]:
        verdict = all(first[c].verdict == second[c].verdict for c in members)
        action = all(first[c].replaced == second[c].replaced for c in members)
        return verdict, action

    judged = [same_rule(members) for members in rules.values()]

    def describe(members: list) -> str:
        def verdict(v: VerifiedCell) -> str:
            return f"{v.verdict} {v.speedup:.3f} [{v.ci_low:.3f}, {v.ci_high:.3f}] over {v.launches} launches"

        a, b = first[members[0]], second[members[0]]
        return (f"{a.cell.collective} {a.algorithm} {members[0].msg_bytes}-{members[-1].msg_bytes} B "
                f"({len(members)} sizes): {verdict(a)} / {verdict(b)}")
    result = {
        "mpi": args.mpi, "ranks": args.ranks, "launches": args.launches, "repeats": args.repeats,
        "compared_rules": len(rules), "compared_cells": len(cells),
        "same_verdict": share(sum(v for v, _ in judged), len(rules)),
        "same_action": share(sum(a for _, a in judged), len(rules)),
        "same_verdict_cells": share(sum(first[c].verdict == second[c].verdict for c in cells), len(cells)),
        "same_action_cells": share(sum(first[c].replaced == second[c].replaced for c in cells), len(cells)),
        "same_own_verdict_cells": share(sum(first[c].own_verdict == second[c].own_verdict for c in cells), len(cells)),
        "verdicts": [dict(Counter(v.verdict for v in r.verified)) for r in reports],
        "own_verdicts": [dict(Counter(v.own_verdict for v in r.verified if v.own_verdict)) for r in reports],
        "replaced": [r.replaced for r in reports],
        "geo_mean_speedup_all_cells": [r.summary.get("geo_mean_speedup_all_cells") for r in reports],
        "different": [describe(members) for members in rules.values() if not same_rule(members)[0]],
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
