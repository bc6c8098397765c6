"""The tuning loop: strategies ask, the engine measures, the store keeps, the strategies learn.

One strategy per collective (strategies see one collective's FeatureSpace). Every round asks each
unfinished strategy for its next batch, measures all batches together (grouped by layout, through the
ParallelRunner), writes every result to the store as it arrives, and tells each strategy its records.
The loop ends when every strategy has stopped (converged), at the deadline (timeout), after a given
number of rounds (max_rounds), or on Ctrl-C (interrupted). Everything measured is in the store; a rerun
reads it back as the strategies' prior records (`records_from_store`) and goes on from there.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from tunempi.bench.engine import Layout, killed_the_engine
from tunempi.bench.sweep import BenchPoint
from tunempi.collectives import DEFAULT_ALGORITHM, DEFAULT_DISTRIBUTION, LATENCY_OBJECTIVE, objective_of
from tunempi.errors import TunempiError
from tunempi.space import Cell, FeatureSpace
from tunempi.store.fits import FitTiming
from tunempi.store.results import Measurement, ResultStore
from tunempi.strategy import MeasurementRecord, Request, Strategy, make_strategy
from tunempi.tune.guard import CONTINUE, MEASURE_THE_REST, estimate_exhaustive
from tunempi.tune.launch_blocks import (
    CellDecision,
    contenders,
    decide_cells,
    deciding_blocks,
    layouts_short_of_reference,
    layouts_taking_turns,
    reference_blocks,
)
from tunempi.tune.machine_state import STATE_PAUSE_S, STATE_WAIT_S
from tunempi.tune.objective import Figures
from tunempi.tune.runner import ParallelRunner, PointResult
from tunempi.units import format_size

#: "exhaustive-cost": another round would have made the tune cost more than an exhaustive sweep of the
#: space; the strategies stopped there, after the points never measured if those were cheaper than a round
#: (tune/guard.py).
STOP_REASONS: tuple[str, ...] = ("converged", "exhaustive-cost", "timeout", "max_rounds", "interrupted")
#: Stop reasons after which the strategies have said all they will: the confirmation round follows.
COMPLETE_STOPS: tuple[str, ...] = ("converged", "exhaustive-cost")
#: An algorithm replaces the library's own choice only where it is estimated this much faster (relative).
DEFAULT_MARGIN = 0.03
#: Confirmation rounds after the exploration at most (`_confirm`): a pair measured can change a cell's selection.
CONFIRM_PASSES = 3
#: Launches a cell's contenders are measured in before an override is written (tune/launch_blocks.py): the
#: exploring launch, then deciding blocks measured under files (tune/file_launches.py). Quiet, the demo's
#: space at 2 ranks: with 1 (the exploring launch, switched at run time, decides alone) verify sent back 13 of
#: 42 and 18 of 48 written cells (MPICH), 36 of 36 and 37 of 37 (Open MPI); with 3, 0 of 26, 0 of 27, 0 and 0
#: (MPICH), 0 and 1 of 1 (Open MPI), 1 of 1 and 5 of 5 at 2+4 ranks; tunes of 5-7 s instead of 2-4
#: (docs/measurements/tune.md, "Deciding under files"). With 4 (three deciding blocks), four demos sent back
#: 2 of 252 tuned cells against 9 of 211 with 3, the held-out figures as high ("A demo where every rank has
#: a core").
DEFAULT_LAUNCHES = 4


def distribution_of(collective: str, distributions: Mapping[str, str] | None) -> str:
    """How tune measures `collective`'s blocks across ranks (collectives.DISTRIBUTIONS; uniform by default)."""
    return (distributions or {}).get(collective, DEFAULT_DISTRIBUTION)


def cell_of(measurement: Measurement) -> Cell:
    return Cell(measurement.collective, measurement.ranks, measurement.nodes, measurement.ppn,
                measurement.msg_bytes)


def layout_of(cell: Cell) -> Layout:
    return Layout(ranks=cell.ranks, nodes=cell.nodes, ppn=cell.ppn if cell.nodes > 1 else None)


def record_of(measurement: Measurement, *, cost_s: float = 0.0, launches: int = 0) -> MeasurementRecord:
    """A stored measurement as a strategy sees it. The latency is the MEDIAN of the run's iterations: on
    shared, noisy machines it is the robust statistic (the mean follows outliers); a run with wrong results
    counts as failed."""
    good = measurement.ok and not measurement.errors and measurement.median_us is not None
    return MeasurementRecord(
        cell=cell_of(measurement), algorithm=measurement.algorithm,
        latency_us=measurement.median_us if good else None,
        min_us=measurement.min_us if good else None, max_us=measurement.p90_us if good else None,
        iterations=measurement.iterations or 0, launches=launches, cost_s=cost_s,
    )


