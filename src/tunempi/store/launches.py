"""What engine launches took, per library and layout (schema version 7, `engine_launches`).

tune records every launch of its engine it closed (bench/engine.py `launches_timed`); `tune --plan` prices a
launch of the same library by them (tune/plan.py `PointCosts.launch_s`), since a start differs by library and
day: Open MPI's took 0.07 s in one session here and 0.14 s in the next, MPICH's 0.06 s in both.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from tunempi.store.results import ResultStore, utc_timestamp

Layout = tuple[int, int, int]  # ranks, nodes, ppn


@dataclass(frozen=True)
class LaunchTiming:
    """One engine launch as it took (bench/engine.py times it): from mpiexec to the engine's ready line (its setup
    writes included), `start_s`, and from the quit request to the launch's end, `close_s`; a launch that was
    killed (it died, or hung) is not timed."""

    library_fingerprint: str
    ranks: int
    nodes: int
    ppn: int
    start_s: float
    close_s: float


def add_launches(store: ResultStore, launches: Iterable[LaunchTiming], *, system: str = "") -> int:
    """Store the launches in one transaction; returns how many."""
    rows = [(launch.library_fingerprint, system, launch.ranks, launch.nodes, launch.ppn, launch.start_s,
             launch.close_s, utc_timestamp()) for launch in launches]
    if rows:
        with store.transaction() as conn:
            conn.executemany("INSERT INTO engine_launches (library_fingerprint, system, ranks, nodes, ppn, start_s, "
                             "close_s, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def launch_seconds(store: ResultStore, library_fingerprint: str, system: str = "") -> dict[Layout, float]:
    """Layout -> the median of a launch's start + close seconds of this library at it (none recorded: absent)."""
    seconds: dict[Layout, list[float]] = {}
    for row in store.fetch_all("SELECT ranks, nodes, ppn, start_s, close_s FROM engine_launches "
                               "WHERE library_fingerprint = ? AND system = ?", (library_fingerprint, system)):
        seconds.setdefault((int(row["ranks"]), int(row["nodes"]), int(row["ppn"])), []).append(
            float(row["start_s"]) + float(row["close_s"]))
    return {layout: statistics.median(values) for layout, values in seconds.items()}
