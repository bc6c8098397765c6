"""Simulated paired measurements for the evidence rule (tunempi.evidence): A/A (the same configuration on
both sides) and A/B with a known speedup, with the noise measured on a shared VM (docs/online.md,
docs/tune.md): run-to-run noise of a few %, the machine's state moving everything by 3x for minutes (a
change can fall between the two runs of a pair), and stalls of 2-10x that hit a whole run. Used by the
tests of the rule's error rates (and, in git history, by bench/evidence_error_rates.py)."""

from __future__ import annotations

import math

import numpy as np

from tunempi.evidence import alternating

#: Per-run noise of separate runs: lognormal sigma, P(stall) per run, P(change of state) per run.
NOISE: dict[str, dict[str, float]] = {
    "quiet": {"sigma": 0.05, "stall": 0.0, "switch": 0.0},
    "typical": {"sigma": 0.05, "stall": 0.02, "switch": 0.01},
    "harsh": {"sigma": 0.08, "stall": 0.05, "switch": 0.05},
}


def separate_runs(rng: np.random.Generator, trials: int, pairs: int, *, sigma: float, stall: float,
                  switch: float, speedup: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(candidate, baseline) times, trials x pairs, each side its own run (verify, search) in the ABBA
    order: per run a lognormal noise, a stall with probability `stall`, a change of state with
    probability `switch`. The candidate is `speedup` times faster (1: A/A)."""
    runs = 2 * pairs
    state = math.log(3.0) * (np.cumsum(rng.random((trials, runs)) < switch, axis=1) % 2)
    stalls = np.where(rng.random((trials, runs)) < stall, rng.uniform(math.log(2), math.log(10), (trials, runs)), 0)
    times = np.exp(state + rng.normal(0.0, sigma, (trials, runs)) + stalls)
    order = [side for _, side in alternating("candidate", "baseline", pairs)]
    candidate = times[:, [i for i, side in enumerate(order) if side == "candidate"]] / speedup
    return candidate, times[:, [i for i, side in enumerate(order) if side == "baseline"]]


def same_runs(rng: np.random.Generator, trials: int, pairs: int, calls: int = 40, speedup: float = 1.0
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per-run mean time per call of two algorithms drawn in the same run (online), trials x pairs: the
    run's state is shared; per call lognormal noise and stalls of 10-100x (1 % of calls, 6 % in the 30 %
    of runs that are disturbed)."""
    state = np.exp(math.log(3.0) * (rng.random((trials, pairs, 1, 1)) < 0.5))
    rate = np.where(rng.random((trials, pairs, 1, 1)) < 0.3, 0.06, 0.01)
    shape = (trials, pairs, 2, calls)
    calls_ns = state * rng.lognormal(0.0, 0.3, shape) * np.where(rng.random(shape) < rate,
                                                                   rng.uniform(10, 100, shape), 1.0)
    means = calls_ns.mean(axis=3)
    return means[:, :, 0] / speedup, means[:, :, 1]


def launch_blocks(rng: np.random.Generator, trials: int, cells: int, launches: int, runs: int = 1, *,
                  run_sigma: float = 0.05, launch_sigma: float = 0.05, shared_sigma: float = 0.0,
                  ranges: tuple[int, ...] = (), stall: float = 0.0, cell_spread: float = 0.0,
                  speedup: float | np.ndarray = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(candidate, baseline) times, trials x cells x launches x runs: what tune measures when the contenders
    of `cells` cells are measured in `launches` launches, `runs` runs each per launch. Each algorithm gets
    its own lognormal offset per (cell, launch), sigma `launch_sigma` (a launch that favours one algorithm for
    its whole life: placement, binding, the machine's state) and one shared by the cells of a range per
    launch, sigma `shared_sigma` (a launch that favours it at neighbouring sizes; `ranges`: the sizes of the
    ranges from the first cell on, the rest one cell each), each run a lognormal noise `run_sigma` and a
    stall of 2-10x with probability `stall`. `cell_spread`: the cells' noise scales differ by a lognormal
    factor of this sigma (small messages noisier than large ones). `speedup`: the candidate's, per cell or
    for all (1: A/A)."""
    scale = np.exp(rng.normal(0.0, cell_spread, (trials, cells, 1, 1))) if cell_spread > 0 else 1.0
    group = np.repeat(np.arange(len(ranges) + cells - sum(ranges)), [*ranges, *([1] * (cells - sum(ranges)))])

    def side() -> np.ndarray:
        shared = rng.normal(0.0, shared_sigma, (trials, int(group.max()) + 1, launches, 1))[:, group]
        offsets = rng.normal(0.0, launch_sigma, (trials, cells, launches, 1)) + shared
        noise = rng.normal(0.0, run_sigma, (trials, cells, launches, runs))
        stalls = np.where(rng.random((trials, cells, launches, runs)) < stall,
                          rng.uniform(math.log(2), math.log(10), (trials, cells, launches, runs)), 0.0)
        return np.exp(scale * (offsets + noise) + stalls)

    factor = np.broadcast_to(np.asarray(speedup, dtype=float).reshape(-1, 1, 1) if np.ndim(speedup) else
                             np.asarray(speedup, dtype=float), (cells, 1, 1))
    return side() / factor, side()
