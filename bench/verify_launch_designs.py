"""Would more launches inside one `verify` make two verifies agree? One tune per seed, then two verifies of
it, each measuring every rule in `--repeats` launches (6: twice verify's 3); the verdicts are then re-judged
from the same runs under several designs: the first half of the launches alone, the shipped second pass
(verify.needs_second_pass: the second half only for an undecided rule estimated below 0.97 or above 1.10),
wider second passes, and every launch for every rule. Printed per design, over the rules both verifies
compared: the share with the same verdict (the goal of issue 28 is >= 95 %), the share decided, and the
launches a rule cost on average.

    .venv/bin/python bench/verify_launch_designs.py --mpi mpich --ranks 2 --seeds 60-69
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tune_agreement import add_live_tune_arguments
from verify_repeatability import tune_for_verify

from tunempi.tune.verify import VerifiedCell, evaluate, needs_second_pass
from tunempi.tune.verify_run import VERIFY_SETTINGS, VerifyListener, measure_pairs, plan_verify

Rules = dict[tuple, VerifiedCell]  # one cell (the first) per rule: the verdict is the rule's


def by_rule(verified: Sequence[VerifiedCell]) -> Rules:
    rules: Rules = {}
    for v in verified:
        if v.verdict not in ("default", "failed"):
            rules.setdefault(v.rule, v)
    return rules


def close_to_one(v: VerifiedCell, within: float) -> bool:
    """Decided, but with the interval's near end within `within` of 1 (a verdict at the edge of the data)."""
    return (v.verdict == "faster" and v.ci_low < 1 + within) or (v.verdict == "slower" and v.ci_high > 1 / (1 + within))


#: Which rules get the second half of the launches, from the first half's verdict.
DESIGNS: dict[str, Callable[[VerifiedCell, set], bool]] = {
    "first half only": lambda v, shipped: False,
    "shipped second pass": lambda v, shipped: v.cell in shipped,
    "every undecided rule": lambda v, shipped: v.verdict == "same",
    "every undecided rule + decided within 2 % of 1": lambda v, shipped: v.verdict == "same" or close_to_one(v, 0.02),
    "every launch for every rule": lambda v, shipped: True,
}


def one_seed(args: argparse.Namespace, seed: int, work: Path) -> list[tuple[Rules, Rules, set]]:
    """Two verifies of one tune: per verify, the rules judged on the first half and on all the launches,
    and the cells the shipped rule would give a second pass."""
    tuned = work / f"tuned-{seed}"
    tune_for_verify(args, tuned, work / f"tune-{seed}.sqlite", seed, smoke=False)
    half = args.repeats // 2
    verifies = []
    for _ in range(2):
        plan = plan_verify(tuned, repeats=args.repeats, mpi=args.mpi)
        results, _ = measure_pairs(plan, VERIFY_SETTINGS, "serial", VerifyListener())
        planned = [r for r in results if r.measurement.run < args.repeats]  # the planned launches, no second pass
        first = evaluate(plan.selection, [r for r in planned if r.measurement.run < half])
        verifies.append((by_rule(first), by_rule(evaluate(plan.selection, planned)), set(needs_second_pass(first))))
    return verifies


def judge(seeds: list[list[tuple[Rules, Rules, set]]], repeats: int) -> dict[str, dict[str, float]]:
    out = {}
    for name, extend in DESIGNS.items():
        total = same = decided = launches = 0
        for (a_half, a_all, a_ship), (b_half, b_all, b_ship) in seeds:
            pick = []  # per verify: rule -> (its verdict under the design, the launches it took)
            for half, full, shipped in ((a_half, a_all, a_ship), (b_half, b_all, b_ship)):
                pick.append({rule: (full[rule], repeats) if extend(v, shipped) and rule in full else (v, repeats // 2)
                             for rule, v in half.items()})
            for rule in set(pick[0]) & set(pick[1]):
                (a, a_launches), (b, b_launches) = pick[0][rule], pick[1][rule]
                total += 1
                same += a.verdict == b.verdict
                decided += (a.verdict != "same") + (b.verdict != "same")
                launches += a_launches + b_launches
        out[name] = {"rules": total, "same_verdict": round(same / total, 3) if total else float("nan"),
                     "decided": round(decided / 2 / total, 3) if total else float("nan"),
                     "launches_per_rule": round(launches / 2 / max(1, total), 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_live_tune_arguments(parser)
    parser.add_argument("--repeats", type=int, default=6, help="launches per verify (even: halves are compared)")
    parser.add_argument("--seeds", default="60-63", help="FIRST-LAST, one tune each")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    low, high = (int(x) for x in args.seeds.split("-"))
    work = Path(tempfile.mkdtemp(prefix="verify-launch-designs-"))
    seeds = [one_seed(args, seed, work) for seed in range(low, high + 1)]
    result = {"mpi": args.mpi, "ranks": args.ranks, "repeats": args.repeats, "seeds": args.seeds,
              "designs": judge(seeds, args.repeats)}
    print("| design | rules | same verdict | decided | launches per rule |\n|---|---|---|---|---|")
    for name, row in result["designs"].items():
        print(f"| {name} | {row['rules']} | {row['same_verdict']} | {row['decided']} | {row['launches_per_rule']} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
