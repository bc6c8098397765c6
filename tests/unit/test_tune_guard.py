"""The never-more-than-exhaustive guard: what the rest of a space costs, and what the tuner then does."""

from __future__ import annotations

import pytest

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.strategy import MeasurementRecord, make_strategy
from tunempi.tune.guard import CONTINUE, MEASURE_THE_REST, STOP, ExhaustiveEstimate, estimate_exhaustive
from tunempi.tune.scope import Scale, feature_space

ALGORITHMS = (DEFAULT_ALGORITHM, "ring", "tree")


def strategy(scales=(Scale(1, 2), Scale(1, 4)), sizes=(64, 1024, 16384)):  # noqa: ANN001, ANN201
    return make_strategy("exhaustive", feature_space("allreduce", list(scales), list(sizes), ALGORITHMS))


def record(s, ranks: int, size: int, algorithm: str, cost_s: float, launches: int = 0) -> MeasurementRecord:  # noqa: ANN001
    cell = next(c for c in s.space.cells if c.ranks == ranks and c.msg_bytes == size)
    return MeasurementRecord(cell, algorithm, 10.0, iterations=100, launches=launches, cost_s=cost_s)


def test_nothing_to_estimate_before_a_run_of_this_tune_has_a_cost() -> None:
    s = strategy()
    assert estimate_exhaustive({"allreduce": s}) is None
    s.tell([record(s, 2, 64, "ring", 0.0)])  # read back from the store: cost nothing in this run
    assert estimate_exhaustive({"allreduce": s}) is None


def test_unmeasured_points_cost_the_median_run_at_the_nearest_measured_size_of_their_scale() -> None:
    s = strategy()
    s.tell([
        record(s, 2, 64, "ring", 0.5, launches=1),  # the launch: counted once, never as a typical point
        record(s, 2, 64, "tree", 0.002),
        record(s, 2, 64, DEFAULT_ALGORITHM, 0.004),
        record(s, 2, 16384, "ring", 0.010),
        record(s, 4, 1024, "tree", 0.030),
    ])
    estimate = estimate_exhaustive({"allreduce": s})
    assert estimate is not None
    # 2 ranks: 64 B done; 1 KiB (3 points) nearer 64 B's median 3 ms than 16 KiB's 10 ms (log distance 4 vs
    # 4: the first nearest wins, 64 B); 16 KiB: tree and default at 10 ms. 4 ranks: 2 + 3 + 3 points at
    # the only 4-rank cost, 30 ms (a scale apart weighs more than sizes apart).
    remaining = 3 * 0.003 + 2 * 0.010 + 8 * 0.030
    assert estimate.remaining_s == pytest.approx(remaining)
    assert estimate.exhaustive_s == pytest.approx(0.5 + 0.002 + 0.004 + 0.010 + 0.030 + remaining)
    asked = {(r.cell.ranks, r.cell.msg_bytes): set(r.algorithms) for r in estimate.remaining["allreduce"]}
    assert asked[(2, 16384)] == {"tree", DEFAULT_ALGORITHM} and (2, 64) not in asked
    assert asked[(4, 1024)] == {"ring", DEFAULT_ALGORITHM} and len(asked) == 5


def test_only_the_first_run_of_a_point_counts_towards_the_exhaustive_cost() -> None:
    s = strategy(scales=(Scale(1, 2),), sizes=(64,))
    s.tell([record(s, 2, 64, a, 0.01) for a in ALGORITHMS] + [record(s, 2, 64, "ring", 0.05)])
    estimate = estimate_exhaustive({"allreduce": s})
    assert estimate is not None and estimate.remaining_s == 0 and estimate.remaining == {}
    assert estimate.exhaustive_s == pytest.approx(0.03)  # the sweep measures every point once


def test_the_decision_continues_stops_or_measures_the_rest() -> None:
    estimate = ExhaustiveEstimate(exhaustive_s=10.0, remaining_s=2.0)
    assert estimate.decide(spent_s=7.0, next_round_s=1.0) == CONTINUE
    assert estimate.decide(spent_s=9.5, next_round_s=1.0) == STOP  # the rest (2 s) costs more than a round
    assert estimate.decide(spent_s=9.5, next_round_s=3.0) == MEASURE_THE_REST
    done = ExhaustiveEstimate(exhaustive_s=10.0, remaining_s=0.0)
    assert done.decide(spent_s=12.0, next_round_s=1.0) == STOP  # nothing left to measure
