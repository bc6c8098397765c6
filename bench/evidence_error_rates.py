"""Error rates of the shared paired-evidence rule (tunempi.evidence) on simulated pairs: the share of
"faster" verdicts on A/A data (the same configuration on both sides: false positives, to compare with the
level) and on a real 10 % gain (power), per number of pairs and noise (tunempi.sim.paired). Seeded.

    .venv/bin/python bench/evidence_error_rates.py [--trials 5000]
"""

from __future__ import annotations

import argparse

import numpy as np

from tunempi.evidence import LEVEL, compare
from tunempi.sim.paired import NOISE, same_runs, separate_runs


def share_faster(candidate: np.ndarray, baseline: np.ndarray) -> float:
    verdicts = [compare(list(c), list(b)).verdict for c, b in zip(candidate, baseline, strict=True)]
    return verdicts.count("faster") / len(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5000)
    args = parser.parse_args()
    print(f"level {LEVEL}: share of 'faster' verdicts, A/A | 10 % gain ({args.trials} trials each, seeded)")
    for pairs in (3, 4, 5, 6, 8, 10, 12, 16, 20):
        cells = []
        for name, noise in NOISE.items():
            rng = np.random.default_rng(pairs)
            a_a = share_faster(*separate_runs(rng, args.trials, pairs, **noise))
            gain = share_faster(*separate_runs(rng, args.trials, pairs, speedup=1.1, **noise))
            cells.append(f"{name} {a_a:.4f} | {gain:.2f}")
        rng = np.random.default_rng(pairs)
        a_a = share_faster(*same_runs(rng, args.trials, pairs))
        gain = share_faster(*same_runs(rng, args.trials, pairs, speedup=1.1))
        cells.append(f"same-run {a_a:.4f} | {gain:.2f}")
        print(f"{pairs:3d} pairs: " + "   ".join(cells), flush=True)


if __name__ == "__main__":
    main()
