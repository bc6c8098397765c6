"""A plan before the allocation (`tunempi tune --plan`, issue 57): the tune's wall time, launches and runs,
predicted from the layout asked for and what one point of it costs, without launching anything.

The model (docs/tune.md "Plan"), per layout (one engine per layout, tune/runner.py):
    exploring runs  = where the costs have a latency for every point of a collective's space (the store
                      measured the layout, or a dataset): tune's own strategy replayed on them
                      (`replay_exploration`: its live parameters, seeded, the guard of tune/guard.py with the
                      model's fits as earlier tunes recorded them in the store, `PointCosts.fit_s`, else timed
                      as the replay makes them, then tune's confirmation round), its runs and
                      their seconds per layout; else EXPLORE_RUNS_PER_POINT x the exhaustive points (cells x
                      candidate algorithms): the guard ends the exploration near the cost of measuring every
                      point once, and the strategy measures where it is unsure again;
    deciding runs   = (launches - 1) deciding blocks (at least TURNS_BLOCKS where the layout's ranks take turns on
                      the cores and launches > 2, tune/driver.py) x the contenders of every cell tune would
                      contest after the replay (tune/launch_blocks.py `contenders`: the default and the choice, a
                      third where two beat the default, none where the exploration measured the default or every
                      other algorithm not at all; CONTENDERS in every cell without a replay) x each one's runs
                      per block (file_launches.RUNS_PER_LAUNCH, 3, where the block measures under files);
    launches        = 1 (the exploring launch; where the library takes a collective's algorithm only at
                      MPI_Init, Intel MPI, the replay's launches instead: one per forced algorithm, as tune's
                      runner keeps them, `SessionCache`) + a relaunch per point of the layout whose stored run killed the
                      engine (`PointCosts.kills`: the tune hits the same points before tune/driver.py blocks
                      the algorithm there) + (launches - 1) deciding blocks x that block's launches: under
                      files, one without a file and one per contender rank (file_launches.FileDecider.sides:
                      the widest cell's contenders, from the replay where it ran, else CONTENDERS); switched
                      at run time, one fresh launch;
    state seconds   = what the deciding blocks tune adds for the machine's state (tune/machine_state.py) can
                      add at most, not in the wall time: whether they come depends on the machine at the time,
                      not on the costs, but tune/driver.py stops adding them after STATE_WAIT_S, so the bound
                      is STATE_WAIT_S + one pause + one more block of every layout whose ranks do not take
                      turns on the cores (`Prediction.state_s`; where they do the probe reads the turns and
                      tune adds none, machine_state.usable_probe);
    one run's time  = what such runs took where the store timed them (its `run_s`, request to reply: the
                      exploring launch's per point, the deciding blocks' per cell, `PointCosts.seconds`);
                      else warm-up + iterations x latency (each part stopped by the time cap as the engine
                      stops it, never fewer than min_iters) + POINT_OVERHEAD_S (the request, the engine's
                      state probe, storing the run): where ranks take turns on the cores the engine's own
                      synchronisation costs far more than that (docs/measurements/tune.md "Plan, runs priced
                      by what they took");
    wall            = launches x a launch's start and close (`PointCosts.start_s`: what the library's launches
                      took at the layout where the store recorded them, else ENGINE_START_S +
                      ENGINE_START_PER_NODE_S per node beyond one) + runs x one
                      run's time (a failed one: what it took, `PointCosts.failed_run_s`) + the model's seconds
                      (the replay's fits, recorded or timed, else MODEL_S_PER_ROUND per ROUND_RUNS exploring runs) +
                      DECIDING_BLOCK_S x blocks, the layouts run one after another (--topology serial) or side by
                      side where the nodes allow it; then the files and smoke check (FILES_S, SMOKE_S_PER_SIZE)
                      and, where the tune spans nodes, its compositions (`compositions_s`).
Latencies and iterations come from the results store (this library's own runs at the layout, nearest size,
any algorithm) or a dataset's (Peak's CSVs: latencies only, so the iterations are TYPICAL_ITERATIONS); a
cell whose collective neither measured takes UNKNOWN_LATENCY_US + msg_bytes / UNKNOWN_BYTES_PER_US.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunempi.bench.engine import killed_the_engine
from tunempi.bench.protocol import MeasureSettings
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.sim.cost import CostModel
from tunempi.space import Cell, FeatureSpace
from tunempi.store.fits import FitTiming
from tunempi.strategy import MeasurementRecord, Request, Strategy, import_strategies, make_strategy
from tunempi.tune.driver import CONFIRM_PASSES, DEFAULT_MARGIN, confirmation_requests_of, prefer_default
from tunempi.tune.guard import CONTINUE, MEASURE_THE_REST, estimate_exhaustive
from tunempi.tune.launch_blocks import contenders, deciding_blocks
from tunempi.tune.machine_state import STATE_PAUSE_S, STATE_WAIT_S, layout_takes_turns
from tunempi.tune.runner import MAX_SESSIONS

if TYPE_CHECKING:
    from tunempi.sim.replay import ReplayBackend

#: Runs of the exploring phase per exhaustive point where the costs cannot replay the strategy: round 1 of
#: docs/measurements/tune.md "Plan" (five small tunes): their runs less the deciding blocks' (3 runs of each
#: contender per cell and block under files), 1347 over 1300 exhaustive points (0.56-1.86 per tune).
EXPLORE_RUNS_PER_POINT = 1.0
#: Algorithms measured per cell in each deciding block: the default and one contender (launch_blocks.contenders
#: adds a second only where the strategy puts two ahead of the default by the margin).
CONTENDERS = 2
#: Starting and closing an engine (mpiexec, MPI_Init, the binary's set-up), and each node beyond the first:
#: timed around EngineSession.start and close in the tunes of docs/measurements/tune.md "Plan, runs priced by
#: what they took" (round 1): start 0.06-0.08 s and close 0.01 s (Open MPI's 0.07 s) on one node, 0.07-0.11 s
#: and 0.01 s on 2 emulated nodes, 0.12 s and 0.03 s on 4. (Before runs were timed, 0.09 s a node: the
#: residual that then carried the runs' unpriced synchronisation.) Where the store recorded the library's own
#: launches (store/launches.py) those price a launch instead (`PointCosts.start_s`).
ENGINE_START_S = 0.08
ENGINE_START_PER_NODE_S = 0.025
#: A launch's start and close per vendor where the store recorded none of the library's (a fresh store): what
#: tunes recorded here (store/launches.py) on one node, MPICH 0.06-0.08 s, Open MPI 0.10-0.22 s, Intel MPI
#: 0.38 s (89 launches, 34 s of a 41 s tune, where ENGINE_START_S made its fresh plan 3x short).
ENGINE_START_S_BY_VENDOR = {"mpich": ENGINE_START_S, "openmpi": 0.15, "impi": 0.38}
#: Per run beyond its iterations (request, probe, reply, store write): (bench time - launches x start -
#: iterations' time) / runs of the same tune, 2.5 ms.
POINT_OVERHEAD_S = 0.0025
#: The strategy's model fit per round where the replay does not time its own fits (`predict`'s default; tune
#: --plan times them: tune/job.py `predict_tune`) or nothing is replayed: (tune's loop wall - its bench time) /
#: rounds, 0.2-0.6 s in the five tunes of docs/measurements/tune.md "Plan" (load 1-4 on 2 cores). Timed, a fit
#: of those tunes' spaces takes about 0.1 s here.
MODEL_S_PER_ROUND = 0.35
#: Per layout and deciding block, beyond its runs and launches (the files its launches run under written,
#: the block's contenders picked and decided): round 1 of "Plan, re-measured", the loop's wall less its bench
#: time less MODEL_S_PER_ROUND x the plan's rounds, over layouts x blocks: (11.6 - 4.2) s / 27.
DECIDING_BLOCK_S = 0.28
#: Recorded asks a replayed one is priced by (`PointCosts.fit_s`): the median of the nearest. The tunempi
#: strategy's fits took 0.1-0.4 s over Peak's spaces of 133-840 points and 20-185 records here, with no clear
#: trend in either (docs/measurements/tune.md "Plan, the fits as the tune recorded them").
FIT_NEIGHBOURS = 5
#: Replays of the strategy per plan (seeds from the tune's): the plan takes their mean.
REPLAY_SEEDS = 3
#: Runs per exploring round (the same tune: 430 runs in 5 rounds, batches of 32 cells).
ROUND_RUNS = 100
#: The smoke check: the written files loaded by the library, a launch per communicator size tuned (tune/smoke.py),
#: and FILES_S for the rest after the loop (rule sets, files, manifest): the whole tune's wall less its loop's
#: was 1.06 s (one node, one size) and 1.20 s (two sizes) in round 1 of "Plan, re-measured". Where the tune
#: spans nodes its compositions step comes on top (`compositions_s`).
SMOKE_S_PER_SIZE = 0.15
FILES_S = 0.9
#: A latency where nothing was measured: shared-memory 2-rank MPICH here, 1-3 us at 4 B, about 1 us per KiB.
UNKNOWN_LATENCY_US = 3.0
UNKNOWN_BYTES_PER_US = 1000.0
#: The engine's warm-up ends once it took this share of the time cap (bench/c/engine.c WARMUP_SHARE).
WARMUP_SHARE = 0.25
#: Iterations a point takes where no store says (a dataset records latencies only): the median of the
#: store's runs above (default 82, others 20-63).
TYPICAL_ITERATIONS = 60


Key = tuple[tuple[int, int, int], str, int]  # (layout, collective, message size)
PointKey = tuple[tuple[int, int, int], str, int, str]  # ... and the algorithm


@dataclass(frozen=True)
class PointCosts:
    """What a run of one point costs: its latency and iterations (None: not known), where they came from;
    per algorithm, each point's runs (`runs_us`) and the points whose every run failed (`failed`): what the
    strategy's replay measures."""

    latency_us: Mapping[Key, float] = field(default_factory=dict)
    iterations: Mapping[Key, int] = field(default_factory=dict)
    source: str = "none"
    runs_us: Mapping[PointKey, tuple[float, ...]] = field(default_factory=dict)
    failed: frozenset[PointKey] = frozenset()
    #: The points a run of killed the engine (died, or timed out): each cost the tune a relaunch.
    kills: frozenset[PointKey] = frozenset()
    engine_start_s: float = ENGINE_START_S
    #: per layout, what a launch of the library took there (start + close, the median the store recorded:
    #: store/launches.py); where given, a launch's price (`start_s`)
    launch_s: Mapping[Layout, float] = field(default_factory=dict)
    point_overhead_s: float = POINT_OVERHEAD_S
    #: What a run took on the tuner's side (the store's `run_s`: request to reply, retries included), the mean
    #: per point over the exploring launches' runs, and per cell over the deciding blocks' (launches under
    #: files, each point among others of the default or one contender): where recorded, a run's price
    #: (`seconds`), else `run_s`'s model.
    run_seconds: Mapping[PointKey, float] = field(default_factory=dict)
    deciding_seconds: Mapping[Key, float] = field(default_factory=dict)
    #: per point whose runs failed, what such a run took where recorded (an engine's death is seen after a
    #: while: 0.54 s at MPICH's smp allreduce here, against 2 ms for a run that returns)
    failed_seconds: Mapping[PointKey, float] = field(default_factory=dict)
    #: what the strategy's asks took in earlier tunes (store/fits.py): where given, the replay's model seconds
    #: (`fit_s`) instead of its own fits timed on the planning machine
    fits: tuple[FitTiming, ...] = ()

    def fit_s(self, points: int, records: int) -> float | None:
        """A strategy's ask with `records` told, over a space of `points`, as the recorded asks took: the median
        of the FIT_NEIGHBOURS recorded nearest in log2 points and log2 records (those of the initial design,
        0 records, for an initial design; the earliest recorded first among equals); None where none were."""
        alike = [fit for fit in self.fits if (fit.records == 0) == (records == 0)]
        if not alike:
            return None

        def distance(fit: FitTiming) -> float:
            return (abs(math.log2(fit.points) - math.log2(max(points, 1)))
                    + abs(math.log2(fit.records + 1) - math.log2(records + 1)))
        order = sorted(range(len(alike)), key=lambda i: (distance(alike[i]), i))
        return statistics.median(alike[i].fit_s for i in order[:FIT_NEIGHBOURS])

    def start_s(self, layout: Layout) -> float:
        """An engine launch at `layout` (start and close): what the library's launches took there, else at the
        nearest layout recorded (log2 ranks and nodes) plus ENGINE_START_PER_NODE_S per node beyond its, else
        `engine_start_s` plus ENGINE_START_PER_NODE_S per node beyond one."""
        if layout in self.launch_s:
            return self.launch_s[layout]
        if self.launch_s:
            near = min(self.launch_s, key=lambda lay: (abs(math.log2(lay[0]) - math.log2(layout[0]))
                                                       + abs(math.log2(lay[1]) - math.log2(layout[1])), lay))
            return self.launch_s[near] + ENGINE_START_PER_NODE_S * max(0, layout[1] - near[1])
        return self.engine_start_s + ENGINE_START_PER_NODE_S * (layout[1] - 1)

    def killed(self, cell: Cell, algorithm: str) -> bool:
        """Whether a stored run of the point killed the engine."""
        return (cell.scale, cell.collective, cell.msg_bytes, algorithm) in self.kills

    def failed_run_s(self, cell: Cell, algorithm: str) -> float:
        """A failed run's seconds: the recorded ones of that point, else the per-run overhead; and a relaunch
        where such a run killed the engine (counted in the layout's launches, `explored_by_layout`)."""
        return (self.failed_seconds.get((cell.scale, cell.collective, cell.msg_bytes, algorithm),
                                        self.point_overhead_s)
                + (self.start_s(cell.scale) if self.killed(cell, algorithm) else 0.0))

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

    @functools.cached_property
    def _seconds_by_size(self) -> dict[tuple[Layout, str], dict[int, float]]:
        """(layout, collective) -> message size -> the mean recorded run seconds there, over its algorithms."""
        runs: dict[tuple[Layout, str], dict[int, list[float]]] = {}
        for (layout, collective, size, _), seconds in self.run_seconds.items():
            runs.setdefault((layout, collective), {}).setdefault(size, []).append(seconds)
        return {key: {size: statistics.fmean(values) for size, values in sizes.items()} for key, sizes in runs.items()}

    @functools.cached_property
    def _deciding_by_size(self) -> dict[tuple[Layout, str], dict[int, float]]:
        """(layout, collective) -> message size -> the deciding blocks' mean recorded run seconds there."""
        by: dict[tuple[Layout, str], dict[int, float]] = {}
        for (layout, collective, size), seconds in self.deciding_seconds.items():
            by.setdefault((layout, collective), {})[size] = seconds
        return by

    def seconds(self, cell: Cell, algorithm: str | None = None, *, deciding: bool = False) -> float | None:
        """A run's recorded seconds at the cell's layout: the algorithm's own at the cell's size where given and
        recorded, else the mean over algorithms at the nearest size recorded (log2); `deciding`: a deciding
        block's run, from those recorded (else as an exploring one); None where the layout's runs of this
        collective were never timed (a dataset, a store from before run_s was recorded)."""
        layout = (cell.ranks, cell.nodes, cell.ppn)
        if deciding and (sizes := self._deciding_by_size.get((layout, cell.collective))):
            return sizes[nearest_size(sizes, cell.msg_bytes)]
        if algorithm is not None and (own := self.run_seconds.get((layout, cell.collective, cell.msg_bytes,
                                                                     algorithm))) is not None:
            return own
        sizes = self._seconds_by_size.get((layout, cell.collective))
        return sizes[nearest_size(sizes, cell.msg_bytes)] if sizes else None


