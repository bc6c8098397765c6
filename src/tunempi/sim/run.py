"""Drive strategies against a replayed dataset and measure them against the oracle.

Each (strategy, seed) run gets its own replay backend seeded with the same seed, so strategies compared
at one seed draw from the same stream of runs. The average slowdown is recorded on a grid of cost
checkpoints (every `1/resolution` of the exhaustive cost): the value at a checkpoint is that of the
selection the strategy would hand out having spent at most that much.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from tunempi.sim.cost import CostModel
from tunempi.sim.extend import Evidence, Prediction, extend
from tunempi.sim.metrics import Oracle
from tunempi.sim.replay import ReplayBackend
from tunempi.space import Cell, FeatureSpace
from tunempi.strategy import Strategy, import_strategies, make_strategy

#: Fractions of the exhaustive cost at which the slowdown is reported.
REPORT_FRACTIONS: tuple[float, ...] = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
TARGET_SLOWDOWN = 1.03
#: The tighter target: near-oracle.
TIGHT_TARGET_SLOWDOWN = 1.02


@dataclass
class Trace:
    """One strategy run at one seed."""

    strategy: str
    seed: int
    grid_s: np.ndarray
    avg_slowdown: np.ndarray  # at every grid checkpoint, NaN before the first selection
    geo_slowdown: np.ndarray
    final_avg: float = float("nan")
    final_geo: float = float("nan")
    final_slowdowns: np.ndarray = field(default_factory=lambda: np.empty(0))
    cost_s: float = 0.0
    launches: int = 0
    iterations: int = 0
    step_seconds: list[float] = field(default_factory=list)
    #: What each batch cost: the strategy checks its budget before it asks, so every batch but the last
    #: starts below the budget and the overshoot is at most the last batch's cost.
    step_cost_s: list[float] = field(default_factory=list)
    step_cpu_seconds: list[float] = field(default_factory=list)
    #: Process CPU seconds of the whole run, and of drawing its curve (selection + oracle at checkpoints).
    cpu_seconds: float = 0.0
    curve_cpu_seconds: float = 0.0
    #: Per extension policy (`run_strategy(policies=...)`), its slowdown in every oracle cell above the
    #: measured scales, the default's own where it names `default` (NaN elsewhere).
    policy_slowdowns: dict[str, np.ndarray] = field(default_factory=dict)


def run_strategy(
    name: str,
    frame: pd.DataFrame,
    collective: str,
    *,
    seed: int,
    budget_s: float,
    grid_s: np.ndarray,
    max_ranks: int | None = None,
    params: dict[str, Any] | None = None,
    oracle: Oracle | None = None,
    cost_model: CostModel | None = None,
    prior_max_ranks: int | None = None,
    policies: Sequence[str] = (),
) -> Trace:
    """One strategy at one seed. `prior_max_ranks`: the strategy starts with one free run of every point
    at <= that many ranks (an earlier job's data in the store). `policies` (with `max_ranks`): extension
    policies (`sim.extend`) scored above `max_ranks` from what the strategy measured."""
    run_started_cpu = time.process_time()
    backend = ReplayBackend(frame, collective, seed=seed, cost_model=cost_model)
    oracle = oracle or Oracle(backend)
    space: FeatureSpace = backend.space()
    measurable = space.restrict(max_ranks=max_ranks) if max_ranks is not None else space
    prior = backend.prior_records(prior_max_ranks) if prior_max_ranks is not None else []
    strategy = make_strategy(name, space, seed=seed, measurable=measurable, budget_s=budget_s, records=prior,
                             **(params or {}))
    trace = Trace(name, seed, grid_s, np.full(len(grid_s), np.nan), np.full(len(grid_s), np.nan))
    filled = 0  # grid checkpoints already assigned

    def record_state(until_s: float) -> None:
        """Assign the current selection to every checkpoint below `until_s` not assigned yet."""
        nonlocal filled
        upto = int(np.searchsorted(grid_s, until_s, side="left"))
        if upto <= filled:
            return
        started_cpu = time.process_time()
        selection = strategy.select()
        trace.avg_slowdown[filled:upto] = oracle.average_slowdown(selection)
        trace.geo_slowdown[filled:upto] = oracle.geometric_slowdown(selection)
        filled = upto
        trace.curve_cpu_seconds += time.process_time() - started_cpu

    while True:
        started, started_cpu = time.perf_counter(), time.process_time()
        requests = strategy.ask()
        asked, asked_cpu = time.perf_counter() - started, time.process_time() - started_cpu
        if not requests:
            break
        records = backend.measure(requests)
        spent_after = strategy.spent_s + sum(r.cost_s for r in records)
        if strategy.records:  # nothing measured yet: no selection to evaluate before this step
            record_state(spent_after)
        else:
            filled = int(np.searchsorted(grid_s, spent_after, side="left"))
        started, started_cpu = time.perf_counter(), time.process_time()
        strategy.tell(records)
        trace.step_seconds.append(asked + time.perf_counter() - started)
        trace.step_cpu_seconds.append(asked_cpu + time.process_time() - started_cpu)
        trace.step_cost_s.append(float(sum(r.cost_s for r in records)))
        trace.iterations += 1
    record_state(np.inf)
    final = strategy.select()
    trace.final_slowdowns = oracle.slowdowns(final)
    trace.final_avg = float(np.mean(trace.final_slowdowns))
    trace.final_geo = oracle.geometric_slowdown(final)
    trace.cost_s = strategy.spent_s
    trace.launches = strategy.launches
    if policies and max_ranks is not None:
        trace.policy_slowdowns = _score_policies(policies, strategy, backend, oracle, max_ranks, final)
    trace.cpu_seconds = time.process_time() - run_started_cpu
    return trace


def _prediction(strategy: Strategy, cells: Sequence[Cell]) -> Prediction | None:
    """The model's log latency (mean, latent std) at `cells`: tunempi's posterior, where its trend
    extrapolates beyond the measured scales (before its carry rule replaces it). None for other strategies."""
    from tunempi.strategy.tunempi import TunempiStrategy  # lazily: it brings the numerical libraries

    if not isinstance(strategy, TunempiStrategy) or not strategy.records:
        return None
    mean, std, _ = strategy._posterior()  # the model itself, not the carried selection
    index = {cell: i for i, cell in enumerate(strategy.space.cells)}
    means, stds = {}, {}
    for cell in cells:
        for j, algorithm in enumerate(strategy.space.algorithms):
            if cell in index and np.isfinite(mean[index[cell], j]) and strategy.usable_mask()[index[cell], j]:
                means[cell, algorithm] = float(mean[index[cell], j])
                stds[cell, algorithm] = float(std[index[cell], j])
    return Prediction(means, stds)


def _score_policies(policies: Sequence[str], strategy: Strategy, backend: ReplayBackend, oracle: Oracle,
                    max_ranks: int, final: Mapping[Cell, str]) -> dict[str, np.ndarray]:
    """Each policy's slowdowns in the oracle's cells above `max_ranks` (NaN in the others)."""
    # The winners are what the strategy would write at its measured scales; their latency where it did not
    # measure them is its estimate (the default's is always measured: tune measures it in every cell).
    estimate = np.exp(strategy.estimate_log_latency())
    estimates = {(cell, algorithm): float(estimate[i, j]) for i, cell in enumerate(strategy.space.cells)
                 if cell.ranks <= max_ranks for j, algorithm in enumerate(strategy.space.algorithms)
                 if strategy.usable_mask()[i, j] and np.isfinite(estimate[i, j])}
    evidence = Evidence.from_records([*strategy.records, *backend.default_records(max_ranks)],
                                     selection={c: a for c, a in final.items() if c.ranks <= max_ranks},
                                     estimates=estimates)
    above = [c for c in oracle.cells if c.ranks > max_ranks]
    prediction = _prediction(strategy, above) if {"model", "agree"} & set(policies) else None
    inside = np.array([c.ranks <= max_ranks for c in oracle.cells])
    scored = {}
    for policy in policies:
        slowdowns = oracle.slowdowns_with_default(
            extend(policy, evidence, above, prediction=prediction, strategy_choice=final))
        slowdowns[inside] = np.nan
        scored[policy] = slowdowns
    return scored


#: A cell counts as slower than the default where the policy's slowdown is above the default's by this factor.
SLOWER_THAN_DEFAULT = 1.1


def policy_figures(slowdowns: Sequence[np.ndarray], oracle: Oracle) -> dict[str, Any]:
    """One policy over seeds (`slowdowns`: per seed, per oracle cell, NaN where not scored): its mean
    slowdown against the oracle and the default's on the same cells, the share of (seed, cell) slower than
    the default by more than 10 %, and the worst cell against the default."""
    values = np.array(slowdowns)
    default = np.broadcast_to(oracle.default_slowdowns(), values.shape)
    scored = np.isfinite(values) & np.isfinite(default)
    if not scored.any():
        return {"cells": 0, "mean": None, "default_mean": None, "slower_share": None, "worst": None}
    ratio = np.where(scored, values / np.where(scored, default, 1.0), -np.inf)
    seed, i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    cell = oracle.cells[i]
    return {
        "cells": int(scored[0].sum()),
        "mean": float(np.mean([row[ok].mean() for row, ok in zip(values, scored, strict=True)])),
        "default_mean": float(default[0][scored[0]].mean()),
        "slower_share": float((values[scored] > SLOWER_THAN_DEFAULT * default[scored]).mean()),
        "worst": {"ranks": cell.ranks, "nodes": cell.nodes, "msg_bytes": cell.msg_bytes, "seed": int(seed),
                  "slowdown": float(values[seed, i]), "default_slowdown": float(default[seed, i]),
                  "vs_default": float(ratio[seed, i])},
    }


def _limit_blas() -> None:
    """Worker initializer: one BLAS thread per process (see `simulate`)."""
    import_strategies()  # before the limit: it reaches only the libraries loaded by then
    threadpool_limits(limits=1)


def _first_cost_below(grid_s: np.ndarray, curve: np.ndarray, target: float) -> float | None:
    hits = np.flatnonzero(curve <= target)
    return float(grid_s[hits[0]]) if len(hits) else None


def _cost_staying_below(grid_s: np.ndarray, curve: np.ndarray, target: float) -> float | None:
    above = np.flatnonzero(~(curve <= target))
    if len(above) == 0:
        return float(grid_s[0])
    if above[-1] + 1 >= len(curve):
        return None
    return float(grid_s[above[-1] + 1])


def summarize(traces: Sequence[Trace], oracle: Oracle, exhaustive_cost_s: float,
              max_ranks: int | None = None) -> dict[str, Any]:
    """The JSON object of one strategy over its seeds (keys documented in docs/strategies.md)."""
    grid_s = traces[0].grid_s
    curve = np.mean([t.avg_slowdown for t in traces], axis=0)
    geo_curve = np.mean([t.geo_slowdown for t in traces], axis=0)
    steps = [s for t in traces for s in t.step_seconds]
    cpu_steps = [s for t in traces for s in t.step_cpu_seconds]
    summary: dict[str, Any] = {
        "strategy": traces[0].strategy,
        "seeds": len(traces),
        "seed_values": [t.seed for t in traces],
        "avg_slowdown": float(np.mean([t.final_avg for t in traces])),
        "geo_slowdown": float(np.mean([t.final_geo for t in traces])),
        "default_slowdown": oracle.default_slowdown(),
        "cost_s": float(np.mean([t.cost_s for t in traces])),
        "launches": float(np.mean([t.launches for t in traces])),
        "exhaustive_cost_s": exhaustive_cost_s,
        "cost_fraction": float(np.mean([t.cost_s for t in traces]) / exhaustive_cost_s),
        "cost_to_1_03_s": _first_cost_below(grid_s, curve, TARGET_SLOWDOWN),
        "cost_to_stay_1_03_s": _cost_staying_below(grid_s, curve, TARGET_SLOWDOWN),
        "cost_to_1_02_s": _first_cost_below(grid_s, curve, TIGHT_TARGET_SLOWDOWN),
        "cost_to_stay_1_02_s": _cost_staying_below(grid_s, curve, TIGHT_TARGET_SLOWDOWN),
        "cost_to_1_03_by_seed_s": [_first_cost_below(grid_s, t.avg_slowdown, TARGET_SLOWDOWN) for t in traces],
        "slowdown_at_fraction": {
            f"{fraction:g}": _value_at(grid_s, curve, fraction * exhaustive_cost_s)
            for fraction in REPORT_FRACTIONS if fraction * exhaustive_cost_s <= grid_s[-1] * (1 + 1e-9)
        },
        "iterations": float(np.mean([t.iterations for t in traces])),
        "seconds_per_iteration": float(np.mean(steps)) if steps else 0.0,
        "max_seconds_per_iteration": float(np.max(steps)) if steps else 0.0,
        # CPU time of the process: on a shared machine wall time also counts other users' load.
        "cpu_seconds_per_iteration": float(np.mean(cpu_steps)) if cpu_steps else 0.0,
        "max_cpu_seconds_per_iteration": float(np.max(cpu_steps)) if cpu_steps else 0.0,
        # Where a replay's time goes, summed over seeds: the strategy's own ask + tell (its model work),
        # drawing the curve (selections at checkpoints), and the whole runs.
        "strategy_cpu_s": float(np.sum(cpu_steps)) if cpu_steps else 0.0,
        "curve_cpu_s": float(sum(t.curve_cpu_seconds for t in traces)),
        "total_cpu_s": float(sum(t.cpu_seconds for t in traces)),
        "curve": {"cost_s": [float(x) for x in grid_s], "avg_slowdown": _floats(curve),
                  "geo_slowdown": _floats(geo_curve)},
    }
    if max_ranks is not None:
        inside = np.array([c.ranks <= max_ranks for c in oracle.cells])
        slowdowns = np.array([t.final_slowdowns for t in traces])
        summary["train_max_ranks"] = max_ranks
        summary["avg_slowdown_measurable"] = float(slowdowns[:, inside].mean()) if inside.any() else None
        summary["avg_slowdown_extrapolated"] = float(slowdowns[:, ~inside].mean()) if (~inside).any() else None
    return summary


def _floats(values: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else round(float(v), 5) for v in values]


def _value_at(grid_s: np.ndarray, curve: np.ndarray, cost_s: float) -> float | None:
    index = int(np.searchsorted(grid_s, cost_s * (1 + 1e-9), side="right")) - 1
    if index < 0 or not np.isfinite(curve[index]):
        return None
    return float(curve[index])


def simulate(
    frame: pd.DataFrame,
    collective: str,
    strategies: Sequence[str],
    *,
    seeds: int = 5,
    budget_fraction: float = 1.0,
    max_ranks: int | None = None,
    resolution: int = 200,
    params: dict[str, dict[str, Any]] | None = None,
    on_run: Callable[[str, int], None] | None = None,
    blas_threads: int | None = 1,
    cost_model: CostModel | None = None,
    prior_max_ranks: int | None = None,
    evaluate_above: int | None = None,
    jobs: int = 1,
    policies: Sequence[str] = (),
) -> tuple[list[dict[str, Any]], dict[str, list[Trace]]]:
    """Run every strategy at seeds 0..seeds-1; returns the summaries and the raw traces.

    `policies` (with `max_ranks`): extension policies (`sim.extend.POLICIES`) scored above `max_ranks`
    from what each run measured, summarized per policy under the summary's `policies` (`policy_figures`).

    `cost_model`: how benchmark seconds are charged (default: one launch per point). `prior_max_ranks`:
    every point at <= R ranks is given for free (warm start). `evaluate_above`: slowdowns, curves and the
    exhaustive cost cover only the cells with more ranks (default: `prior_max_ranks`), so a warm start and
    a cold start are compared on the same cells. `jobs` > 1 runs the (strategy, seed) runs in that many
    processes (same results: every run is seeded on its own).
    BLAS is limited to `blas_threads` (None: leave it alone): the models' matrices are small, and
    multithreaded BLAS on a few shared cores made every iteration several times slower.
    """
    import_strategies()  # before the limit: it reaches only the libraries loaded by then
    with threadpool_limits(limits=blas_threads):
        return _simulate(frame, collective, strategies, seeds=seeds, budget_fraction=budget_fraction,
                         max_ranks=max_ranks, resolution=resolution, params=params, on_run=on_run,
                         cost_model=cost_model or CostModel(), prior_max_ranks=prior_max_ranks,
                         evaluate_above=evaluate_above if evaluate_above is not None else prior_max_ranks,
                         jobs=jobs, policies=policies)


def _simulate(
    frame: pd.DataFrame,
    collective: str,
    strategies: Sequence[str],
    *,
    seeds: int,
    budget_fraction: float,
    max_ranks: int | None,
    resolution: int,
    params: dict[str, dict[str, Any]] | None,
    on_run: Callable[[str, int], None] | None,
    cost_model: CostModel,
    prior_max_ranks: int | None,
    evaluate_above: int | None,
    jobs: int,
    policies: Sequence[str],
) -> tuple[list[dict[str, Any]], dict[str, list[Trace]]]:
    oracle = Oracle(ReplayBackend(frame, collective, seed=0, cost_model=cost_model), above_ranks=evaluate_above)
    # The exhaustive cost of the evaluated cells: after a warm start, of the cells still to tune.
    exhaustive_cost = oracle.exhaustive_cost(
        cells=np.ones(len(oracle.cells), dtype=bool))
    budget_s = budget_fraction * exhaustive_cost
    grid_s = np.arange(0, int(np.floor(budget_fraction * resolution + 1e-9)) + 1) * exhaustive_cost / resolution
    summaries, traces = [], {}
    tasks = [(name, seed) for name in strategies for seed in range(seeds)]
    options: dict[str, Any] = {"budget_s": budget_s, "grid_s": grid_s, "max_ranks": max_ranks, "oracle": oracle,
               "cost_model": cost_model, "prior_max_ranks": prior_max_ranks, "policies": tuple(policies)}
    done: dict[tuple[str, int], Trace] = {}
    if jobs > 1 and len(tasks) > 1:
        # Runs are independent: one process each (spawned, each limiting its own BLAS threads).
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=get_context("spawn"),
                                 initializer=_limit_blas) as pool:
            futures = {pool.submit(run_strategy, name, frame, collective, seed=seed,
                                   params=(params or {}).get(name), **options): (name, seed)
                       for name, seed in tasks}
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                if on_run is not None:
                    on_run(*futures[future])
    else:
        for name, seed in tasks:
            done[name, seed] = run_strategy(name, frame, collective, seed=seed, params=(params or {}).get(name),
                                            **options)
            if on_run is not None:
                on_run(name, seed)
    for name in strategies:
        runs = [done[name, seed] for seed in range(seeds)]
        traces[name] = runs
        summary = summarize(runs, oracle, exhaustive_cost, max_ranks)
        summary["cost_model"] = "engine" if cost_model.launch_per == "layout" else "acclaim"
        if prior_max_ranks is not None:
            summary["prior_max_ranks"] = prior_max_ranks
        if evaluate_above is not None:
            summary["evaluated_above_ranks"] = evaluate_above
        if policies and max_ranks is not None:
            summary["policies"] = {p: policy_figures([t.policy_slowdowns[p] for t in runs], oracle)
                                   for p in policies}
        summaries.append(summary)
    return summaries, traces
