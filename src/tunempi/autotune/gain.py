"""What the tuning can give the application at most, from tune's own measurements (docs/autotune.md, "Expected
gain"): every call of the profile to a tuned collective is sent to the measured cell whose rule the written file
applies at its size, and saves time_s x (1 - 1/s), s that cell's own speedup for the algorithm the file selects
(1 where the file keeps the library's default). Summed and divided by the ranks' time of the profiled run
(Profile.wall_s, the denominator of every share of the profile), Amdahl's law gives the application speedup the
tuning can deliver at most; the same with the fastest algorithm of every cell is the most any file of these
algorithms could give.

Both read one figure per (cell, algorithm), `algorithm_speedups`: the cell's own speedup across launches for the
algorithm tune decided there, the ratio of the medians for every other. So the estimate can never exceed the
every-algorithm-at-its-best bound (expected_gain asserts it). It did when a cell took its range's figure (issue
58: miniAMR's 8 B allreduce, 47 % of the run, credited with the 6-12 B range's 1.47x, decided on the 12 B cell,
while recursive_doubling ran 1.6x slower than the default at 8 B: "at most 1.213x faster (every measured
algorithm at its best: 1.087x)").

Pure functions over JSON-able rows: the tune step records `measured_cells` (what tune measured per cell, with
its decision across launches), and the tune and verify steps each compute `expected_gain` against their own
manifest's selection (verify's replacements save nothing).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.rules import boundary

if TYPE_CHECKING:
    from tunempi.profile.reader import Profile, UsageRow
    from tunempi.space import Cell
    from tunempi.tune.launch_blocks import CellDecision

#: Rows of the expected-gain table kept in the results (the cells with the most of the application's time).
TABLE_ROWS = 8
#: Below this expected application speedup, no A/B of the application on this machine resolves it (compare's
#: intervals here are several per cent wide: docs/measurements/applications.md).
RESOLVABLE = 1.02

CellKey = tuple[str, int, int, int, int]


def _key(cell: Mapping[str, Any]) -> CellKey:
    return (str(cell["collective"]), int(cell["ranks"]), int(cell["nodes"]), int(cell["ppn"]),
            int(cell["msg_bytes"]))


def measured_cells(medians: Mapping[tuple[Cell, str], float],
                   decisions: Mapping[Cell, CellDecision] | None = None) -> list[dict[str, Any]]:
    """Per cell where tune measured the library's default: its median and every other algorithm's (us, median
    over runs), and tune's decision there across launches (choice, outcome, speedup of the choice against the
    default with its interval: its range's, and under "cell" the cell's own; absent where none was made)."""
    cells: dict[Cell, dict[str, float]] = {}
    for (cell, algorithm), value in medians.items():
        cells.setdefault(cell, {})[algorithm] = round(float(value), 3)
    rows = []
    for cell in sorted(cells, key=lambda c: (c.collective, c.ranks, c.nodes, c.ppn, c.msg_bytes)):
        if DEFAULT_ALGORITHM not in cells[cell]:
            continue
        row: dict[str, Any] = {**cell.to_dict(), "medians": cells[cell]}
        decision = (decisions or {}).get(cell)
        if decision is not None:
            row["decision"] = {"choice": decision.choice, "outcome": decision.outcome}
            if (evidence := decision.evidence()) is not None:
                speedup, low, high, launches = evidence
                row["decision"].update(speedup=round(speedup, 4), low=round(low, 4), high=round(high, 4),
                                       launches=launches)
            if (own := decision.own_evidence()) is not None:
                speedup, low, high, launches = own
                row["decision"]["cell"] = {"speedup": round(speedup, 4), "low": round(low, 4),
                                           "high": round(high, 4), "launches": launches}
        rows.append(row)
    return rows


def applied_cell(size: int, row: Sequence[tuple[int, str]]) -> int:
    """The measured size whose rule a file built from `row` ((msg_bytes, algorithm) of one collective at one
    communicator size, rules.compress_row) applies at `size`: between two measured sizes the lower one's up to
    their boundary where their algorithms differ (rules.boundary), else the nearer one (in log size)."""
    points = sorted(row)
    if not points:
        raise ValueError("no measured sizes")
    below = [p for p in points if p[0] <= size]
    above = [p for p in points if p[0] > size]
    if not below:
        return above[0][0]
    if not above or below[-1][0] == size:
        return below[-1][0]
    (low, low_algorithm), (high, high_algorithm) = below[-1], above[0]
    if low_algorithm != high_algorithm:
        return low if size <= boundary(low, high) else high
    return low if math.log(max(size, 1) / max(low, 1)) <= math.log(high / max(size, 1)) else high


def algorithm_speedups(cell: Mapping[str, Any] | None) -> dict[str, tuple[float, str]]:
    """algorithm -> (s, where it comes from) against the default in a measured cell, from the cell's own figures
    only: the default 1 ("default"); the algorithm tune decided "tuned" there, its speedup across launches in
    this cell ("across launches": the cell's own, never its range's, which neighbouring cells share); every
    other algorithm measured there, the ratio of the medians ("medians"). Empty where the cell was not measured
    with the default."""
    if cell is None:
        return {}
    medians = {a: float(v) for a, v in cell.get("medians", {}).items() if v and float(v) > 0}
    if DEFAULT_ALGORITHM not in medians:
        return {}
    found = {a: (medians[DEFAULT_ALGORITHM] / us, "medians") for a, us in medians.items()}
    found[DEFAULT_ALGORITHM] = (1.0, "default")
    decision = cell.get("decision") or {}
    own = decision.get("cell") or {}
    if decision.get("outcome") == "tuned" and decision.get("choice") != DEFAULT_ALGORITHM and own.get("speedup"):
        found[str(decision["choice"])] = (float(own["speedup"]), "across launches")
    return found


def cell_speedup(algorithm: str, cell: Mapping[str, Any] | None) -> tuple[float, str]:
    """(s, where it comes from) of `algorithm` against the default in a measured cell (algorithm_speedups), 1
    where the file keeps the default ("default") or the cell or the algorithm was not measured ("not
    measured")."""
    if algorithm == DEFAULT_ALGORITHM:
        return 1.0, "default"
    return algorithm_speedups(cell).get(algorithm, (1.0, "not measured"))


def best_speedup(cell: Mapping[str, Any] | None) -> float:
    """The fastest algorithm of a cell against the default, by the figures cell_speedup reads (>= 1: the default
    counts), so no algorithm's cell_speedup there exceeds it."""
    return max((s for s, _ in algorithm_speedups(cell).values()), default=1.0)


def _saved(time_s: float, speedup: float) -> float:
    return time_s * (1.0 - 1.0 / speedup) if speedup > 0 else 0.0


def amdahl(saved_share: float) -> float:
    """The application's speedup when a share of its time goes away (Amdahl's law)."""
    return 1.0 / (1.0 - saved_share) if saved_share < 1.0 else math.inf


def expected_gain(profile: Profile, cells: Iterable[Mapping[str, Any]], selection: Mapping[Cell, str],
                  collectives: Iterable[str]) -> dict[str, Any]:
    """The share of the profiled run the tuning (`selection`: a manifest's cells and algorithms) can save, over
    every usage row of the tuned `collectives`, and the application speedup that gives (see the module's doc).
    `cells`: measured_cells' rows. Rows at a communicator size the selection has no cell for save nothing
    (`unmeasured_share`)."""
    measured = {_key(c): c for c in cells}
    tuned = set(collectives)
    # the selection as the file's rows: (collective, ranks) -> layouts -> [(msg_bytes, algorithm)]
    rows_of: dict[tuple[str, int], dict[tuple[int, int], list[tuple[int, str]]]] = {}
    for cell, algorithm in selection.items():
        rows_of.setdefault((cell.collective, cell.ranks), {}).setdefault((cell.nodes, cell.ppn), []).append(
            (cell.msg_bytes, algorithm))
    wall = profile.wall_s
    totals = {"tuned": 0.0, "changed": 0.0, "saved": 0.0, "best_saved": 0.0, "unmeasured": 0.0}
    table: dict[CellKey, dict[str, Any]] = {}
    for usage in profile.usage():
        if usage.collective not in tuned:
            continue
        totals["tuned"] += usage.time_s
        layouts = rows_of.get((usage.collective, usage.comm_size))
        if not layouts:
            totals["unmeasured"] += usage.time_s
            continue
        layout = (usage.nodes, usage.ppn) if (usage.nodes, usage.ppn) in layouts else min(layouts)
        row = layouts[layout]
        size = applied_cell(usage.msg_size, row)
        algorithm = dict(row)[size]
        key = (usage.collective, usage.comm_size, layout[0], layout[1], size)
        found = measured.get(key)
        speedup, source = cell_speedup(algorithm, found)
        best = best_speedup(found)
        saved, best_saved = _saved(usage.time_s, speedup), _saved(usage.time_s, best)
        assert saved <= best_saved, f"{key} {algorithm}: {speedup} above the best of the cell, {best}"
        totals["saved"] += saved
        totals["best_saved"] += best_saved
        if algorithm != DEFAULT_ALGORITHM:
            totals["changed"] += usage.time_s
        entry = table.setdefault(key, _entry(usage, key, algorithm, speedup, source, best))
        entry["sizes"] = [min(entry["sizes"][0], usage.msg_size), max(entry["sizes"][1], usage.msg_size)]
        entry["calls"] += usage.calls
        entry["time_s"] += usage.time_s
        entry["saved_s"] += saved
    share = {name: (value / wall if wall > 0 else 0.0) for name, value in totals.items()}
    # the estimate within its ceiling: every cell's figure is one of those its best is the largest of
    assert share["saved"] <= share["best_saved"], (share["saved"], share["best_saved"])
    rows = sorted(table.values(), key=lambda r: -r["time_s"])[:TABLE_ROWS]
    for r in rows:
        r["share"] = round(r.pop("time_s") / wall, 6) if wall > 0 else 0.0
        r["saved_share"] = round(r.pop("saved_s") / wall, 6) if wall > 0 else 0.0
    return {"run_s": round(wall, 6), "tuned_share": round(share["tuned"], 6),
            "changed_share": round(share["changed"], 6), "saved_share": round(share["saved"], 6),
            "speedup": round(amdahl(share["saved"]), 4),
            "best_saved_share": round(share["best_saved"], 6), "best_speedup": round(amdahl(share["best_saved"]), 4),
            "unmeasured_share": round(share["unmeasured"], 6), "rows": rows}


def _entry(usage: UsageRow, key: CellKey, algorithm: str, speedup: float, source: str,
           best: float) -> dict[str, Any]:
    return {"collective": key[0], "ranks": key[1], "measured_size": key[4], "sizes": [usage.msg_size] * 2,
            "calls": 0, "time_s": 0.0, "saved_s": 0.0, "algorithm": algorithm, "speedup": round(speedup, 4),
            "source": source, "best_speedup": round(best, 4)}


def below_resolution(expected: float, compared: Mapping[str, Any] | None) -> bool:
    """The expected speedup is too small for compare's A/B to tell from 1: under RESOLVABLE, or inside
    compare's interval where that interval holds 1 as well."""
    if expected < RESOLVABLE:
        return True
    if not compared:
        return False
    low, high = float(compared["low"]), float(compared["high"])
    return low <= 1.0 <= high and low <= expected <= high


__all__ = ["RESOLVABLE", "algorithm_speedups", "amdahl", "applied_cell", "below_resolution", "best_speedup",
           "cell_speedup", "expected_gain", "measured_cells"]