def nearest_size(sizes: Iterable[int], msg_bytes: int) -> int:
    """The size nearest `msg_bytes` on a log2 scale, the smaller of two as near."""
    return min(sizes, key=lambda s: (abs(math.log2(max(s, 1)) - math.log2(max(msg_bytes, 1))), s))


def unknown_latency_us(msg_bytes: int) -> float:
    return UNKNOWN_LATENCY_US + msg_bytes / UNKNOWN_BYTES_PER_US


def run_s(latency_us: float, iterations: int | None, settings: MeasureSettings,
          overhead_s: float = POINT_OVERHEAD_S) -> float:
    """One run's wall time: the warm-up (it ends once it took WARMUP_SHARE of the time cap), the measured
    iterations (the store's count where known, else TYPICAL_ITERATIONS stopped at the time cap; never fewer
    than min_iters), plus the per-run overhead."""
    latency_s = latency_us * 1e-6
    warm = min(settings.warmup * latency_s, max(WARMUP_SHARE * settings.time_cap_s, 2 * latency_s))
    if iterations is not None:  # what it ran, stopped at the time cap (a slower algorithm than the store's median)
        measured = min(iterations * latency_s, settings.time_cap_s)
    else:
        measured = min(min(TYPICAL_ITERATIONS, settings.max_iters) * latency_s, settings.time_cap_s)
    return warm + max(measured, settings.min_iters * latency_s) + overhead_s


