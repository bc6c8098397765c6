"""A plan before the allocation (`tunempi tune --plan`, issue 57): the tune's wall time, launches and runs,
predicted from the layout asked for and what one point of it costs, without launching anything.

The model (docs/tune.md "Plan"), per layout (one engine per layout, tune/runner.py):
    exploring runs  = EXPLORE_RUNS_PER_POINT x the exhaustive points (cells x candidate algorithms): the guard
                      (tune/guard.py) ends the exploration near the cost of measuring every point once, and the
                      strategy measures where it is unsure again;
    deciding runs   = (launches - 1) deciding blocks x cells x CONTENDERS (the default and the closest other,
                      tune/launch_blocks.py `contenders`; tune/driver.py's deciding blocks);
    launches        = EXPLORE_LAUNCHES + (launches - 1): a launch per round and per failed run while exploring,
                      a fresh one per deciding block;
    one run's time  = warm-up + iterations x latency (each part stopped by the time cap as the engine stops
                      it, never fewer than min_iters) + POINT_OVERHEAD_S
                      (the request, the engine's state probe, storing the run);
    wall            = launches x ENGINE_START_S + runs x one run's time + MODEL_S_PER_ROUND x rounds, the layouts
                      run one after another (--topology serial) or side by side where the nodes allow it.
Latencies and iterations come from the results store (this library's own runs at the layout, nearest size,
any algorithm) or a dataset's (Peak's CSVs: latencies only, so the iterations are TYPICAL_ITERATIONS); a
cell whose collective neither measured takes UNKNOWN_LATENCY_US + msg_bytes / UNKNOWN_BYTES_PER_US.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunempi.bench.protocol import MeasureSettings
from tunempi.space import Cell, FeatureSpace

#: Runs of the exploring phase per exhaustive point. Measured: MPICH 2 ranks, allreduce 16 sizes, 112 points,
#: 318 exploring runs (2.8; docs/measurements/tune.md "Plan").
EXPLORE_RUNS_PER_POINT = 2.8
#: Algorithms measured per cell in each deciding block: the default and one contender (launch_blocks.contenders
#: adds a second only where the strategy puts two ahead of the default by the margin).
CONTENDERS = 2
#: Engine launches while exploring, per layout: the first and a relaunch per run that killed the engine (an
#: algorithm the library refuses at some sizes): 7 and 10 in two such tunes.
EXPLORE_LAUNCHES = 8
#: Starting an engine (mpiexec, MPI_Init, the binary's set-up): MPICH 2 ranks on this machine, 0.2 s.
ENGINE_START_S = 0.2
#: Per run beyond its iterations (request, probe, reply, store write): (bench time - launches x start -
#: iterations' time) / runs of the same tune, 2.5 ms.
POINT_OVERHEAD_S = 0.0025
#: The strategy's model fit per round: (tune's loop wall - its bench time) / rounds, 0.2-0.6 s in the five tunes
#: of docs/measurements/tune.md "Plan" (load 1-4 on 2 cores).
MODEL_S_PER_ROUND = 0.35
#: Runs per exploring round (the same tune: 430 runs in 5 rounds, batches of 32 cells).
ROUND_RUNS = 100
#: The smoke check: the written files loaded by the library, a launch per communicator size tuned (tune/smoke.py),
#: and FILES_S for the rest after the loop (rule sets, files, manifest): the whole tune's wall less its loop's was
#: 1.4-3.9 s in those five tunes.
SMOKE_S_PER_SIZE = 1.0
FILES_S = 1.0
#: A latency where nothing was measured: shared-memory 2-rank MPICH here, 1-3 us at 4 B, about 1 us per KiB.
UNKNOWN_LATENCY_US = 3.0
UNKNOWN_BYTES_PER_US = 1000.0
#: The engine's warm-up ends once it took this share of the time cap (bench/c/engine.c WARMUP_SHARE).
WARMUP_SHARE = 0.25
#: Iterations a point takes where no store says (a dataset records latencies only): the median of the
#: store's runs above (default 82, others 20-63).
TYPICAL_ITERATIONS = 60


@dataclass(frozen=True)
class PointCosts:
    """What a run of one point costs: its latency and iterations (None: not known), where they came from."""

    latency_us: Mapping[tuple[tuple[int, int, int], str, int], float] = field(default_factory=dict)
    iterations: Mapping[tuple[tuple[int, int, int], str, int], int] = field(default_factory=dict)
    source: str = "none"
    engine_start_s: float = ENGINE_START_S
    point_overhead_s: float = POINT_OVERHEAD_S

    def nearest(self, cell: Cell) -> tuple[float | None, int | None]:
        """(latency, iterations) of the cell's collective at its layout (else the nearest layout measured), nearest
        message size (log2); (None, None) where the collective was never measured."""
        layout = (cell.ranks, cell.nodes, cell.ppn)
        keys = [k for k in self.latency_us if k[0] == layout and k[1] == cell.collective]
        if not keys:  # a layout not measured yet: the nearest one measured (ranks, then nodes; log2)
            keys = [k for k in self.latency_us if k[1] == cell.collective]
            if not keys:
                return None, None
            near = min({k[0] for k in keys}, key=lambda lay: (abs(math.log2(lay[0]) - math.log2(layout[0]))
                                                                + abs(math.log2(lay[1]) - math.log2(layout[1]))))
            keys = [k for k in keys if k[0] == near]
        key = min(keys, key=lambda k: abs(math.log2(max(k[2], 1)) - math.log2(max(cell.msg_bytes, 1))))
        return self.latency_us[key], self.iterations.get(key)


def unknown_latency_us(msg_bytes: int) -> float:
    return UNKNOWN_LATENCY_US + msg_bytes / UNKNOWN_BYTES_PER_US


def run_s(latency_us: float, iterations: int | None, settings: MeasureSettings,
          overhead_s: float = POINT_OVERHEAD_S) -> float:
    """One run's wall time: the warm-up (it ends once it took WARMUP_SHARE of the time cap), the measured
    iterations (the store's count where known, else TYPICAL_ITERATIONS stopped at the time cap; never fewer
    than min_iters), plus the per-run overhead."""
    latency_s = latency_us * 1e-6
    warm = min(settings.warmup * latency_s, max(WARMUP_SHARE * settings.time_cap_s, 2 * latency_s))
    if iterations is not None:
        measured = iterations * latency_s
    else:
        measured = min(min(TYPICAL_ITERATIONS, settings.max_iters) * latency_s, settings.time_cap_s)
    return warm + max(measured, settings.min_iters * latency_s) + overhead_s


@dataclass(frozen=True)
class Prediction:
    """What a tune will take (predicted) or took (actual): wall seconds, engine launches, runs."""

    wall_s: float
    launches: int
    runs: int

    def to_dict(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), "launches": self.launches, "runs": self.runs}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Prediction:
        return cls(float(data["wall_s"]), int(data["launches"]), int(data["runs"]))


@dataclass(frozen=True)
class PlanRecord:
    """The plan and what the tune took (the manifest's `plan`), with where the costs came from."""

    predicted: Prediction
    actual: Prediction | None = None
    costs_from: str = ""

    def error(self, field_name: str) -> float | None:
        """(predicted - actual) / actual of `wall_s`, `launches` or `runs`; None without an actual."""
        if self.actual is None:
            return None
        actual = float(getattr(self.actual, field_name))
        return (float(getattr(self.predicted, field_name)) - actual) / actual if actual else None

    def to_dict(self) -> dict[str, Any]:
        return {"predicted": self.predicted.to_dict(),
                "actual": self.actual.to_dict() if self.actual is not None else None, "costs_from": self.costs_from}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanRecord:
        actual = data.get("actual")
        return cls(Prediction.from_dict(data["predicted"]), Prediction.from_dict(actual) if actual else None,
                   str(data.get("costs_from", "")))


def concurrent_wall(layout_s: Sequence[tuple[int, float]], allocation_nodes: int, serial: bool) -> float:
    """The layouts' wall time: one after another when serial; else packed on the allocation's nodes (each
    layout holds its nodes): the node-seconds over the nodes, never less than the longest layout."""
    if not layout_s:
        return 0.0
    if serial:
        return sum(s for _, s in layout_s)
    node_seconds = sum(nodes * s for nodes, s in layout_s)
    return max(max(s for _, s in layout_s), node_seconds / max(allocation_nodes, 1))


def cell_run_s(cell: Cell, costs: PointCosts, settings: MeasureSettings) -> float:
    latency, iterations = costs.nearest(cell)
    return run_s(latency if latency is not None else unknown_latency_us(cell.msg_bytes), iterations, settings,
                 costs.point_overhead_s)


def predict(spaces: Mapping[str, FeatureSpace], settings: MeasureSettings, costs: PointCosts, *,
            launches: int, allocation_nodes: int = 1, serial: bool = True) -> Prediction:
    """The tune's wall time, launches and runs for these spaces (the model in the module's docstring)."""
    per_layout: dict[tuple[int, int, int], list[tuple[Cell, int]]] = {}
    for space in spaces.values():
        for cell in space.cells:
            per_layout.setdefault((cell.ranks, cell.nodes, cell.ppn), []).append((cell, len(space.algorithms)))
    blocks = max(launches, 1) - 1
    total_runs = total_launches = 0
    layout_s: list[tuple[int, float]] = []
    for (_, nodes, _), cells in sorted(per_layout.items()):
        exploring = EXPLORE_RUNS_PER_POINT * sum(algorithms for _, algorithms in cells)
        deciding = blocks * CONTENDERS * len(cells)
        runs = exploring + deciding
        cell_s = sum(cell_run_s(cell, costs, settings) for cell, _ in cells) / len(cells)
        layout_launches = EXPLORE_LAUNCHES + blocks
        rounds = math.ceil(exploring / ROUND_RUNS)
        seconds = layout_launches * costs.engine_start_s + runs * cell_s + rounds * MODEL_S_PER_ROUND
        layout_s.append((nodes, seconds))
        total_runs += round(runs)
        total_launches += layout_launches
    return Prediction(concurrent_wall(layout_s, allocation_nodes, serial), total_launches, total_runs)


def costs_from_measurements(rows: Iterable[Any], source: str) -> PointCosts:
    """PointCosts from stored runs or dataset rows (anything with collective, ranks, nodes, ppn, msg_bytes and
    a latency: `mean_us`/`median_us` or `latency_us`; `iterations` where recorded): the median per key."""
    latencies: dict[tuple[tuple[int, int, int], str, int], list[float]] = {}
    iterations: dict[tuple[tuple[int, int, int], str, int], list[int]] = {}
    for row in rows:
        latency = getattr(row, "mean_us", None) or getattr(row, "latency_us", None)
        if getattr(row, "status", "ok") != "ok" or not latency:
            continue
        key = ((int(row.ranks), int(row.nodes), int(row.ppn)), str(row.collective), int(row.msg_bytes))
        latencies.setdefault(key, []).append(float(latency))
        if getattr(row, "iterations", None):
            iterations.setdefault(key, []).append(int(row.iterations))
    return PointCosts({k: statistics.median(v) for k, v in latencies.items()},
                      {k: round(statistics.median([float(i) for i in v])) for k, v in iterations.items()}, source)
