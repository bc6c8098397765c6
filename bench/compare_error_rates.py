"""How often `tunempi compare` calls a variant faster or slower when it is the default (A/A), and how often it
finds a real difference, with its adaptive stopping (not a test: tests/unit/test_compare.py asserts the bound).

Launches are simulated (lognormal noise of a given spread per run, a fixed factor per variant) through the real
session: schedule, store, stopping rule and verdicts are the ones `compare` runs.

    .venv/bin/python bench/compare_error_rates.py [--comparisons 1000] [--sigmas 0.01,0.03,0.1] [--effect 1.05]
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
from collections import Counter
from pathlib import Path

from tunempi.compare.session import CompareRequest, RunOutcome, prepare_compare, run_compare
from tunempi.compare.variants import Variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--comparisons", type=int, default=1000)
    parser.add_argument("--sigmas", default="0.01,0.03,0.1")
    parser.add_argument("--effect", type=float, default=1.05, help="the variant's slowdown in the A/B rows")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="tunempi-compare-rates-"))
    env_file = scratch / "variant.env"
    env_file.write_text("FACTOR=1\n")
    print(f"{'noise':>6} {'variant':>8} {'faster':>8} {'same':>8} {'slower':>8} {'runs each (mean)':>17}")
    for sigma in (float(s) for s in args.sigmas.split(",")):
        for factor in (1.0, args.effect):
            rng = random.Random(f"{sigma}:{factor}")

            def launch(variant: Variant, timeout: float | None, rng=rng, factor=factor, sigma=sigma) -> RunOutcome:
                cost = factor if variant.env else 1.0
                return RunOutcome("ok", cost * math.exp(rng.gauss(0.0, sigma)), "")

            verdicts: Counter[str] = Counter()
            blocks = 0
            for seed in range(args.comparisons):
                request = CompareRequest(["./app"], [f"v={env_file}"], db=str(scratch / f"{sigma}-{factor}.sqlite"),
                                         seed=seed)
                outcome = run_compare(prepare_compare(request, launch=launch))
                verdicts[outcome.verdicts[0].verdict] += 1
                blocks += outcome.blocks
            n = args.comparisons
            print(f"{sigma:>6g} {factor:>7g}x {verdicts['faster'] / n:>8.1%} {verdicts['no difference'] / n:>8.1%} "
                  f"{verdicts['slower'] / n:>8.1%} {blocks / n:>17.1f}", flush=True)


if __name__ == "__main__":
    main()