@dataclass(frozen=True)
class Prediction:
    """What a tune will take (predicted) or took (actual): wall seconds, engine launches, runs; a prediction's
    `state_s`: the seconds beyond `wall_s` the deciding blocks for the machine's state can add at most (0 where
    tune adds none: fewer than 3 launches; an actual's is 0)."""

    wall_s: float
    launches: int
    runs: int
    state_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"wall_s": round(self.wall_s, 3), "launches": self.launches, "runs": self.runs}
        if self.state_s:
            data["state_s"] = round(self.state_s, 3)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Prediction:
        return cls(float(data["wall_s"]), int(data["launches"]), int(data["runs"]), float(data.get("state_s", 0.0)))


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


def cell_run_s(cell: Cell, costs: PointCosts, settings: MeasureSettings, *, deciding: bool = False) -> float:
    """One run of the cell (of a deciding block: `deciding`): what such runs took where the costs recorded it
    (`PointCosts.seconds`), else `run_s` from its latency."""
    recorded = costs.seconds(cell, deciding=deciding)
    if recorded is not None:
        return recorded
    latency, iterations = costs.nearest(cell)
    return run_s(latency if latency is not None else unknown_latency_us(cell.msg_bytes), iterations, settings,
                 costs.point_overhead_s)


Measure = Callable[[Sequence[Request]], list[MeasurementRecord]]
Layout = tuple[int, int, int]


