"""How well a decision carries beyond the measured scales, with perfect knowledge of the measured scale.

For `TunempiStrategy`'s `extrapolation="carry"` (issue 15, goal 2): take the truly fastest algorithm (median
of the dataset's runs) in every cell of the largest training scale E, carry it to each cell of a larger
scale R at E's size nearest to s * (R / E) ** exponent, and report the average slowdown of that choice over
the cells above E. This is the best any strategy can do with that carry rule (the strategy itself only
estimates E's decision); it shows which exponent a collective's switch points follow. Also reported: the
same rule one scale down (E/2 carried to E), the hold-out a strategy could score itself on, and the
library default's own slowdown above E. (A tuning file's last communicator-size block applies to every
larger communicator at the same message size: what k = 0 scores.)

    .venv/bin/python bench/carry_rules.py                      # both Peak files, E = 128 ranks
    .venv/bin/python bench/carry_rules.py --train-max-ranks 64 --files data/ornl-peak.csv.gz
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from tunempi.collectives import DEFAULT_ALGORITHM

FILES = ("data/ornl-peak.csv.gz", "data/ornl-peak-pr7730.csv.gz")
COLLECTIVES = ("allreduce", "bcast", "allgather", "alltoall")
EXPONENTS = (-1.0, 0.0, 1.0)

Scale = tuple[int, int, int]


def medians(frame: pd.DataFrame, collective: str, *, default: bool = False) -> dict[tuple[Scale, int], dict[str, float]]:
    """(scale, size) -> algorithm -> median latency, the library's default left out (or only it)."""
    rows = frame[(frame.collective == collective) & ((frame.algorithm == DEFAULT_ALGORITHM) == default)]
    table = rows.groupby(["ranks", "nodes", "ppn", "msg_bytes", "algorithm"], as_index=False).latency_us.median()
    cells: dict[tuple[Scale, int], dict[str, float]] = {}
    for row in table.itertuples(index=False):
        scale = (int(row.ranks), int(row.nodes), int(row.ppn))
        cells.setdefault((scale, int(row.msg_bytes)), {})[str(row.algorithm)] = float(row.latency_us)
    return cells


def carried_slowdown(cells: dict[tuple[Scale, int], dict[str, float]], source: Scale, targets: list[Scale],
                     exponent: float) -> float:
    """Average slowdown over the target scales' cells of the source scale's fastest algorithm, carried."""
    source_sizes = np.array(sorted(size for scale, size in cells if scale == source))
    slowdowns = []
    for (scale, size), latencies in cells.items():
        if scale not in targets:
            continue
        wanted = max(size, 1) * (scale[0] / source[0]) ** exponent
        anchor = int(source_sizes[np.argmin(np.abs(np.log2(source_sizes) - np.log2(max(wanted, 1))))])
        at_source = cells[(source, anchor)]
        choice = min(at_source, key=at_source.__getitem__)
        if choice in latencies:  # an algorithm missing at the target is not scored
            slowdowns.append(latencies[choice] / min(latencies.values()))
    return float(np.mean(slowdowns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", default=",".join(FILES))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--train-max-ranks", type=int, default=128)
    args = parser.parse_args()
    heads = " | ".join(f"{e:+g}" for e in EXPONENTS)
    print(f"| file | collective | above E, exponent {heads} | E/2 -> E, exponent {heads} | default above E |")
    print("|---|---|" + "---|" * (2 * len(EXPONENTS) + 1))
    for path in args.files.split(","):
        frame = pd.read_csv(path)
        for collective in args.collectives.split(","):
            cells = medians(frame, collective)
            scales = sorted({scale for scale, _ in cells})
            train = [s for s in scales if s[0] <= args.train_max_ranks]
            edge, below = train[-1], train[-2]
            beyond = [s for s in scales if s[0] > args.train_max_ranks]
            ahead = [carried_slowdown(cells, edge, beyond, e) for e in EXPONENTS]
            holdout = [carried_slowdown(cells, below, [edge], e) for e in EXPONENTS]
            defaults = medians(frame, collective, default=True)
            library = [next(iter(latencies.values())) / min(cells[key].values()) for key, latencies in defaults.items()
                       if key[0] in beyond and cells.get(key)]
            print(f"| {Path(path).name.removesuffix('.csv.gz')} | {collective} | "
                  + " | ".join(f"{v:.3f}" for v in ahead) + " | " + " | ".join(f"{v:.3f}" for v in holdout)
                  + (f" | {np.mean(library):.3f} |" if library else " | - |"))


if __name__ == "__main__":
    main()