def records_from_store(store: ResultStore, fingerprint: str, spaces: Mapping[str, FeatureSpace], *,
                       system: str = "", distributions: Mapping[str, str] | None = None,
                       objective: str = LATENCY_OBJECTIVE, compute_us: Mapping[Cell, float] | None = None,
                       ) -> tuple[dict[str, list[MeasurementRecord]], dict[tuple, int]]:
    """Earlier measurements of the spaces' collectives and algorithms (any run: tune's or bench's), and the
    next free run index per (collective, algorithm, ranks, nodes, ppn, msg_bytes). Only the points measured
    with the count distribution the tune measures (`distributions`: collective -> distribution, uniform
    where absent): a skewed alltoallv is another point than a uniform one of the same mean; and of a non-blocking
    collective only the points measured for `objective` (collectives.objective_of). Points at cells outside
    a space (other scales or sizes, earlier jobs of the same library on the same system) are included:
    the strategies train their models on them (warm start) without counting them as measured cells.
    `compute_us` (objective time: each cell's computation): a stored time point of such a cell measured with
    another computation (an earlier tune sized it otherwise, e.g. not from this profile) is left out, its run
    index still taken."""
    records: dict[str, list[MeasurementRecord]] = {c: [] for c in spaces}
    next_run: dict[tuple, int] = {}
    for collective, space in spaces.items():
        algorithms = set(space.algorithms)
        for measurement in store.iter_measurements(library_fingerprint=fingerprint, system=system,
                                                    collective=collective,
                                                    distribution=distribution_of(collective, distributions),
                                                    objective=objective_of(collective, objective)):
            cell = cell_of(measurement)
            if measurement.algorithm not in algorithms:
                continue
            records[collective].append(record_of(measurement))
            key = (collective, measurement.algorithm, *cell.scale, cell.msg_bytes)
            next_run[key] = max(next_run.get(key, 0), measurement.run + 1)
            if compute_us and cell in compute_us and measurement.compute_us is not None \
                    and abs(measurement.compute_us - compute_us[cell]) > 1e-3 * max(1.0, compute_us[cell]):
                records[collective].pop()  # measured on other work than this tune's
    return records, next_run


@dataclass(frozen=True)
class CurvePoint:
    """The state after one round: for the training curve of the report."""

    wall_s: float  # since the start of this tuning run
    bench_s: float  # benchmark time spent so far (sum of point wall times, launches included)
    points: int  # measured runs known to the strategies (earlier runs included)
    convergence: float  # mean of the strategies' convergence measures, in [0, 1]
    per_collective: Mapping[str, float] = field(default_factory=dict)


#: Failed runs whose reason a tune keeps (a library refusing one algorithm everywhere fails hundreds alike).
MAX_FAILURE_LINES = 200


def failure_line(result: PointResult) -> str:
    """Why one run failed, in one line: the point, the engine's status and reason (exit status and the library's
    own error lines), or the wrong results the engine's check counted."""
    point, outcome = result.point, result.outcome
    where = f"{point.collective} {point.algorithm} {format_size(point.msg_bytes)} at {result.layout.ranks} ranks"
    if outcome.ok:
        why = f"{result.measurement.errors} wrong results (the engine's check of what the call computed)"
    else:
        why = f"{outcome.status}: {outcome.reason or 'no reason given'}"
        if outcome.not_usable:
            why += " (the library refuses it for this call: not usable here)"
    return f"{where}{f' ({result.side})' if result.side else ''}: {why}"


@dataclass
class TuneOutcome:
    """What a tuning run produced."""

    selection: dict[Cell, str]
    strategies: dict[str, Strategy]
    curve: list[CurvePoint]
    stop_reason: str
    wall_s: float
    bench_s: float
    measured: int  # runs measured in this tuning run
    resumed: int  # runs read back from the store
    failed: int
    launches: int
    model_s: float = 0.0  # time the strategies spent choosing points and selecting (model fits)
    model_wait_s: float = 0.0  # part of it the loop waited for (the rest overlapped with measuring)
    #: Every contested cell, decided across launches (empty: no deciding launch was made).
    decisions: dict[Cell, CellDecision] = field(default_factory=dict)
    #: Deciding launches measured again because too few met the machine in its fastest state
    #: (tune/machine_state.py), and the time spent pausing for it.
    state_blocks: int = 0
    state_wait_s: float = 0.0
    #: Deciding launches added at layouts where ranks take turns on the cores (launch_blocks.TURNS_BLOCKS).
    turns_blocks: int = 0
    #: Deciding blocks made in all (the added ones included; 0: none made).
    deciding_blocks: int = 0
    #: Why runs failed, one line per failed run in order (at most MAX_FAILURE_LINES): what "N failed" counts.
    failures: tuple[str, ...] = ()

    def outcome_counts(self) -> dict[str, int]:
        """How many decided cells are tuned, ties (the default kept) or the default after all."""
        return dict(Counter(decision.outcome for decision in self.decisions.values()))

    def measured_medians(self) -> dict[tuple[Cell, str], float]:
        """(cell, algorithm) -> median over runs of each run's median latency (successful runs only)."""
        samples: dict[tuple[Cell, str], list[float]] = {}
        for strategy in self.strategies.values():
            for record in strategy.records:
                if record.ok:
                    samples.setdefault((record.cell, record.algorithm), []).append(float(record.latency_us or 0))
        return {key: float(np.median(values)) for key, values in samples.items()}

    def evidenced_cells(self) -> int:
        """Cells whose selection rests on measurements: the library's default measured there, and the
        selected algorithm too where it is not the default."""
        medians = self.measured_medians()
        return sum(1 for cell, algorithm in self.selection.items()
                   if (cell, DEFAULT_ALGORITHM) in medians and (cell, algorithm) in medians)


