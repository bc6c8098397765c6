"""Between batches: estimate every algorithm's time in every cell, then favour the faster ones.

Estimates: a cell's expected time per call of each algorithm where it has at least `min_samples` records
of it (`cell_estimate`), else a per-(collective, algorithm) XGBoost regressor over the cells (features:
log2 message size, log2 ranks, nodes, ppn; target: log time) fitted on the estimate of every (size,
layout) measured, which also covers cells never measured (the paper's "predict configurations never seen").
An application's time is the SUM of its calls, so the estimate is a mean, never a per-call median: some
algorithms cost little most of the time and a lot now and then. But the plain mean over every call
(`estimator="mean"`) lets other work on the node decide. Measured (MPICH 5.0.2, 2 ranks on 2 shared
cores, bench/online_loop.py, 20 runs of 200 x 256 KiB + 200 x 1 MiB allreduce): calls over 10x the
cell's median made 20-50 % of every algorithm's total time, yet 12 of the 20 runs had none at 1 MiB and
the others had them in every algorithm they ran; the favourite of a disturbed batch collects most of them
and is dropped the next batch (at 1 MiB the mean's favourite went reduce_scatter_allgather ->
k_reduce_scatter_allgather -> nb in three batches). The default `estimator="run_median"` takes the median over runs of
each run's mean: stalls an algorithm causes in most runs still count, disturbed runs do not decide alone.
A 5 % trimmed mean (`trim`) was tried earlier and is off by default: at 1 MiB the default algorithm
stalled in 3-5 % of its calls, in every run, and trimming them made it look like the best.
Probabilities: weight (best / time) ** sharpness, normalised, then bounded to [min, max] (the paper kept
losers at a 3% floor so that a changed situation can still be noticed). A loser the runs have settled
(significantly and >= 10 % slower than the cell's leader in the runs that drew both) gets the lower
`settled_probability` floor (1 %): at 3 % each, a handful of 1.3-2x slower algorithms cost the program
about 5 % (measured: Open MPI 2 ranks, allreduce 256 KiB / 1 MiB, where the default is among the best).
Evidence against the default (`paired_evidence`): in a measured cell, every algorithm's mean per call is
compared with the default's mean IN THE SAME RUN, over the runs that drew both (the shared paired rule of
tunempi.evidence: a t-test on the log ratios plus winning 3 of 4 runs). Runs share the machine's
state, and on a shared VM that state moves everything by up to 3x for minutes and can reorder close
algorithms (measured: Open MPI 1 MiB allreduce, basic_linear 6 % faster than ring in one state, 25 %
slower in the other). `online best` keeps the default unless this paired evidence says faster.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tunempi import evidence
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.online.cells import SizeRangeCell, SizeRanges
from tunempi.online.state import CollectiveSwitch, OnlineConfig, OnlineState, Probabilities, Record

_log = logging.getLogger(__name__)


def bounded_probabilities(weights: Mapping[str, float], min_p: float, max_p: float,
                          floors: Mapping[str, float] | None = None) -> dict[str, float]:
    """Probabilities proportional to the weights, each clipped to [floor, max_p], summing to 1; the floor
    is min_p, or floors[name] for the names given there (settled losers).

    p_i = clip(c * w_i, floor_i, max_p) with the scale c found by bisection: the order of the weights is
    kept, every bound holds exactly, and algorithms pinned at the floor or the ceiling give or take the
    mass the others need. Bounds that cannot hold for this many algorithms are relaxed to 1/n.
    """
    names = list(weights)
    n = len(names)
    if n == 0:
        return {}
    hi = max(max_p, 1.0 / n)
    lo = {k: min((floors or {}).get(k, min_p), 1.0 / n) for k in names}
    top = max((float(v) for v in weights.values()), default=0.0)
    if not top > 0:
        return dict.fromkeys(names, 1.0 / n)
    w = {k: max(float(v) / top, 1e-12) for k, v in weights.items()}  # zero weights: below everything else

    def total(scale: float) -> float:
        return sum(min(max(scale * v, lo[k]), hi) for k, v in w.items())

    low, high = -40.0, 40.0  # log10 of the scale: total(10**-40) = sum(lo) <= 1 <= n*hi = total(10**40)
    for _ in range(200):
        middle = (low + high) / 2
        if total(10.0 ** middle) < 1.0:
            low = middle
        else:
            high = middle
    scale = 10.0 ** high
    p = {k: min(max(scale * v, lo[k]), hi) for k, v in w.items()}
    mass = sum(p.values())
    return {k: v / mass for k, v in p.items()}


def probabilities_from_times(times: Mapping[str, float | None], *, sharpness: float, min_p: float,
                             max_p: float, floors: Mapping[str, float] | None = None) -> dict[str, float]:
    """Faster algorithms get more: weight (best / time) ** sharpness; unknown times get the median weight."""
    known = {k: t for k, t in times.items() if t is not None and t > 0}
    if not known:
        return bounded_probabilities(dict.fromkeys(times, 1.0), min_p, max_p, floors)
    best = min(known.values())
    weights: dict[str, float] = {k: (best / t) ** sharpness for k, t in known.items()}
    middle = float(np.median(list(weights.values())))
    return bounded_probabilities({k: weights.get(k, middle) for k in times}, min_p, max_p, floors)


def upper_trimmed_mean(values: Sequence[float], trim: float) -> float:
    """The mean without the largest `trim` fraction: stalls that recur are kept, rare preemptions of a
    rank by other jobs (milliseconds on calls of microseconds) do not decide alone."""
    ordered = np.sort(np.asarray(values, dtype=float))
    keep = max(1, int(np.ceil(len(ordered) * (1.0 - trim))))
    return float(ordered[:keep].mean())


ESTIMATORS: tuple[str, ...] = ("run_median", "mean")


def cell_estimate(runs: Sequence[Sequence[float]], estimator: str, trim: float) -> float:
    """Expected time per call of one algorithm in one cell, from its calls grouped by run.

    "run_median": the median over runs of each run's mean per call. Each run's mean keeps the stalls
    that happen in that run (an algorithm that stalls in most runs pays for them), while runs disturbed
    by other work on the node (measured: stalls cluster in a minority of runs and hit every algorithm
    in them) cannot decide alone. "mean": the mean over every call (optionally upper-trimmed by `trim`).
    """
    runs = [r for r in runs if len(r)]
    if estimator == "run_median":
        return float(np.median([upper_trimmed_mean(r, trim) for r in runs]))
    return upper_trimmed_mean([t for r in runs for t in r], trim)


#: Calls of both algorithms a run needs before their per-run means are compared.
MIN_PAIRED_CALLS = 3


def paired_evidence(candidate: Mapping[int, Sequence[float]], default: Mapping[int, Sequence[float]],
                    trim: float = 0.0) -> dict[str, float] | None:
    """The candidate against a baseline, run by run (both keyed by run): the shared paired comparison
    (tunempi.evidence) of their per-run means, as the numbers `probabilities.json` keeps: "runs", "ratio"
    (geometric mean of candidate / baseline: < 1 is faster), the one-sided p-values of "faster" ("p") and
    "slower" ("p_slower"), the shares of runs the candidate was faster ("wins") and slower ("losses") in.
    None when no run has enough calls of both."""
    pairs = [(upper_trimmed_mean(candidate[run], trim), upper_trimmed_mean(default[run], trim))
             for run in sorted(set(candidate) & set(default))
             if len(candidate[run]) >= MIN_PAIRED_CALLS and len(default[run]) >= MIN_PAIRED_CALLS]
    if not pairs:
        return None
    found = evidence.compare([c for c, _ in pairs], [d for _, d in pairs])
    return {"runs": float(found.pairs), "ratio": 1.0 / found.speedup, "p": found.p_faster,
            "p_slower": found.p_slower, "wins": found.wins, "losses": found.losses}


def verdict_of(found: Mapping[str, float], level: float = evidence.LEVEL) -> str:
    """The shared decision rule (evidence.decide) on stored paired evidence: faster / slower / same."""
    wins = found.get("wins", 0.0)
    return evidence.decide(int(found["runs"]), found["p"], found.get("p_slower", 1.0), wins,
                           found.get("losses", 1.0 - wins), level)


#: A loser is settled when the runs that drew it and the cell's leader show it slower at this level (a
#: stricter one than a recommendation's: the shared rule, asked at 1 %)...
SETTLE_LEVEL = 0.01
#: ...and by at least this much (median per-run ratio): near-ties keep the full floor.
SETTLE_MARGIN = 1.10


def settled_losers(per_run: Mapping[str, Mapping[int, Sequence[float]]], times: Mapping[str, float | None],
                   trim: float = 0.0) -> list[str]:
    """Algorithms clearly slower than the leader (lowest estimate) of a measured cell, compared run by run:
    "slower" at SETTLE_LEVEL by the shared rule and by SETTLE_MARGIN: they may drop to the lower settled
    floor."""
    known = {k: t for k, t in times.items() if t is not None and k in per_run}
    if len(known) < 2:
        return []
    leader = min(known, key=lambda k: known[k])
    out = []
    for name in known:
        if name == leader:
            continue
        found = paired_evidence(per_run[name], per_run[leader], trim)
        if found is not None and verdict_of(found, SETTLE_LEVEL) == "slower" and found["ratio"] >= SETTLE_MARGIN:
            out.append(name)
    return out


def _features(msg_bytes: float, ranks: int, nodes: int, ppn: int) -> list[float]:
    return [math.log2(msg_bytes + 1.0), math.log2(max(ranks, 1)), float(nodes), float(ppn)]


class CellTimeModel:
    """Per-algorithm XGBoost regressors of log time over (size, ranks, nodes, ppn) for one collective."""

    def __init__(self, n_estimators: int = 60, max_depth: int = 3, learning_rate: float = 0.2,
                 random_state: int = 0) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.random_state = random_state

    def fit(self, rows: Sequence[tuple[str, float, int, int, int, float]]) -> CellTimeModel:
        """rows: (algorithm, msg_bytes, ranks, nodes, ppn, time_ns), one per measured point."""
        from xgboost import XGBRegressor

        by_algorithm: dict[str, list[tuple[list[float], float]]] = defaultdict(list)
        for algorithm, msg_bytes, ranks, nodes, ppn, time_ns in rows:
            by_algorithm[algorithm].append((_features(msg_bytes, ranks, nodes, ppn), math.log(max(time_ns, 1.0))))
        self.models_: dict[str, XGBRegressor] = {}
        self.constant_: dict[str, float] = {}
        for algorithm, points in by_algorithm.items():
            x = np.array([p[0] for p in points])
            y = np.array([p[1] for p in points])
            if len(points) < 2:
                self.constant_[algorithm] = float(y[0])
                continue
            model = XGBRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                                 learning_rate=self.learning_rate, random_state=self.random_state,
                                 min_child_weight=1.0, n_jobs=1, verbosity=0)
            model.fit(x, y)
            self.models_[algorithm] = model
        return self

    @property
    def algorithms_(self) -> set[str]:
        return set(self.models_) | set(self.constant_)

    def predict(self, algorithm: str, msg_bytes: float, ranks: int, nodes: int, ppn: int) -> float | None:
        """Predicted ns per call, or None when the algorithm was never measured."""
        if algorithm in self.constant_:
            return math.exp(self.constant_[algorithm])
        model = self.models_.get(algorithm)
        if model is None:
            return None
        value = model.predict(np.array([_features(msg_bytes, ranks, nodes, ppn)]))[0]
        return float(math.exp(float(value)))


@dataclass(frozen=True)
class UpdateResult:
    probabilities: Probabilities
    records_used: int
    files_used: int
    cells_measured: int
    cells_predicted: int


def _cells_to_set(collective: str, sizes: SizeRanges, layouts: Iterable[tuple[int, int, int]],
                  measured_indices: Iterable[int]) -> list[SizeRangeCell]:
    """Every layout (measured or configured) x the size ranges the model may speak for: those measured
    for the collective at any layout, and one range either side (no farther extrapolation in size)."""
    if collective == "barrier":
        indices = [0]
    else:
        measured = set(measured_indices)
        indices = sorted({i + d for i in measured for d in (-1, 0, 1) if 0 <= i + d < len(sizes)})
    return [SizeRangeCell(collective, r, n, p, s) for r, n, p in sorted(set(layouts)) for s in indices]


def compute_update(runs: Iterable[Iterable[Record]], switches: Mapping[str, CollectiveSwitch], config: OnlineConfig,
                   batch: int) -> tuple[Probabilities, int, int]:
    """The next batch's probabilities from the records of each run; also (cells measured, cells predicted only)."""
    sizes = config.sizes
    per_cell: dict[tuple[SizeRangeCell, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    per_point: dict[tuple[str, str, int, int, int, int], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    layouts: dict[str, set[tuple[int, int, int]]] = defaultdict(set)
    for run, records in enumerate(runs):
        for r in records:
            if r.collective not in switches or r.algorithm not in switches[r.collective].names or r.nodes < 1:
                continue
            cell = SizeRangeCell(r.collective, r.ranks, r.nodes, r.ppn, sizes.index(r.msg_bytes))
            per_cell[(cell, r.algorithm)][run].append(r.time_ns)
            per_point[(r.collective, r.algorithm, r.msg_bytes, r.ranks, r.nodes, r.ppn)][run].append(r.time_ns)
            layouts[r.collective].add((r.ranks, r.nodes, r.ppn))

    def estimate(by_run: Mapping[int, list[int]]) -> float:
        return cell_estimate(list(by_run.values()), config.estimator, config.trim)

    out = Probabilities(batch)
    measured_cells, predicted_cells = set(), set()
    for collective, switch in switches.items():
        rows = [(alg, float(b), rk, n, p, estimate(t))
                for (coll, alg, b, rk, n, p), t in per_point.items() if coll == collective]
        model = CellTimeModel(random_state=config.seed).fit(rows) if rows else None
        measured_indices = {cell.size_index for cell, _ in per_cell if cell.collective == collective}
        for cell in _cells_to_set(collective, sizes, layouts[collective] | set(config.layouts), measured_indices):
            times: dict[str, float | None] = {}
            samples: dict[str, int] = {}
            for name in switch.names:
                measured = per_cell.get((cell, name), {})
                samples[name] = sum(len(t) for t in measured.values())
                if samples[name] >= config.min_samples:
                    times[name] = estimate(measured)
                    measured_cells.add(cell)
                elif model is not None:
                    size = sizes.representative(cell.size_index) if collective != "barrier" else 0
                    times[name] = model.predict(name, size, cell.ranks, cell.nodes, cell.ppn)
                else:
                    times[name] = None
            if all(t is None for t in times.values()):
                continue
            if cell not in measured_cells:
                predicted_cells.add(cell)
            by_run = {name: per_cell[(cell, name)] for name in switch.names if (cell, name) in per_cell}
            floors = dict.fromkeys(settled_losers(by_run, times, config.trim),
                                   min(config.settled_probability, config.min_probability))
            out.cells[cell.key] = probabilities_from_times(times, sharpness=config.sharpness,
                                                           min_p=config.min_probability, max_p=config.max_probability,
                                                           floors=floors)
            out.estimates[cell.key] = {k: v for k, v in times.items() if v is not None}
            out.samples[cell.key] = samples
            baseline = per_cell.get((cell, DEFAULT_ALGORITHM))
            if baseline:
                evidence = {name: paired_evidence(per_cell[(cell, name)], baseline, config.trim)
                            for name in switch.names if name != DEFAULT_ALGORITHM and (cell, name) in per_cell}
                out.versus_default[cell.key] = {k: v for k, v in evidence.items() if v is not None}
    return out, len(measured_cells), len(predicted_cells)


def update_state(state: OnlineState, *, force: bool = False) -> UpdateResult:
    """Fit on every batch's records of this library, write the next probabilities, start the next batch."""
    from tunempi.errors import UsageError

    config = state.config
    batch, done = state.batch, state.runs_in_batch
    if done < config.batch_runs and not force:
        raise UsageError(f"batch {batch} has {done} of {config.batch_runs} runs; run more, or pass --force")
    files = state.record_files()
    if not any(f.records for f in files):
        raise UsageError(f"no records of {state.library_name} in {state.dir}; run the application first "
                         "with `tunempi online run`")
    probabilities, measured, predicted = compute_update([f.records for f in files], state.switches, config, batch + 1)
    state.save_probabilities(probabilities)
    state.start_batch(batch + 1)
    return UpdateResult(probabilities, sum(len(f.records) for f in files), len(files), measured, predicted)