@dataclass(frozen=True)
class Exploration:
    """A replayed exploration: each collective's strategy (its `records` what it measured) and the seconds of
    model work its rounds were priced at."""

    strategies: Mapping[str, Strategy]
    model_s: float
    #: per layout, the engine launches its exploring phase made beyond the first (`SessionCache`: where each
    #: algorithm of a collective is forced per launch)
    extra_launches: Mapping[Layout, int] = field(default_factory=dict)


def replay_exploration(spaces: Mapping[str, FeatureSpace], measure: Mapping[str, Measure], *, strategy: str,
                       params: Mapping[str, object], seed: int,
                       model_s_per_round: float | None = MODEL_S_PER_ROUND,
                       clock: Callable[[], float] = time.perf_counter,
                       launch_per_algorithm: Collection[str] = frozenset(),
                       start_s: Callable[[Layout], float] = lambda layout: 0.0,
                       fit_s: Callable[[int, int], float | None] | None = None,
                       guard: bool = True) -> Exploration:
    """Tune's exploring phase without an engine: a strategy per collective (as tune/driver.py makes them) asked
    and told in rounds, `measure` answering, until they all stop or tune's guard would end the tune (another
    round would cost more than the exhaustive sweep: tune/guard.py, the rest measured where that is cheaper),
    then tune's confirmation round (driver.confirmation_requests_of, up to CONFIRM_PASSES: the default and the
    choice of every cell an override would need them in). A round's time is its runs' `cost_s` plus its model
    work: with `model_s_per_round` None the strategies' fits as earlier tunes recorded them (`fit_s`, from a
    space's points and the records told, where it knows them all: `PointCosts.fit_s`), else as `clock` times them
    here (tune's guard reads its clock too: where points are cheap, how long a fit takes decides whether the
    guard stops the exploration or measures the rest); else `model_s_per_round` after the first round. `launch_per_algorithm`: the collectives
    whose algorithms the library takes only at MPI_Init (Intel MPI's, each forced in its own launch): each
    round's launches counted as tune's runner makes them (`SessionCache`), each one's `start_s` added to the
    cost of the first run it measured (`launches` 1: tune's guard prices points that way). `guard` False: the
    strategies explore until they stop, as tune without its guard (TuneOptions.exhaustive_guard)."""
    import_strategies(strategy)
    strategies = {c: make_strategy(strategy, space, seed=seed, **params) for c, space in spaces.items()}
    sessions: dict[Layout, SessionCache] = {}

    def session_key(collective: str, algorithm: str) -> tuple[str, str]:
        return (collective, algorithm) if collective in launch_per_algorithm else ("", "")

    def measure_round(requests: Mapping[str, Sequence[Request]]) -> float:
        measured = {collective: measure[collective](batch) for collective, batch in requests.items() if batch}
        runs = [(collective, i, record) for collective, records in measured.items() for i, record in enumerate(records)]
        keys: dict[Layout, list[tuple[str, str]]] = {}
        for collective, _, record in runs:
            keys.setdefault(record.cell.scale, []).append(session_key(collective, record.algorithm))
        started = {layout: {key for key in sessions.setdefault(layout, SessionCache()).round(round_keys) if key[0]}
                   for layout, round_keys in keys.items()}
        for collective, i, record in runs:  # a forced launch's start: its first run's cost, as in tune
            key, layout = session_key(collective, record.algorithm), record.cell.scale
            if key in started[layout]:
                started[layout].remove(key)
                measured[collective][i] = dataclasses.replace(record, cost_s=record.cost_s + start_s(layout),
                                                              launches=1)
        for collective, records in measured.items():
            strategies[collective].tell(records)
        return sum(record.cost_s for records in measured.values() for record in records)

    spent_s, model_total_s, rounds = 0.0, 0.0, 0
    while True:
        asking = {c: (spaces[c].points, len(s.records)) for c, s in strategies.items() if not s.finished}
        began = clock()
        requests = {c: strategies[c].ask() for c in asking}
        fitted_s = clock() - began
        if not any(requests.values()):
            break
        recorded = [fit_s(*asked) for asked in asking.values()] if fit_s is not None else [None]
        if all(seconds is not None for seconds in recorded):
            fitted_s = sum(seconds for seconds in recorded if seconds is not None)
        # the first asks are the initial design: no model fitted yet
        model_s = fitted_s if model_s_per_round is None else model_s_per_round if rounds else 0.0
        round_s = model_s + measure_round(requests)
        model_total_s += model_s
        rounds += 1
        spent_s += round_s
        estimate = estimate_exhaustive(strategies)
        decision = estimate.decide(spent_s, round_s) if guard and estimate is not None else CONTINUE
        if decision == CONTINUE:
            continue
        if decision == MEASURE_THE_REST and estimate is not None:
            measure_round(estimate.remaining)
        break
    for _ in range(CONFIRM_PASSES):
        missing = {c: confirmation_requests_of(s, DEFAULT_MARGIN) for c, s in strategies.items()}
        if not any(missing.values()):
            break
        measure_round(missing)
    return Exploration(strategies, model_total_s,
                       {layout: max(0, cache.launches - 1) for layout, cache in sessions.items()})


