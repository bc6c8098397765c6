"""The cost models of simulated benchmarking (documented in docs/strategies.md).

Simulated benchmark seconds = launches x per-launch overhead + iterations x latency. Iterations follow
OSU's defaults: 1000 timed + 200 warm-up iterations up to 8 KiB, 100 + 10 above. Two launch models:

- `acclaim` (one launch per point): every (cell, algorithm) run is its own job, as ACCLAiM and OSU-style
  sweeps pay (the algorithm is forced by environment for a whole job);
- `engine` (one launch per layout): tunempi's bench engine stays up per (ranks, nodes, ppn) for a whole
  tuning run and switches algorithms at run time, so a point costs its iterations only and the launch is
  paid once, by the first point measured at that layout.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Names accepted by `simulate --cost-model`.
COST_MODELS: tuple[str, ...] = ("acclaim", "engine")


@dataclass(frozen=True)
class CostModel:
    launch_overhead_s: float = 1.0
    small_message_limit: int = 8192
    small_iterations: int = 1000
    small_warmup: int = 200
    large_iterations: int = 100
    large_warmup: int = 10
    #: "point": one launch per (cell, algorithm) run; "layout": one launch per layout for the whole run.
    launch_per: str = "point"

    def __post_init__(self) -> None:
        if self.launch_per not in ("point", "layout"):
            raise ValueError(f"launch_per must be 'point' or 'layout', got {self.launch_per!r}")

    @classmethod
    def named(cls, name: str) -> CostModel:
        """`acclaim` (one launch per point) or `engine` (one launch per layout)."""
        if name not in COST_MODELS:
            from tunempi.errors import UsageError

            raise UsageError(f"unknown cost model {name!r}; valid: {', '.join(COST_MODELS)}")
        return cls(launch_per="point" if name == "acclaim" else "layout")

    def iterations(self, msg_bytes: int) -> int:
        """Iterations run, warm-up included."""
        if msg_bytes <= self.small_message_limit:
            return self.small_iterations + self.small_warmup
        return self.large_iterations + self.large_warmup

    def run_seconds(self, msg_bytes: int, latency_us: float | None, launches: int = 1) -> float:
        """Seconds one run costs; a failed run (latency None) still costs its launch(es)."""
        busy = 0.0 if latency_us is None else self.iterations(msg_bytes) * latency_us * 1e-6
        return launches * self.launch_overhead_s + busy