#: A tune stopped early (timeout, interrupt, max_rounds) whose selection rests on measurements in fewer
#: cells than this share writes nothing: the rest would be a model's guess from a handful of runs (seen: 3
#: runs measured of 120 points, a file written).
MIN_EVIDENCED_SHARE = 0.5
#: A converged tune left cells unmeasured on purpose (active learning measures where the model is unsure);
#: it still needs this share, so that "converged" on a model fitted to almost nothing cannot write files.
MIN_EVIDENCED_SHARE_CONVERGED = 0.1


class TooLittleMeasured(TunempiError):
    """The tuning run measured too little for its selection to be trusted; `outcome` is what it did measure."""

    def __init__(self, message: str, outcome: TuneOutcome) -> None:
        super().__init__(message)
        self.outcome = outcome


def check_evidence(outcome: TuneOutcome, cells: int) -> None:
    """TooLittleMeasured when too few of the `cells` have their selection measured: MIN_EVIDENCED_SHARE for
    a tune stopped early, MIN_EVIDENCED_SHARE_CONVERGED for one whose strategy converged."""
    evidenced = outcome.evidenced_cells()
    share = MIN_EVIDENCED_SHARE_CONVERGED if outcome.stop_reason in COMPLETE_STOPS else MIN_EVIDENCED_SHARE
    if cells and evidenced >= max(1.0, share * cells - 1e-9):  # 1e-9: 0.1 * 30 is 3.0000000000000004
        return
    raise TooLittleMeasured(
        f"measured too little to tune: only {evidenced} of {cells} cells have the library's default and the "
        f"selected algorithm measured ({outcome.measured} runs, {outcome.failed} failed, stopped: "
        f"{outcome.stop_reason}); no tuning file written. The measured runs are in the store: fix the "
        "failures above (or give more --timeout) and rerun to resume.",
        outcome,
    )


OnRound = Callable[[CurvePoint, int], None]  # (state, points measured in the round)
OnResult = Callable[[PointResult], None]


class UnderFiles(Protocol):
    """Deciding launches measured as the written files will make the library choose
    (tune/file_launches.FileDecider)."""

    def takes(self, collective: str) -> bool: ...

    def measure(self, contested: Mapping[Cell, Sequence[str]], block: int, on_point: OnResult,
                run_of: Callable[[Cell, str], int]) -> list[PointResult]: ...