class SessionCache:
    """The engine sessions of one layout as tune/runner.py's LayoutRunner keeps them: one per forced environment
    (a collective and algorithm the library takes only at MPI_Init; ("", "") for every run switched at run
    time), at most MAX_SESSIONS open, the least recently used closed first; a round's points grouped by session
    (the open ones first) where they do not all fit, so each forced launch is made once per round. `launches`:
    the sessions it started."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.open: dict[tuple[str, str], None] = {}  # most recently used last
        self.max_sessions = max_sessions
        self.launches = 0

    def round(self, keys: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """The sessions a round's points (one key each, in their order) start, in the order they start them."""
        if len(set(keys) | set(self.open)) > self.max_sessions:  # LayoutRunner.in_launch_order
            first = {key: (key not in self.open, i) for i, key in reversed(list(enumerate(keys)))}
            keys = sorted(keys, key=lambda key: first[key])
        started = []
        for key in keys:
            if key in self.open:
                del self.open[key]
            else:
                while len(self.open) >= self.max_sessions:
                    del self.open[next(iter(self.open))]
                started.append(key)
            self.open[key] = None
        self.launches += len(started)
        return started


def point_runs(space: FeatureSpace, costs: PointCosts) -> dict[tuple[Cell, str], tuple[float, ...]] | None:
    """Every usable point's runs for the replay: the point's own, else that algorithm's at the nearest message
    size recorded at the cell's layout (none where its runs failed there: it fails in the replay too); None
    where an algorithm was never recorded at a cell's layout (the plan then takes EXPLORE_RUNS_PER_POINT)."""
    sizes: dict[tuple[Layout, str], list[int]] = {}
    for layout, collective, size, algorithm in [*costs.runs_us, *costs.failed]:
        if collective == space.collective:
            sizes.setdefault((layout, algorithm), []).append(size)
    table: dict[tuple[Cell, str], tuple[float, ...]] = {}
    for cell in space.cells:
        for algorithm in space.candidates(cell):
            recorded = sizes.get((cell.scale, algorithm))
            if not recorded:
                return None
            size = nearest_size(recorded, cell.msg_bytes)
            runs = costs.runs_us.get((cell.scale, space.collective, size, algorithm))
            if runs:
                table[(cell, algorithm)] = runs
    return table


def replayable(spaces: Mapping[str, FeatureSpace],
               costs: PointCosts) -> dict[str, dict[tuple[Cell, str], tuple[float, ...]]]:
    """The collectives whose every point has runs in `costs` (`point_runs`), with them: what the plan replays."""
    tables = {collective: point_runs(space, costs) for collective, space in spaces.items()}
    return {c: table for c, table in tables.items()
            if table and any(algorithm != DEFAULT_ALGORITHM for _, algorithm in table)}


