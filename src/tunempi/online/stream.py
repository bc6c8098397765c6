"""The shared random stream of the online mode, bit for bit as the interposer computes it.

c/tmpi_online_stream.h is the implementation that runs; this mirror lets tests (and anyone curious)
predict which algorithm every call of a run draws: a draw is a pure function of (seed, run, stream,
index), where the stream is the communicator's member list and the index its collective-call counter,
so every member of a communicator draws the same number without communicating.
"""

from __future__ import annotations

from collections.abc import Sequence

MASK64 = (1 << 64) - 1


def mix64(z: int) -> int:
    """splitmix64's finaliser (tmpi_mix64)."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def key(seed: int, run: int, stream: int) -> int:
    """The key of one communicator's stream in one run (tmpi_online_key)."""
    return mix64((seed & MASK64) ^ mix64((run & MASK64) ^ mix64(stream & MASK64)))


def uniform(seed: int, run: int, stream: int, index: int) -> float:
    """The draw in [0, 1) for call `index` of the communicator `stream` in run `run` (tmpi_online_uniform):
    splitmix64 seeded with the stream's key."""
    x = mix64((key(seed, run, stream) + (index & MASK64) * 0x9E3779B97F4A7C15) & MASK64)
    return (x >> 11) * (1.0 / 9007199254740992.0)


def stream_id(members: Sequence[int]) -> int:
    """FNV-1a over the sorted world ranks of a communicator (tmpi_online_stream_id)."""
    value = 1469598103934665603
    for member in members:
        value = ((value ^ (member & 0xFFFFFFFF)) * 1099511628211) & MASK64
    return value


def pick(probabilities: Sequence[float], u: float) -> int:
    """The algorithm index a draw selects (tmpi_online_pick over the cumulative probabilities)."""
    total = float(sum(probabilities))
    cumulative = 0.0
    for index, p in enumerate(probabilities[:-1]):
        cumulative += p / total
        if u < cumulative:
            return index
    return len(probabilities) - 1