class Tuner:
    """Drives one strategy per collective against the real engine (through a ParallelRunner)."""

    def __init__(
        self,
        spaces: Mapping[str, FeatureSpace],
        runner: ParallelRunner,
        *,
        strategy: str = "tunempi",
        seed: int = 0,
        store: ResultStore | None = None,
        fingerprint: str = "",
        system: str = "",
        strategy_params: Mapping[str, object] | None = None,
        default_margin: float = DEFAULT_MARGIN,
        lanes: int = 2,
        confirm: bool = True,
        exhaustive_guard: bool = True,
        launches: int = DEFAULT_LAUNCHES,
        under_files: UnderFiles | None = None,
        clock: Callable[[], float] = time.monotonic,
        fit_clock: Callable[[], float] = time.perf_counter,
        distributions: Mapping[str, str] | None = None,
        figures: Figures | None = None,
        sleep: Callable[[float], None] = time.sleep,
        state_wait_s: float = STATE_WAIT_S,
        state_pause_s: float = STATE_PAUSE_S,
        cores: int | None = None,
        emulated: bool = False,
    ) -> None:
        self.spaces = dict(spaces)
        # what a non-blocking collective's points measure (--objective) and, for time, each cell's computation
        self.figures = figures or Figures()
        # collective -> how its blocks differ between ranks (a vector collective's, from the profile): every
        # point of it is measured so, and only such points are read back from the store
        self.distributions = dict(distributions or {})
        # Where the time of model work and of the whole tune is read (the guard and the timeout decide on
        # it): injected by tests, so that no decision they check depends on how fast the machine is.
        self.clock = clock
        # What each ask of a strategy took (`fits`, stored for the next plan): its own clock, so that timing
        # the asks reads `clock` no more often than before (tests make `clock` move per reading).
        self.fit_clock = fit_clock
        self.sleep = sleep
        # how long the deciding launches wait, at most, for the machine's fastest state (tune/machine_state.py)
        self.state_wait_s, self.state_pause_s = state_wait_s, state_pause_s
        # the node's cores, against which a layout's ranks take turns (None: this process's CPUs), and whether
        # the nodes are emulated on this machine, every rank then on its cores (machine_state.ranks_sharing_cores)
        self.cores, self.emulated = cores, emulated
        self.n_lanes = lanes
        self.confirm = confirm
        self.exhaustive_guard = exhaustive_guard
        self.default_margin = default_margin
        # Launches every contested cell is decided from (1: the exploring launch's estimate alone, as before).
        self.launches = max(1, launches)
        self.under_files = under_files
        self.decisions: dict[Cell, CellDecision] = {}
        self.crash_limit = 2
        self.fail_limit = 3
        self._crashes: dict[tuple, int] = {}
        self._tally: dict[tuple, list] = {}  # (collective, algorithm, scale) -> [failed sizes, successes]
        self._blocked: set[tuple] = set()
        self.runner = runner
        self.strategy_name = strategy
        self.seed = seed
        self.store = store
        self.fingerprint = fingerprint
        self.system = system
        self.strategy_params = dict(strategy_params or {})
        self.next_run: dict[tuple, int] = {}
        resumed: dict[str, list[MeasurementRecord]] = {c: [] for c in spaces}
        if store is not None:
            resumed, self.next_run = records_from_store(store, fingerprint, self.spaces, system=system,
                                                            distributions=self.distributions,
                                                            objective=self.figures.objective,
                                                            compute_us=self.figures.compute_us)
        self.resumed = sum(1 for c, rs in resumed.items() for r in rs if r.cell in self.spaces[c])
        #: Earlier points at other scales or sizes, used as model context (warm start across jobs).
        self.context_points = sum(len(r) for r in resumed.values()) - self.resumed
        self.strategies: dict[str, Strategy] = {
            collective: make_strategy(strategy, space, seed=seed, records=resumed[collective], **self.strategy_params)
            for collective, space in self.spaces.items()
        }
        #: every strategy's asks, timed (`_think`; tune stores them for the next plan, tune/plan.py)
        self.fits: list[FitTiming] = []

    def confirmation_requests(self) -> dict[str, list[Request]]:
        """After convergence: each strategy's `confirmation_requests_of` (the pairs an override needs)."""
        requests: dict[str, list[Request]] = {}
        for collective, strategy in self.strategies.items():
            if missing := confirmation_requests_of(strategy, self.default_margin):
                requests[collective] = missing
        return requests

    def lanes(self) -> list[tuple[str, ...]]:
        """The collectives split into up to `n_lanes` groups that take turns on the engine (round robin):
        one lane is measured while the model thread fits the others (1: no overlap)."""
        collectives = list(self.strategies)
        count = max(1, min(self.n_lanes, len(collectives)))
        return [tuple(collectives[i::count]) for i in range(count)]

    def convergence(self) -> dict[str, float]:
        return {c: (1.0 if s.finished else float(s.convergence())) for c, s in self.strategies.items()}

    def _block_failing(self, collective: str, records: Sequence[MeasurementRecord],
                       crashed: Sequence[MeasurementRecord]) -> list[MeasurementRecord]:
        """An algorithm that cannot run at a scale is marked failed in every cell of that scale, so the
        strategy stops spending runs (and, for crashes, relaunches) on it: after `crash_limit` crashes of
        the whole job there, or after `fail_limit` failed cells there without a single success (e.g. Open
        MPI's two_proc algorithms on 4 ranks: MPI_ERR_UNSUPPORTED_OPERATION at every size). These records
        are knowledge (cost 0, not stored); a failure at some sizes only leaves the others alone."""
        for record in crashed:
            key = (collective, record.algorithm, record.cell.scale)
            self._crashes[key] = self._crashes.get(key, 0) + 1
        for record in records:
            key = (collective, record.algorithm, record.cell.scale)
            tally = self._tally.setdefault(key, [set(), 0])
            if record.ok:
                tally[1] += 1
            else:
                tally[0].add(record.cell.msg_bytes)
        blocked: list[MeasurementRecord] = []
        space = self.spaces[collective]
        for key, (failed_sizes, successes) in self._tally.items():
            coll, algorithm, scale = key
            hopeless = self._crashes.get(key, 0) >= self.crash_limit or (
                len(failed_sizes) >= self.fail_limit and successes == 0)
            if coll != collective or not hopeless or key in self._blocked:
                continue
            self._blocked.add(key)
            blocked += [MeasurementRecord(cell, algorithm, None, launches=0) for cell in space.cells
                        if cell.scale == scale]
        return blocked

    def plan(self, requests: Mapping[str, Sequence[Request]]) -> dict[Layout, list[BenchPoint]]:
        """Requests -> points per layout, every algorithm of a cell next to the others (compared within
        moments in the same launch), each with a fresh run index."""
        work: dict[Layout, list[BenchPoint]] = {}
        for collective in requests:
            for request in sorted(requests[collective], key=lambda r: (r.cell.scale, r.cell.msg_bytes)):
                cell = request.cell
                for _ in range(request.repeats):
                    for algorithm in request.algorithms:
                        work.setdefault(layout_of(cell), []).append(
                            self.figures.point(cell, algorithm, self._next_run(cell, algorithm),
                                               distribution_of(collective, self.distributions)))
        return work

    def run(self, *, timeout_s: float | None = None, on_round: OnRound | None = None,
            on_result: OnResult | None = None, max_rounds: int | None = None) -> TuneOutcome:
        """Tune until every strategy stops ('converged'), `timeout_s` passes ('timeout'), `max_rounds`
        rounds were measured ('max_rounds') or Ctrl-C ('interrupted': no selection; every point measured
        until then is in the store); or, with `exhaustive_guard`, when another round would have made the
        tune cost more than measuring every point once ('exhaustive-cost', tune/guard.py)."""
        started = self.clock()
        run = _Run(started, started + timeout_s if timeout_s is not None else None, self.clock, on_round,
                   on_result)
        run.curve.append(self._state(run))
        thinker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tunempi-model")
        try:
            stop_reason = self._explore(run, thinker, max_rounds)
            if stop_reason in COMPLETE_STOPS and self.confirm:
                thinker.shutdown(wait=True)
                self._confirm(run)
                if self.launches > 1:
                    self._decide_across_launches(run)
        except KeyboardInterrupt:
            stop_reason = "interrupted"
        finally:
            # No strategy may still be fitting when it is asked to select (or when the caller reads it).
            thinker.shutdown(wait=True, cancel_futures=True)
        selection = self._select(run) if stop_reason != "interrupted" else {}
        if run.curve[-1].bench_s != run.bench_s:
            run.curve.append(self._state(run))
        return TuneOutcome(
            selection=selection, strategies=self.strategies, curve=run.curve, stop_reason=stop_reason,
            wall_s=self.clock() - started, bench_s=run.bench_s, measured=run.measured, resumed=self.resumed,
            failed=run.failed, launches=self.runner.launches + run.file_launches, model_s=run.model_s, model_wait_s=run.wait_s,
            decisions=dict(self.decisions), state_blocks=run.state_blocks, state_wait_s=run.state_wait_s,
            turns_blocks=run.turns_blocks, deciding_blocks=run.block - 1, failures=tuple(run.failures),
        )

    def _explore(self, run: _Run, thinker: ThreadPoolExecutor, max_rounds: int | None) -> str:
        """The strategies' rounds until they all stop; returns the stop reason.

        Lanes take turns: while the engine measures one lane's batch, the model thread already fits the
        other lanes' strategies on their latest records (the loop waits on a lane's asks only if they are
        not ready yet). Every strategy still asks after it was told all of its own results.
        """
        lanes = self.lanes()
        asks: dict[int, Future[dict[str, list[Request]]]] = {
            i: thinker.submit(self._think, lane, run) for i, lane in enumerate(lanes)}
        done_lanes: set[int] = set()
        turn = 0
        while len(done_lanes) < len(lanes):
            if run.past_deadline():
                return "timeout"
            if max_rounds is not None and run.rounds >= max_rounds:
                return "max_rounds"
            lane = turn % len(lanes)
            turn += 1
            if lane in done_lanes:
                continue
            waited = self.clock()
            requests = {c: r for c, r in asks.pop(lane).result().items() if r}
            run.wait_s += self.clock() - waited
            if not requests:
                done_lanes.add(lane)
                continue
            self._measure_round(run, requests)
            run.rounds += 1
            if self.exhaustive_guard and self._end_at_exhaustive_cost(run, self.clock() - waited, asks):
                return "exhaustive-cost"
            asks[lane] = thinker.submit(self._think, lanes[lane], run)
        return "converged"

    def _end_at_exhaustive_cost(self, run: _Run, round_s: float, asks: Mapping[int, Future]) -> bool:
        """True (the tune ends) if another round as long as this one (`round_s`: waiting for the model, then
        measuring) would make it cost more than an exhaustive sweep of its spaces; the points never
        measured are measured first if that costs no more than the round would (tune/guard.py)."""
        estimate = estimate_exhaustive(self.strategies)
        if estimate is None:
            return False
        decision = estimate.decide(self.clock() - run.started, round_s)
        if decision == CONTINUE:
            return False
        if decision == MEASURE_THE_REST and not run.past_deadline():
            for ask in asks.values():  # no strategy may still be fitting while it is told the rest
                ask.result()
            self._measure_round(run, estimate.remaining)
            run.rounds += 1
        return True

    def _think(self, lane: Sequence[str], run: _Run) -> dict[str, list[Request]]:
        """The lane's next requests (runs in the model thread: the strategies fit their models), each strategy's
        ask timed on `fit_clock` into `fits` (store/fits.py: tune --plan replays the guard with them)."""
        began = self.clock()
        requests: dict[str, list[Request]] = {}
        try:
            for collective in lane:
                strategy = self.strategies[collective]
                if strategy.finished:
                    continue
                records, asked = len(strategy.records), self.fit_clock()
                requests[collective] = strategy.ask()
                self.fits.append(FitTiming(self.strategy_name, strategy.space.points, records,
                                           self.fit_clock() - asked))
            return requests
        finally:
            run.model_s += self.clock() - began

    def _confirm(self, run: _Run, passes: int = CONFIRM_PASSES) -> None:
        """After convergence: measure what confirmation_requests asks for, if there is time left. What it
        measures can change a cell's selection to another algorithm, which then needs its own pair: up to
        `passes` rounds."""
        for _ in range(passes):
            began = self.clock()
            requests = self.confirmation_requests()
            run.model_s += self.clock() - began
            run.wait_s += self.clock() - began
            if not requests or run.past_deadline():
                return
            self._measure_round(run, requests)

    def _decide_across_launches(self, run: _Run) -> None:
        """Measure the contenders of every measured cell (launch_blocks.contenders) in `launches` - 1 fresh
        launches, in a seeded random order inside each, then decide each such cell across its launches
        (tune/launch_blocks.py). With `under_files`, the collectives it takes are measured as the files will
        make the library choose (tune/file_launches.py: a launch without a file and one under a file per
        contender rank); the rest are switched at run time in one fresh launch per block. Stops starting
        launches at the deadline; the cells are decided on what was measured (a cell measured in one launch
        only is a tie)."""
        began = self.clock()
        contested = {collective: contenders(strategy, prefer_default(strategy, strategy.select(),
                                                                      self.default_margin), self.default_margin)
                     for collective, strategy in self.strategies.items()}
        run.model_s += self.clock() - began
        order = np.random.default_rng([self.seed, 28])
        by_file = {c for c, cells in contested.items()
                   if cells and self.under_files is not None and self.under_files.takes(c)}

        last_block_s = [0.0]  # the last deciding block's time: the next one's cost at least

        def deciding_block(only: set[tuple[int, int, int]] | None = None) -> bool:
            """One more deciding block (of the layouts `only`, else all); False when there is nothing to do."""
            def wanted(cell: Cell) -> bool:
                return only is None or (cell.ranks, cell.nodes, cell.ppn) in only

            requests = {c: [Request(cell, algorithms) for cell, algorithms in cells.items() if wanted(cell)]
                        for c, cells in contested.items() if cells and c not in by_file}
            requests = {c: r for c, r in requests.items() if r}
            files = {cell: algorithms for c in sorted(by_file) for cell, algorithms in contested[c].items()
                     if wanted(cell)}
            if not (requests or files) or run.past_deadline():
                return False
            # A block begun runs to its end (the launches under files are not cut at the deadline): begin
            # none that its time cannot hold (autotune's tune overran its share by a block, issue 58).
            points = sum(len(r.algorithms) for rs in requests.values() for r in rs) \
                + sum(len(algorithms) for algorithms in files.values())
            cost_s = max(last_block_s[0], points * run.bench_s / max(run.measured, 1))
            if run.deadline is not None and self.clock() + cost_s > run.deadline:
                return False
            block_began = self.clock()
            self.runner.relaunch()
            run.block += 1
            if requests:
                self._measure_round(run, requests, order=order)
            if files and self.under_files is not None:
                self.runner.relaunch()  # no engine of the switched launches stays up beside the file launches
                results = self.under_files.measure(files, run.block, self._store_result(run), self._next_run)
                run.file_launches += sum(result.launches for result in results)
                self._take(run, results)
            last_block_s[0] = self.clock() - block_began
            return True

        for _ in range(self.launches - 1):
            if not deciding_block():
                break
        # Where ranks take turns on the cores, launches differ more than two blocks can pin down: one more
        # deciding block there (launch_blocks.TURNS_BLOCKS).
        turns = (layouts_taking_turns(self.strategies.values(), self.cores, self.emulated) if self.launches > 2
                 else set())
        for _ in range(deciding_blocks(self.launches, taking_turns=True) - (self.launches - 1)):
            if not turns or not deciding_block(turns):
                break
            run.turns_blocks += 1
        # The machine's state (tune/machine_state.py): where fewer than two deciding blocks of a layout met its
        # fastest state, more blocks there after a pause, as verify does, so that a tune that began in a slow
        # spell decides as one that did not.
        started = self.clock()
        while self.launches > 2 and self.clock() - started < self.state_wait_s:
            short = layouts_short_of_reference(self.strategies.values())
            if not short:
                break
            self.sleep(self.state_pause_s)
            run.state_wait_s += self.state_pause_s
            if not deciding_block(short):
                break
            run.state_blocks += 1
        began = self.clock()
        self.decisions = {}
        keep = reference_blocks(r for strategy in self.strategies.values() for r in strategy.records)
        for collective, strategy in self.strategies.items():
            self.decisions.update(decide_cells(strategy, contested[collective], keep=keep))
        run.model_s += self.clock() - began

    def _next_run(self, cell: Cell, algorithm: str) -> int:
        """The next run index of (cell, algorithm): every stored run has its own."""
        key = (cell.collective, algorithm, *cell.scale, cell.msg_bytes)
        index = self.next_run.get(key, 0)
        self.next_run[key] = index + 1
        return index

    def _store_result(self, run: _Run) -> Callable[[PointResult], None]:
        def store_result(result: PointResult) -> None:
            if self.store is not None:
                self.store.add(replace(result.measurement, launch_block=run.block))
            if run.on_result is not None:
                run.on_result(result)
        return store_result

    def _measure_round(self, run: _Run, requests: Mapping[str, Sequence[Request]], *,
                       order: np.random.Generator | None = None) -> None:
        """Measure the requests, store each result as it arrives, tell each strategy its records.
        order: shuffle each layout's points with it (else they run cell by cell)."""
        # The runner stops starting points at the deadline; it reads the real monotonic clock, so the
        # time left on this tune's clock is handed over in that clock's terms.
        deadline = None if run.deadline is None else time.monotonic() + run.deadline - self.clock()
        work = self.plan(requests)
        if order is not None:
            work = {layout: [points[i] for i in order.permutation(len(points))] for layout, points in work.items()}
        self._take(run, self.runner.run(work, on_point=self._store_result(run), deadline=deadline))

    def _take(self, run: _Run, results: Sequence[PointResult]) -> None:
        """Measured results (already stored) -> records of the current launch block, told to the strategies."""
        by_collective: dict[str, list[MeasurementRecord]] = {}
        crashed: dict[str, list[MeasurementRecord]] = {}
        for result in results:
            run.bench_s += result.wall_s
            run.measured += 1
            if not (result.outcome.ok and not result.measurement.errors):
                run.failed += 1
                if len(run.failures) < MAX_FAILURE_LINES:
                    run.failures.append(failure_line(result))
            record = replace(record_of(result.measurement, cost_s=result.wall_s, launches=result.launches),
                             launch_block=run.block, probe_us=result.probe_us, launch_side=result.side)
            by_collective.setdefault(result.point.collective, []).append(record)
            if killed_the_engine(result.outcome.status, result.outcome.reason):
                crashed.setdefault(result.point.collective, []).append(record)
        for collective, records in by_collective.items():  # cheap: models are fitted in `ask`
            blocked = self._block_failing(collective, records, crashed.get(collective, []))
            self.strategies[collective].tell(records + blocked)
        point = self._state(run)
        run.curve.append(point)
        if run.on_round is not None:
            run.on_round(point, len(results))

    def _select(self, run: _Run) -> dict[Cell, str]:
        """Each strategy's selection, with the library's own choice kept where it is about as fast. Where the
        tune decided across launches, every override is a cell decided "tuned" there."""
        began = self.clock()
        selection: dict[Cell, str] = {}
        for strategy in self.strategies.values():
            chosen = prefer_default(strategy, strategy.select(), self.default_margin)
            if self.decisions:
                chosen = {cell: self.decisions[cell].choice if cell in self.decisions else DEFAULT_ALGORITHM
                          for cell in chosen}
            else:
                chosen = keep_default_where_this_launch_disagrees(strategy, chosen)
            selection.update(chosen)
        run.model_s += self.clock() - began
        run.wait_s += self.clock() - began
        return selection

    def _state(self, run: _Run) -> CurvePoint:
        per = self.convergence()
        return CurvePoint(
            wall_s=self.clock() - run.started, bench_s=run.bench_s,
            points=sum(len(s.records) for s in self.strategies.values()),
            convergence=float(np.mean(list(per.values()))) if per else 1.0, per_collective=per,
        )


