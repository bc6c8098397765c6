"""`tunempi verify`: the tuned choice against the library's default, side by side, in the same launch.

For every cell of the selection whose choice is not `default`, the engine measures the tuned algorithm
and the library's own choice alternately, `repeats` times, in ONE launch per layout (the algorithm is
switched through MPI_T between points; the order alternates each repetition so that drift of a shared
machine hits both sides alike). Each repetition gives a pair of medians measured seconds apart, and the
shared paired-evidence rule (tunempi.evidence, docs/evidence.md) gives the speedup default/tuned, its
95 % interval and the verdict: a cell is *slower beyond noise* when the interval lies below 1 and the
tuned rule lost at least 3 of 4 pairs. Its rule is replaced by `default`, and so is the rule of a cell
whose estimate stays below 1 after the second pass (no evidence the rule helps, and the best estimate
says it hurts: the library's own choice costs nothing to keep). The rule sets and files are rewritten
(and smoke-checked again), and verify says so. A verified tuning result therefore keeps no measured
point that it estimates slower than the default.

A composition `tune` wrote at a multi-node layout (tune/compositions.py) is verified the same way: it is
forced for a whole launch, so each repetition is one launch of the written composition and one of the
library's default at that layout (order alternating), each measuring the composition sizes; every
(repetition, size) is a pair. One that is slower beyond noise, estimated slower, or failed is dropped
(`compositions_to_drop`; where the library takes one composition for every collective, all of them go):
its file is rewritten without it or deleted, and the manifest no longer activates it.

The command as a library call, in steps, is tune/verify_run.py (this module is what the manifest records).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tunempi import evidence
from tunempi.bench.engine import Layout
from tunempi.bench.sweep import BenchPoint
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.space import Cell
from tunempi.tune.compositions import DEFAULT, CompositionResult
from tunempi.tune.driver import layout_of
from tunempi.tune.runner import PointResult

VERDICTS: tuple[str, ...] = ("faster", "same", "slower", "default", "failed")


@dataclass(frozen=True)
class VerifiedCell:
    """Tuned against default in one cell. speedup = default time / tuned time (> 1: tuning helps)."""

    cell: Cell
    algorithm: str
    tuned_us: float | None
    default_us: float | None
    speedup: float
    ci_low: float
    ci_high: float
    verdict: str  # one of VERDICTS
    replaced: bool = False

    def to_dict(self) -> dict:
        def r(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(float(x), 5)

        return {**self.cell.to_dict(), "algorithm": self.algorithm, "tuned_us": r(self.tuned_us),
                "default_us": r(self.default_us), "speedup": r(self.speedup), "ci_low": r(self.ci_low),
                "ci_high": r(self.ci_high), "verdict": self.verdict, "replaced": self.replaced}

    @classmethod
    def from_dict(cls, data: Mapping) -> VerifiedCell:
        def f(x: float | str | None) -> float:
            return float("nan") if x is None else float(x)

        return cls(Cell.from_dict(data), str(data["algorithm"]), data.get("tuned_us"), data.get("default_us"),
                   f(data.get("speedup")), f(data.get("ci_low")), f(data.get("ci_high")), str(data["verdict"]),
                   bool(data.get("replaced", False)))


def verify_plan(selection: Mapping[Cell, str], repeats: int, *, first_run: int = 0) -> dict[Layout, list[BenchPoint]]:
    """Per layout: tuned and default points of every non-default cell, interleaved, order alternating per
    repetition (evidence.pair_order); the point's `run` is the repetition (from `first_run`: a second
    pass adds pairs)."""
    work: dict[Layout, list[BenchPoint]] = {}
    cells = sorted(c for c, a in selection.items() if a != DEFAULT_ALGORITHM)
    for run in range(first_run, first_run + repeats):
        for cell in cells:  # a cell's pair is measured back to back
            work.setdefault(layout_of(cell), []).extend(
                BenchPoint(cell.collective, name, cell.msg_bytes, run)
                for name in evidence.pair_order(selection[cell], DEFAULT_ALGORITHM, run))
    return work


def evaluate(selection: Mapping[Cell, str], results: Sequence[PointResult]) -> list[VerifiedCell]:
    """One VerifiedCell per selection cell, from the interleaved results of `verify_plan`."""
    runs: dict[tuple[Cell, str, int], float] = {}
    for result in results:
        m = result.measurement
        if m.ok and not m.errors and m.median_us is not None:
            cell = Cell(m.collective, m.ranks, m.nodes, m.ppn, m.msg_bytes)
            runs[(cell, m.algorithm, m.run)] = float(m.median_us)
    verified = []
    for cell, algorithm in sorted(selection.items()):
        if algorithm == DEFAULT_ALGORITHM:
            verified.append(VerifiedCell(cell, algorithm, None, None, 1.0, 1.0, 1.0, "default"))
            continue
        repetitions = sorted({run for (c, a, run) in runs if c == cell and a == algorithm})
        pairs = [(runs[(cell, algorithm, r)], runs[(cell, DEFAULT_ALGORITHM, r)]) for r in repetitions
                 if (cell, DEFAULT_ALGORITHM, r) in runs]
        if not pairs:
            nan = float("nan")
            verified.append(VerifiedCell(cell, algorithm, None, None, nan, nan, nan, "failed"))
            continue
        tuned, default = [p[0] for p in pairs], [p[1] for p in pairs]
        found = evidence.compare(tuned, default)
        verified.append(VerifiedCell(cell, algorithm, float(np.median(tuned)), float(np.median(default)),
                                     found.speedup, found.low, found.high, found.verdict))
    return verified


#: A cell whose speedup estimate is below this but not slower beyond noise gets a second pass of pairs.
SUSPICIOUS_BELOW = 0.97


def suspicious(verified: Sequence[VerifiedCell], threshold: float = SUSPICIOUS_BELOW) -> list[Cell]:
    """Cells that look slower than default without the evidence to say so: measured again."""
    return [v.cell for v in verified if v.verdict == "same" and v.speedup < threshold]


def goes_back_to_default(verdict: str, speedup: float) -> bool:
    """The rule for a tuned choice against the library's: slower beyond noise, failed, or no evidence
    either way with the estimate below 1 (the library's own choice costs nothing to keep)."""
    return verdict in ("slower", "failed") or (verdict == "same" and speedup < 1.0)


def apply_replacements(selection: Mapping[Cell, str], verified: Sequence[VerifiedCell], *, whole: bool = False
                       ) -> tuple[dict[Cell, str], list[VerifiedCell]]:
    """Cells slower beyond noise, estimated slower within noise, or whose tuned run failed go back to
    `default`. whole: the library's files select per collective as a whole (Intel MPI: a selection string
    replaces its own choice at every size, tune.files.whole_collectives), so a collective is judged as one:
    every cell of it goes back to default when one cell is slower beyond noise or failed, and a cell only
    estimated slower within noise stays (going back would cost every other cell of the collective)."""
    fixed = dict(selection)
    out = []
    dropped = {v.cell.collective for v in verified if v.verdict in ("slower", "failed")} if whole else set()
    for v in verified:
        back = (v.cell.collective in dropped and v.algorithm != DEFAULT_ALGORITHM) if whole else \
            goes_back_to_default(v.verdict, v.speedup)
        if back:
            fixed[v.cell] = DEFAULT_ALGORITHM
            v = VerifiedCell(v.cell, v.algorithm, v.tuned_us, v.default_us, v.speedup, v.ci_low, v.ci_high,
                             v.verdict, replaced=True)
        out.append(v)
    return fixed, out


def summary(verified: Sequence[VerifiedCell]) -> dict[str, float | int]:
    """Geo-mean speedup over default before and after the replacements, and counts."""
    measured = [v for v in verified if v.verdict not in ("default", "failed")]
    before = [v.speedup for v in measured]
    after = [1.0 if v.replaced else v.speedup for v in measured]
    everywhere = after + [1.0] * (len(verified) - len(measured))

    def geo(values: Sequence[float]) -> float:
        return float(math.exp(np.mean(np.log(values)))) if values else 1.0

    return {
        "cells": len(verified), "compared": len(measured),
        "geo_mean_speedup_compared_before": geo(before), "geo_mean_speedup_compared_after": geo(after),
        "geo_mean_speedup_all_cells": geo(everywhere),
        "slower_beyond_noise_before": sum(v.verdict == "slower" for v in verified),
        "slower_beyond_noise_after": sum(v.verdict == "slower" and not v.replaced for v in verified),
        "slower_point_estimate_after": sum(v.speedup < 1.0 and not v.replaced for v in measured),
        "faster_beyond_noise": sum(v.verdict == "faster" for v in verified),
        "replaced": sum(v.replaced for v in verified),
        "failed": sum(v.verdict == "failed" for v in verified),
    }


@dataclass(frozen=True)
class VerifiedComposition:
    """A written composition against the library's default at its layout. speedup = default / composition
    over `pairs` pairs (one per repetition and size); verdict one of VERDICTS ("default" never)."""

    collective: str
    composition: str
    layout: tuple[int, int, int]  # (ranks, nodes, ppn)
    pairs: int
    speedup: float
    ci_low: float
    ci_high: float
    verdict: str
    dropped: bool = False

    def to_dict(self) -> dict:
        def r(x: float) -> float | None:
            return None if not math.isfinite(x) else round(float(x), 5)

        return {"collective": self.collective, "composition": self.composition, "layout": list(self.layout),
                "pairs": self.pairs, "speedup": r(self.speedup), "ci_low": r(self.ci_low), "ci_high": r(self.ci_high),
                "verdict": self.verdict, "dropped": self.dropped}

    @classmethod
    def from_dict(cls, data: Mapping) -> VerifiedComposition:
        def f(x: float | str | None) -> float:
            return float("nan") if x is None else float(x)

        ranks, nodes, ppn = (int(v) for v in data["layout"])
        return cls(str(data["collective"]), str(data["composition"]), (ranks, nodes, ppn), int(data.get("pairs", 0)),
                   f(data.get("speedup")), f(data.get("ci_low")), f(data.get("ci_high")), str(data["verdict"]),
                   bool(data.get("dropped", False)))


def evaluate_composition(collective: str, composition: str, layout: tuple[int, int, int],
                         repetitions: Sequence[Sequence[CompositionResult]]) -> VerifiedComposition:
    """The paired evidence from `repetitions` (each: one launch of `composition` and one of DEFAULT, as
    `measure_compositions(names=...)` returns them): a pair per repetition and size where both ran."""
    tuned: list[float] = []
    default: list[float] = []
    for results in repetitions:
        medians = {(r.name, r.msg_bytes): r.median_us for r in results
                   if r.status == "ok" and r.median_us is not None and r.median_us > 0}
        for size in sorted({r.msg_bytes for r in results}):
            mine, theirs = medians.get((composition, size)), medians.get((DEFAULT, size))
            if mine is not None and theirs is not None:
                tuned.append(mine)
                default.append(theirs)
    if not tuned:
        nan = float("nan")
        return VerifiedComposition(collective, composition, layout, 0, nan, nan, nan, "failed")
    found = evidence.compare(tuned, default)
    return VerifiedComposition(collective, composition, layout, found.pairs, found.speedup, found.low, found.high,
                               found.verdict)


def compositions_to_drop(verified: Sequence[VerifiedComposition], *, applies_to_all: bool) -> set[str]:
    """Collectives whose composition goes: slower beyond noise, estimated slower within noise, or failed (as
    for a cell's rule). Where the library takes one composition for every collective, one such verdict
    drops it for all of them."""
    drop = {v.collective for v in verified if goes_back_to_default(v.verdict, v.speedup)}
    return {v.collective for v in verified} if drop and applies_to_all else drop
