"""Simulated paired measurements for the evidence rule (tunempi.evidence): A/A (the same configuration on
both sides) and A/B with a known speedup, with the noise measured on a shared VM (docs/online.md,
docs/tune.md): run-to-run noise of a few %, the machine's state moving everything by 3x for minutes (a
change can fall between the two runs of a pair), and stalls of 2-10x that hit a whole run. Used by the
tests of the rule's error rates and by bench/evidence_error_rates.py."""

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
