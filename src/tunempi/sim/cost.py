"""The cost model of simulated benchmarking (documented in docs/strategies.md).

Simulated benchmark seconds = launches x per-launch overhead + iterations x latency. Iterations follow
OSU's defaults: 1000 timed + 200 warm-up iterations up to 8 KiB, 100 + 10 above. Every (cell, algorithm)
run is one launch: an algorithm is forced for a whole job, and a job measures one point.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    launch_overhead_s: float = 1.0
    small_message_limit: int = 8192
    small_iterations: int = 1000
    small_warmup: int = 200
    large_iterations: int = 100
    large_warmup: int = 10

    def iterations(self, msg_bytes: int) -> int:
        """Iterations run, warm-up included."""
        if msg_bytes <= self.small_message_limit:
            return self.small_iterations + self.small_warmup
        return self.large_iterations + self.large_warmup

    def run_seconds(self, msg_bytes: int, latency_us: float | None, launches: int = 1) -> float:
        """Seconds one run costs; a failed run (latency None) still costs its launch."""
        busy = 0.0 if latency_us is None else self.iterations(msg_bytes) * latency_us * 1e-6
        return launches * self.launch_overhead_s + busy