def priced_runs(backend: ReplayBackend, costs: PointCosts, settings: MeasureSettings,
                requests: Sequence[Request]) -> list[MeasurementRecord]:
    """The replay's runs with the plan's cost of each; a failed run costs what such runs took
    (`PointCosts.failed_run_s`) and, where it killed the engine, a relaunch (as in tune, where those relaunches
    make the guard's exhaustive sweep dear)."""
    def cost_s(record: MeasurementRecord) -> float:
        if not (record.ok and record.latency_us is not None):
            return costs.failed_run_s(record.cell, record.algorithm)
        recorded = costs.seconds(record.cell, record.algorithm)
        if recorded is not None:
            return recorded
        return run_s(record.latency_us, costs.nearest(record.cell)[1], settings, costs.point_overhead_s)

    # launches 0: the plan counts them per layout (a forced launch's start is added by replay_exploration)
    return [dataclasses.replace(r, cost_s=cost_s(r), launches=0) for r in backend.measure(requests)]


@dataclass(frozen=True)
class Replayed:
    """What the replays say: per collective and layout the exploring runs and their seconds (means over the
    seeds), and per cell the algorithms a deciding block measures (`replayed_contenders`, a mean: 0 where tune
    would contest nothing)."""

    explored: Mapping[str, Mapping[Layout, tuple[float, float]]]
    contenders: Mapping[Cell, float]
    #: per collective and layout, the most algorithms a cell there contests (a mean): a deciding block's
    #: launches under files (file_launches.FileDecider.sides)
    widest: Mapping[tuple[str, Layout], float] = field(default_factory=dict)
    #: the model's seconds in the exploring rounds (a mean; `replay_exploration`)
    model_s: float = 0.0
    #: per layout, the exploring launches beyond the first (a mean; `Exploration.extra_launches`)
    extra_launches: Mapping[Layout, float] = field(default_factory=dict)


def replayed_exploration(spaces: Mapping[str, FeatureSpace], costs: PointCosts, settings: MeasureSettings, *,
                         strategy: str, params: Mapping[str, object],
                         seed: int = 0, model_s_per_round: float | None = MODEL_S_PER_ROUND,
                         launch_per_algorithm: Collection[str] = frozenset(), guard: bool = True) -> Replayed:
    """The exploring runs and their seconds per layout, of each collective whose every point has runs in
    `costs` (`replayable`), by replaying tune's strategy on those runs (`replay_exploration`: the runs drawn in
    a seeded order, a run's seconds its recorded ones or the plan's `run_s` at its latency), their mean over REPLAY_SEEDS replays from
    `seed` (a seed can tip tune's guard into measuring every cheap point left: Peak's allreduce, 133 runs at
    one seed, 53 at two others; so can the machine tip a tune), the contenders of the deciding blocks after
    them and the model's seconds; the other collectives are left out."""
    import pandas as pd  # here, not at the top: pandas is the CLI start's largest import

    from tunempi.sim.replay import ReplayBackend

    tables = replayable(spaces, costs)
    if not tables:
        return Replayed({}, {})
    frames = {collective: pd.DataFrame(
        [(collective, algorithm, cell.ranks, cell.nodes, cell.ppn, cell.msg_bytes, i, latency)
         for (cell, algorithm), runs in table.items() for i, latency in enumerate(runs)],
        columns=["collective", "algorithm", "ranks", "nodes", "ppn", "msg_bytes", "run", "latency_us"])
        for collective, table in tables.items()}
    replays = []
    for replay_seed in range(seed, seed + REPLAY_SEEDS):
        measure: dict[str, Measure] = {
            collective: functools.partial(priced_runs, ReplayBackend(
                frame, collective, seed=replay_seed, cost_model=CostModel(launch_per="layout"), measure_default=True),
                costs, settings)
            for collective, frame in frames.items()}
        replays.append(replay_exploration({c: spaces[c] for c in tables}, measure, strategy=strategy, params=params,
                                          seed=replay_seed, model_s_per_round=model_s_per_round,
                                          launch_per_algorithm=launch_per_algorithm, start_s=costs.start_s,
                                          fit_s=costs.fit_s if costs.fits else None, guard=guard))
    mean: dict[str, dict[Layout, tuple[float, float]]] = {}
    contested: dict[Cell, float] = {}
    widest: dict[tuple[str, Layout], float] = {}
    extra: dict[Layout, float] = {}
    for replayed in replays:
        for layout, count in replayed.extra_launches.items():
            extra[layout] = extra.get(layout, 0.0) + count / len(replays)
        seed_widest: dict[tuple[str, Layout], int] = {}
        for cell, count in replayed_contenders(replayed.strategies).items():
            contested[cell] = contested.get(cell, 0.0) + count / len(replays)
            key = (cell.collective, cell.scale)
            seed_widest[key] = max(seed_widest.get(key, 0), count)
        for key, count in seed_widest.items():
            widest[key] = widest.get(key, 0.0) + count / len(replays)
        for collective, strategy_run in replayed.strategies.items():
            layouts = mean.setdefault(collective, {})
            for layout, (runs, seconds) in explored_by_layout(strategy_run.records, costs).items():
                total_runs, total_s = layouts.get(layout, (0.0, 0.0))
                layouts[layout] = (total_runs + runs / len(replays), total_s + seconds / len(replays))
    return Replayed(mean, contested, widest, statistics.fmean(r.model_s for r in replays), extra)


