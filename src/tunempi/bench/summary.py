"""The fastest algorithm per (collective, size), with the library's own choice alongside."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from tunempi.collectives import DEFAULT_ALGORITHM, DEFAULT_DISTRIBUTION, LATENCY_OBJECTIVE
from tunempi.store.results import Measurement


@dataclass(frozen=True)
class FastestRow:
    """One (collective, size) of a sweep. Times are medians over repetitions of each point's median."""

    collective: str
    msg_bytes: int
    fastest: str
    fastest_us: float
    default_us: float | None  # the library's own choice, where it was measured
    algorithms: int  # how many algorithms were measured correctly at this point
    failed: int  # measurements that failed, timed out or gave wrong results

    @property
    def speedup(self) -> float | None:
        """How much faster the fastest algorithm is than the library's choice (1.0: the same)."""
        if self.default_us is None or self.fastest_us <= 0:
            return None
        return self.default_us / self.fastest_us


def fastest_table(measurements: Iterable[Measurement]) -> list[FastestRow]:
    """Rows sorted by collective (first appearance) and size. Wrong results never win."""
    medians: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    failed: dict[tuple[str, int], int] = defaultdict(int)
    order: dict[str, int] = {}
    for m in measurements:
        # A vector collective's distributions are points of their own: "alltoallv (skewed)".
        name = m.collective if m.distribution == DEFAULT_DISTRIBUTION else f"{m.collective} ({m.distribution})"
        # A non-blocking collective's figure other than its latency says which: "iallreduce [time]".
        name += f" [{m.objective}]" if m.objective != LATENCY_OBJECTIVE else ""
        order.setdefault(name, len(order))
        point = (name, m.msg_bytes)
        if not m.ok or m.errors or m.median_us is None:
            failed[point] += 1
            continue
        medians[point][m.algorithm].append(m.median_us)
    rows: list[FastestRow] = []
    # A point where every measurement failed gets no row: there is nothing to compare.
    for (collective, size), by_algorithm in sorted(medians.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        typical = {name: statistics.median(values) for name, values in by_algorithm.items()}
        fastest = min(typical, key=lambda name: typical[name])
        rows.append(FastestRow(
            collective=collective, msg_bytes=size, fastest=fastest, fastest_us=typical[fastest],
            default_us=typical.get(DEFAULT_ALGORITHM), algorithms=len(typical), failed=failed[(collective, size)],
        ))
    return rows