@dataclass
class _Run:
    """The running totals of one Tuner.run."""

    started: float
    deadline: float | None
    clock: Callable[[], float] = time.monotonic
    on_round: OnRound | None = None
    on_result: OnResult | None = None
    curve: list[CurvePoint] = field(default_factory=list)
    bench_s: float = 0.0  # benchmark time spent (sum of point wall times, launches included)
    measured: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    rounds: int = 0
    model_s: float = 0.0  # time the strategies spent choosing points and selecting
    wait_s: float = 0.0  # part of it the loop waited for
    block: int = 1  # the launch block being measured: 1 exploring, 2... deciding (tune/launch_blocks.py)
    state_blocks: int = 0  # deciding blocks added because too few met the machine's fastest state
    state_wait_s: float = 0.0
    turns_blocks: int = 0  # deciding blocks added where ranks take turns on the cores
    file_launches: int = 0  # deciding launches under files (not the runner's)

    def past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline


def confirmation_requests_of(strategy: Strategy, margin: float) -> list[Request]:
    """Wherever the selection would override the library's own choice, both the selected algorithm and
    `default` must have been measured in that cell (a model-only winner, or a default judged from its
    neighbours, is how a tuned rule ends up slower than the library). One run of whichever is missing; the
    selection is then made with them. Where the comparison rests on runs of earlier launches (read back from
    the store: another time, another state of the machine), whichever side this tune has not measured itself
    is measured now, so that the pair `keep_default_where_this_launch_disagrees` checks is from this launch.
    (tune --plan's replay asks the same after its exploration, tune/plan.py.)"""
    space = strategy.space
    if DEFAULT_ALGORITHM not in space.algorithms:
        return []
    counts = strategy.measured_counts()
    usable = strategy.usable_mask()
    j_default = space.algorithms.index(DEFAULT_ALGORITHM)
    fresh, earlier = _fresh_latencies(strategy), _earlier_runs(strategy)
    requests: list[Request] = []
    for cell, algorithm in prefer_default(strategy, strategy.select(), margin).items():
        if algorithm == DEFAULT_ALGORITHM or cell not in strategy.measurable:
            continue
        i = space.index(cell)
        pair = (DEFAULT_ALGORITHM, algorithm)
        missing = tuple(a for a in pair
                        if usable[i, space.algorithms.index(a)] and counts[i, space.algorithms.index(a)] == 0)
        if any((cell, a) in earlier for a in pair):
            missing = tuple(a for a in pair if (cell, a) not in fresh)
        if missing and usable[i, j_default]:
            requests.append(Request(cell, missing))
    return requests