def replayed_contenders(strategies: Mapping[str, Strategy]) -> dict[Cell, int]:
    """The algorithms each deciding block measures in every cell after a replay (its confirmation round
    included), as tune/driver.py picks them (launch_blocks.contenders: the default and the choice, a third where
    two beat the default; none in a cell where the default or every other algorithm went unmeasured: tune
    contests no such cell)."""
    counts: dict[Cell, int] = {}
    for strategy_run in strategies.values():
        chosen = contenders(strategy_run, prefer_default(strategy_run, strategy_run.select(), DEFAULT_MARGIN),
                            DEFAULT_MARGIN)
        counts.update({cell: len(chosen.get(cell, ())) for cell in strategy_run.space.cells})
    return counts


def explored_by_layout(records: Iterable[MeasurementRecord], costs: PointCosts) -> dict[Layout, tuple[int, float]]:
    """The replay's runs and their seconds per layout (priced by `priced_runs`), less the relaunches after the
    runs that killed the engine and the forced launches' starts: those are the layout's launches
    (`PointCosts.kills`, `Exploration.extra_launches`), counted there."""
    layouts: dict[Layout, tuple[int, float]] = {}
    for record in records:
        runs, seconds = layouts.get(record.cell.scale, (0, 0.0))
        killed = not record.ok and costs.killed(record.cell, record.algorithm)
        relaunch = costs.start_s(record.cell.scale) * (int(killed) + record.launches)
        layouts[record.cell.scale] = (runs + 1, seconds + record.cost_s - relaunch)
    return layouts


def predict(spaces: Mapping[str, FeatureSpace], settings: MeasureSettings, costs: PointCosts, *,
            launches: int, allocation_nodes: int = 1, serial: bool = True, strategy: str | None = None,
            strategy_params: Mapping[str, object] | None = None, seed: int = 0,
            under_files: Collection[str] = frozenset(), cores: int | None = None, emulated: bool = False,
            model_s_per_round: float | None = MODEL_S_PER_ROUND,
            launch_per_algorithm: Collection[str] = frozenset(), guard: bool = True) -> Prediction:
    """The tune's wall time, launches and runs for these spaces (the model in the module's docstring); with
    `strategy`, the exploring runs of a collective whose every point the costs have come from its replay.
    `under_files`: the collectives whose deciding blocks launch under files (file_launches.decided_under_files:
    file_launches.RUNS_PER_LAUNCH runs of each contender per cell and block), the rest switched at run time (one
    run each). `cores` (None: this machine's) and `emulated` (the nodes emulated on this machine): where a
    layout's ranks take turns on the cores (machine_state.ranks_sharing_cores) the tune adds deciding blocks up
    to TURNS_BLOCKS and none for the machine's state (its probe reads the turns). `model_s_per_round`,
    `launch_per_algorithm` and `guard`: as `replay_exploration` takes them (None: the fits as the costs recorded
    them, else timed, as `tune --plan` has them; the collectives the library takes only at MPI_Init, each
    algorithm forced in its own launch; tune's guard on or off)."""
    # imported here: file_launches imports the manifest, which imports this module
    from tunempi.tune.file_launches import RUNS_PER_LAUNCH

    replay = replayed_exploration(spaces, costs, settings, strategy=strategy, params=strategy_params or {},
                                  seed=seed, model_s_per_round=model_s_per_round,
                                  launch_per_algorithm=launch_per_algorithm, guard=guard) if strategy else Replayed({}, {})
    replayed = replay.explored
    all_replayed_runs = sum(runs for by_layout in replayed.values() for runs, _ in by_layout.values())
    per_layout: dict[Layout, list[tuple[Cell, int]]] = {}
    for space in spaces.values():
        for cell in space.cells:
            per_layout.setdefault((cell.ranks, cell.nodes, cell.ppn), []).append((cell, len(space.algorithms)))
    total_runs = total_launches = 0
    layout_s: list[tuple[int, float]] = []
    state_block_s = 0.0  # one more deciding block of every layout: what the machine's state adds per pause
    for layout, cells in sorted(per_layout.items()):
        nodes = layout[1]
        turns = layout_takes_turns(layout[0], layout[2], emulated, cores)
        blocks = deciding_blocks(launches, turns)
        explored = [by_layout.get(layout, (0, 0.0)) for by_layout in replayed.values()]
        constant = EXPLORE_RUNS_PER_POINT * sum(algorithms for cell, algorithms in cells
                                                if cell.collective not in replayed)
        exploring = constant + sum(runs for runs, _ in explored)
        deciding = blocks * sum((RUNS_PER_LAUNCH if cell.collective in under_files else 1)
                                * replay.contenders.get(cell, CONTENDERS) for cell, _ in cells)
        runs = exploring + deciding
        cell_s = sum(cell_run_s(cell, costs, settings) for cell, _ in cells) / len(cells)
        deciding_s = sum(cell_run_s(cell, costs, settings, deciding=True) for cell, _ in cells) / len(cells)
        # a collective forced per launch and not replayed: each of its algorithms launched once at least
        forced = sum(len(spaces[c].algorithms) for c in {cell.collective for cell, _ in cells}
                     if c in launch_per_algorithm and c not in replayed)
        replayed_here = any(runs for runs, _ in explored)
        layout_launches = round(1 + replay.extra_launches.get(layout, 0.0) + max(0, forced - (0 if replayed_here else 1))
                                + sum(1 for kill in costs.kills if kill[0] == layout and kill[1] in spaces)
                                + blocks * block_launches(layout, {cell.collective for cell, _ in cells}, replay,
                                                          under_files))
        # the model: the replay's (shared by its layouts as their runs), else MODEL_S_PER_ROUND per ROUND_RUNS runs
        replayed_runs = sum(runs for runs, _ in explored)
        model_s = (replay.model_s * replayed_runs / all_replayed_runs if replayed_runs else 0.0) \
            + math.ceil(constant / ROUND_RUNS) * MODEL_S_PER_ROUND
        start_s = costs.start_s(layout)
        seconds = (layout_launches * start_s + constant * cell_s + deciding * deciding_s + sum(s for _, s in explored)
                   + model_s + blocks * DECIDING_BLOCK_S)
        layout_s.append((nodes, seconds))
        total_runs += round(runs)
        total_launches += layout_launches
        if blocks and not turns:
            block_runs = deciding / blocks
            state_block_s += (block_launches(layout, {cell.collective for cell, _ in cells}, replay, under_files)
                              * start_s + block_runs * deciding_s + DECIDING_BLOCK_S)
    # tune/driver.py adds state blocks (pause, block) until STATE_WAIT_S has passed, only with > 2 launches and
    # where the layout's probe is read (its ranks do not take turns)
    state_s = STATE_WAIT_S + STATE_PAUSE_S + state_block_s if launches > 2 and state_block_s else 0.0
    return Prediction(concurrent_wall(layout_s, allocation_nodes, serial), total_launches, total_runs, state_s)


