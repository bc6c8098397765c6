"""What the model fits of a tune's strategy took (schema version 8, `model_fits`).

tune times each strategy's `ask` (tune/driver.py: where its model is fitted and the next points chosen) and
stores them; `tune --plan` replays tune's guard with them (tune/plan.py `PointCosts.fit_s`) instead of timing
its own fits: those depend on the machine the plan runs on and its load at the moment (the same store gave a
2x1 plan of 6.5 s at one time and 7.4 s at another), the recorded ones on the machine the tune ran on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tunempi.store.results import ResultStore, utc_timestamp


@dataclass(frozen=True)
class FitTiming:
    """One `ask` of a strategy: its space's points (cells x candidate algorithms), the records it had been told
    (0: the initial design, no model yet) and the seconds it took."""

    strategy: str
    points: int
    records: int
    fit_s: float


def add_fits(store: ResultStore, fits: Iterable[FitTiming], *, system: str = "") -> int:
    """Store the fits in one transaction; returns how many."""
    rows = [(fit.strategy, system, fit.points, fit.records, fit.fit_s, utc_timestamp()) for fit in fits]
    if rows:
        with store.transaction() as conn:
            conn.executemany("INSERT INTO model_fits (strategy, system, points, records, fit_s, timestamp) "
                             "VALUES (?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def recorded_fits(store: ResultStore, strategy: str, system: str = "") -> tuple[FitTiming, ...]:
    """Every fit of `strategy` recorded on `system`, in the order stored."""
    return tuple(FitTiming(strategy, int(row["points"]), int(row["records"]), float(row["fit_s"]))
                 for row in store.fetch_all("SELECT points, records, fit_s FROM model_fits WHERE strategy = ? AND "
                                            "system = ? ORDER BY id", (strategy, system)))
