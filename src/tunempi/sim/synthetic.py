"""A small analytic dataset in the shared format: for tests, demos and sanity checks of strategies.

Three algorithms with textbook cost shapes (linear, tree, ring) plus `pair`, which only runs on 2
ranks (like Open MPI's two_proc), and `default`; every run gets seeded log-normal noise.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

ALGORITHMS = ("linear", "tree", "ring", "pair")


def _latency_us(algorithm: str, ranks: int, msg_bytes: int) -> float | None:
    log_p = math.log2(ranks)
    if algorithm == "linear":
        return 2.0 + 0.5 * ranks + 0.002 * msg_bytes * ranks
    if algorithm == "tree":
        return 3.0 + 2.0 * log_p + 0.004 * msg_bytes * log_p
    if algorithm == "ring":
        return 1.0 + 4.0 * ranks + 0.003 * msg_bytes
    if algorithm == "pair":
        return 1.5 + 0.001 * msg_bytes if ranks == 2 else None
    raise ValueError(algorithm)


def synthetic_frame(
    collective: str = "allreduce",
    ranks: tuple[int, ...] = (2, 4, 8, 16, 32),
    msg_sizes: tuple[int, ...] = (4, 16, 64, 256, 1024, 4096, 16384, 65536),
    runs: int = 3,
    noise: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """Rows as `sim.load_frame` returns them; one node up to 16 ranks, then 16 per node."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in ranks:
        nodes = max(1, math.ceil(r / 16))
        ppn = min(r, 16)
        for m in msg_sizes:
            truths = {a: _latency_us(a, r, m) for a in ALGORITHMS}
            known = [v for v in truths.values() if v is not None]
            truths["default"] = float(np.mean(known))
            for algorithm, truth in truths.items():
                if truth is None:
                    continue
                for run in range(runs):
                    value = truth * float(np.exp(rng.normal(0.0, noise))) if noise else truth
                    rows.append((collective, algorithm, r, nodes, ppn, m, run, value))
    return pd.DataFrame(rows, columns=["collective", "algorithm", "ranks", "nodes", "ppn", "msg_bytes", "run",
                                       "latency_us"])