def _fresh_latencies(strategy: Strategy) -> dict[tuple[Cell, str], list[float]]:
    """(cell, algorithm) -> latencies of the successful runs this tune measured (a run read back from the
    store cost this tune nothing: `cost_s` 0)."""
    fresh: dict[tuple[Cell, str], list[float]] = {}
    for record in strategy.records:
        if record.ok and record.cost_s > 0:
            fresh.setdefault((record.cell, record.algorithm), []).append(record.measured_us)
    return fresh


def _earlier_runs(strategy: Strategy) -> set[tuple[Cell, str]]:
    """(cell, algorithm) with successful runs read back from the store (earlier launches)."""
    return {(r.cell, r.algorithm) for r in strategy.records if r.ok and r.cost_s <= 0}


def keep_default_where_this_launch_disagrees(strategy: Strategy, selection: Mapping[Cell, str]) -> dict[Cell, str]:
    """A resumed tune mixes runs of earlier launches (the store) with its own, and the runs of one launch
    are comparable with each other, not always with another's. An override of the library whose
    comparison rests partly on earlier runs stands only if this tune's own runs of the two
    (`confirmation_requests` measures them) show the selected algorithm faster; otherwise, or without
    such a pair (the tune ran out of time), the library's own choice is kept. Seen in a resumed `make
    demo`: Open MPI's allreduce default at 8 B read back at 0.53 us from an earlier demo, the others
    measured at 0.33 us, `nonoverlapping` selected; `verify` then measured the default at 0.20 us, the
    selection 40 % slower (docs/tune.md). A tune without earlier runs is left as it was."""
    if DEFAULT_ALGORITHM not in strategy.space.algorithms:
        return dict(selection)
    fresh, earlier = _fresh_latencies(strategy), _earlier_runs(strategy)
    chosen = dict(selection)
    for cell, algorithm in selection.items():
        pair = ((cell, algorithm), (cell, DEFAULT_ALGORITHM))
        if algorithm == DEFAULT_ALGORITHM or not any(key in earlier for key in pair):
            continue
        tuned, default = fresh.get(pair[0]), fresh.get(pair[1])
        if tuned is None or default is None or float(np.median(tuned)) >= float(np.median(default)):
            chosen[cell] = DEFAULT_ALGORITHM
    return chosen


def prefer_default(strategy: Strategy, selection: Mapping[Cell, str], margin: float) -> dict[Cell, str]:
    """Keep the library's own choice wherever the strategy's estimate for it is within `margin` (relative)
    of the selected algorithm's: a tuning file should only override the library where that is worth it
    (fewer rules, nothing lost to noise between near-equal algorithms)."""
    space = strategy.space
    if margin <= 0 or DEFAULT_ALGORITHM not in space.algorithms:
        return dict(selection)
    estimate = strategy.estimate_log_latency()
    usable = strategy.usable_mask()
    j_default = space.algorithms.index(DEFAULT_ALGORITHM)
    chosen = dict(selection)
    for cell, algorithm in selection.items():
        if algorithm == DEFAULT_ALGORITHM or algorithm not in space.algorithms:
            continue
        i, j = space.index(cell), space.algorithms.index(algorithm)
        gap = estimate[i, j_default] - estimate[i, j]
        if usable[i, j_default] and math.isfinite(gap) and gap < math.log1p(margin):
            chosen[cell] = DEFAULT_ALGORITHM
    return chosen