def compositions_s(launches: Mapping[str, int], cells: Sequence[Cell], costs: PointCosts,
                   settings: MeasureSettings) -> float:
    """tune's compositions step (tune/job.py `tune_compositions`): per collective `launches[collective]` fresh
    engines at the largest multi-node layout (the default's and one per composition), each measuring that
    collective's `cells` (the composition sizes) once: each launch's start and its runs, priced as a deciding
    block's (fresh launches too). (Before, a constant 1.2 s: 0.4 s of it at 2x1 here, 1.6-2.0 s at 2x2.)"""
    if not cells:
        return 0.0
    start_s = costs.start_s(cells[0].scale)
    return sum(count * (start_s + sum(cell_run_s(cell, costs, settings, deciding=True)
                                      for cell in cells if cell.collective == collective))
               for collective, count in launches.items())


def block_launches(layout: Layout, collectives: Iterable[str], replay: Replayed, under_files: Collection[str]) -> float:
    """One deciding block's launches at `layout` (tune/driver.py `_decide_across_launches`): under files, one
    without a file and one per contender rank, as many as the widest cell's contenders (FileDecider.sides;
    the replay's, else CONTENDERS); one fresh switched launch where a collective is not decided under files."""
    collectives = set(collectives)
    files = [replay.widest.get((c, layout), CONTENDERS) for c in collectives if c in under_files]
    return max(files, default=0.0) + (1.0 if collectives - set(under_files) else 0.0)


def costs_from_measurements(rows: Iterable[Any], source: str) -> PointCosts:
    """PointCosts from stored runs or dataset rows (anything with collective, ranks, nodes, ppn, msg_bytes and
    a latency: `mean_us`/`median_us` or `latency_us`; `iterations` where recorded): the median per key."""
    latencies: dict[Key, list[float]] = {}
    iterations: dict[Key, list[int]] = {}
    runs: dict[PointKey, list[float]] = {}
    later: dict[PointKey, list[float]] = {}  # the deciding blocks' runs: replayed only where a point has no other
    seconds: dict[PointKey, list[float]] = {}
    deciding: dict[Key, list[float]] = {}
    failed: set[PointKey] = set()
    failed_seconds: dict[PointKey, list[float]] = {}
    kills: set[PointKey] = set()
    for row in rows:
        latency = getattr(row, "mean_us", None) or getattr(row, "latency_us", None)
        key = ((int(row.ranks), int(row.nodes), int(row.ppn)), str(row.collective), int(row.msg_bytes))
        point = (*key, str(row.algorithm))
        status = getattr(row, "status", "ok")
        if killed_the_engine(status, str(getattr(row, "reason", ""))):
            kills.add(point)
        if status != "ok" or not latency:
            failed.add(point)
            if getattr(row, "run_s", None):  # a death is detected after a while: what the tune waited for it
                failed_seconds.setdefault(point, []).append(float(row.run_s))
            continue
        latencies.setdefault(key, []).append(float(latency))
        if getattr(row, "iterations", None):
            iterations.setdefault(key, []).append(int(row.iterations))
        # tune's exploring launch switches algorithms at run time, its deciding blocks launch under files: the
        # gaps they see differ (docs/measurements/tune.md), and the replay is of the exploration
        in_deciding_block = (getattr(row, "launch_block", None) or 1) > 1
        (later if in_deciding_block else runs).setdefault(point, []).append(float(latency))
        if getattr(row, "run_s", None):
            if in_deciding_block:
                deciding.setdefault(key, []).append(float(row.run_s))
            else:
                seconds.setdefault(point, []).append(float(row.run_s))
    for point, values in later.items():
        runs.setdefault(point, values)
    return PointCosts({k: statistics.median(v) for k, v in latencies.items()},
                      {k: round(statistics.median([float(i) for i in v])) for k, v in iterations.items()}, source,
                      runs_us={k: tuple(v) for k, v in runs.items()}, failed=frozenset(failed - set(runs)),
                      kills=frozenset(kills), run_seconds={k: statistics.fmean(v) for k, v in seconds.items()},
                      deciding_seconds={k: statistics.fmean(v) for k, v in deciding.items()},
                      failed_seconds={k: statistics.fmean(v) for k, v in failed_seconds.items()})
