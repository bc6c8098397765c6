"""Never cost more than an exhaustive sweep of the same space.

A strategy pays model work every round on top of its points. Where points are cheap (a running engine
on one node: Open MPI measures a point in 1-20 ms here), its rounds can cost more than measuring every
point would have (measured: 1.2x the exhaustive sweep, docs/tune.md). After each round the tuner asks
this module what the exhaustive sweep of the space would cost (`exhaustive_s`: the points this run
measured, at what their first run cost, plus every point never measured, `remaining_s`). When another
round as long as the last one would take the tune past that, the tuner ends it: if measuring every point
not measured yet costs no more than that round would (a small space: a model round can cost more than
all its points), it measures them and the strategies select from complete data; otherwise they stop and
select from what they have. Either way the tune ends near the cost it predicts for the sweep, not above
it by more than a round; that prediction is the weak part (measured 10-25 % above the real sweep for
Open MPI here, whose points cost the tuner more than the sweep, docs/tune.md).

Costs come only from the runs' own wall times (`MeasurementRecord.cost_s`): a point never measured is
charged the median run at the nearest measured message size of its scale (or the nearest scale), any
algorithm. Points read back from the store cost this run nothing and the exhaustive sweep would skip
them too (`tunempi bench` resumes), so they count in neither.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tunempi.strategy import Request, Strategy

CONTINUE, STOP, MEASURE_THE_REST = "continue", "stop", "measure the rest"


@dataclass(frozen=True)
class ExhaustiveEstimate:
    """What measuring every usable point of the measurable cells once costs, predicted after a round."""

    exhaustive_s: float  # the whole sweep: this run's measured points (their first runs) plus the rest
    remaining_s: float  # the points never measured
    #: collective -> one request per cell with the usable algorithms never measured there.
    remaining: Mapping[str, list[Request]] = field(default_factory=dict)

    def decide(self, spent_s: float, next_round_s: float) -> str:
        """After `spent_s` of tuning, with rounds of `next_round_s`: "continue"; "stop" if another round
        would cost more than the sweep; "measure the rest" if it would, and the rest costs no more than it."""
        if spent_s + next_round_s <= self.exhaustive_s:
            return CONTINUE
        return MEASURE_THE_REST if 0 < self.remaining_s <= next_round_s else STOP


def estimate_exhaustive(strategies: Mapping[str, Strategy]) -> ExhaustiveEstimate | None:
    """The estimate over every strategy's space; None before any run of this tune has a cost."""
    typical: dict[tuple[tuple[int, int, int], int], list[float]] = {}
    first_cost: dict[tuple[str, object, str], float] = {}
    for collective, strategy in strategies.items():
        for record in strategy.records:
            if record.cost_s <= 0:
                continue
            first_cost.setdefault((collective, record.cell, record.algorithm), record.cost_s)
            if record.launches == 0:  # a launch is paid once per layout, not per point
                typical.setdefault((record.cell.scale, record.cell.msg_bytes), []).append(record.cost_s)
    if not typical:
        return None
    where = list(typical)
    cost_at = np.array([float(np.median(typical[key])) for key in where])
    scales = np.array([[math.log2(v) for v in scale] for scale, _ in where])  # log2 (ranks, nodes, ppn)
    log_size = np.array([math.log2(max(size, 1)) for _, size in where])

    remaining_s = 0.0
    remaining: dict[str, list[Request]] = {}
    for collective, strategy in strategies.items():
        space = strategy.space
        todo = strategy.usable_mask() & (strategy.measured_counts() == 0)
        for i, cell in enumerate(space.cells):
            algorithms = tuple(a for j, a in enumerate(space.algorithms) if todo[i, j])
            if not algorithms or cell not in strategy.measurable:
                continue
            # Nearest measured size at this scale first: a scale apart weighs more than any size apart.
            distance = (np.abs(scales - np.log2(cell.scale)).sum(axis=1) * 100.0
                        + np.abs(log_size - math.log2(max(cell.msg_bytes, 1))))
            remaining_s += len(algorithms) * float(cost_at[int(np.argmin(distance))])
            remaining.setdefault(collective, []).append(Request(cell, algorithms))
    return ExhaustiveEstimate(exhaustive_s=sum(first_cost.values()) + remaining_s, remaining_s=remaining_s,
                              remaining=remaining)
