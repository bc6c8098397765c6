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

`run_verify` is the whole command as a library call, in steps: `plan_verify` (load and check the
tuning directory), `measure_pairs` (the interleaved runs and the second pass), `apply_replacements`,
`rewrite_files`, `record_verify` (the manifest's `verify` section). Progress goes to a VerifyListener.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tunempi import evidence
from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint
from tunempi.bench.validate import DEFAULT_ALGORITHM
from tunempi.errors import UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.mpi.library import MPILibrary
from tunempi.space import Cell
from tunempi.store.results import utc_timestamp
from tunempi.tune.driver import layout_of
from tunempi.tune.files import rule_sets_for, selection_table, write_tuning_files
from tunempi.tune.manifest import Manifest, SelectionRow
from tunempi.tune.runner import LayoutRunner, ParallelRunner, PointResult
from tunempi.units import format_size

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


def apply_replacements(selection: Mapping[Cell, str], verified: Sequence[VerifiedCell]
                       ) -> tuple[dict[Cell, str], list[VerifiedCell]]:
    """Cells slower beyond noise, estimated slower within noise, or whose tuned run failed go back to
    `default`."""
    fixed = dict(selection)
    out = []
    for v in verified:
        if v.verdict in ("slower", "failed") or (v.verdict == "same" and v.speedup < 1.0):
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


#: What verify measures per point by default (each cell: `repeats` x tuned and default).
VERIFY_SETTINGS = MeasureSettings(warmup=2, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.1)


@dataclass(frozen=True)
class VerifyPlan:
    """A checked tuning directory and the interleaved runs that verify it."""

    manifest: Manifest
    library: MPILibrary
    selection: dict[Cell, str]
    repeats: int
    work: dict[Layout, list[BenchPoint]]

    @property
    def tuned_cells(self) -> int:
        return sum(a != DEFAULT_ALGORITHM for a in self.selection.values())

    @property
    def runs(self) -> int:
        return sum(len(points) for points in self.work.values())


class VerifyListener:
    """Progress of `run_verify`; every method does nothing here (a front end overrides what it shows)."""

    def started(self, plan: VerifyPlan) -> None:
        """The plan is checked; measuring starts."""

    def measured(self, result: PointResult, done: int, total: int) -> None:
        """One run done (`total` grows when the second pass adds runs)."""

    def rewriting(self) -> None:
        """Rules were replaced: the files are being rewritten and smoke-checked."""


@dataclass
class VerifyReport:
    manifest: Manifest
    verified: list[VerifiedCell]
    summary: dict
    replaced: int
    second_pass_cells: int = 0

    def lines(self) -> list[str]:
        """What verify found, as plain text: one line per replaced rule, then the summary."""
        out = [f"replaced {v.cell.collective} {format_size(v.cell.msg_bytes)} at {v.cell.ranks} ranks: "
               f"{v.algorithm} was {'slower within noise' if v.verdict == 'same' else v.verdict} "
               f"(speedup {v.speedup:.3f}, 95% CI {v.ci_low:.3f}..{v.ci_high:.3f}) -> default"
               for v in self.verified if v.replaced]
        n = self.summary
        out.append(
            f"verified {n['compared']} cells: geo-mean speedup over default {n['geo_mean_speedup_compared_after']:.3f}x "
            f"(before replacements {n['geo_mean_speedup_compared_before']:.3f}x; all {n['cells']} cells "
            f"{n['geo_mean_speedup_all_cells']:.3f}x); slower beyond noise: {n['slower_beyond_noise_before']} "
            f"-> {n['slower_beyond_noise_after']} after verify ({n['slower_point_estimate_after']} below 1 "
            f"within noise; {self.second_pass_cells} cells got a second pass)"
            + (f"; files rewritten ({self.replaced} rules -> default)" if self.replaced else "; files unchanged"))
        return out


def plan_verify(directory: Path, *, repeats: int, mpi: str | None = None) -> VerifyPlan:
    """Load the tuning directory, check that its files are there and that `mpi` (default: the manifest's
    library) is the library it was tuned for, and plan the interleaved runs."""
    from tunempi.mpi.discovery import resolve_library

    if repeats < 2:
        raise UsageError(f"--repeats must be at least 2 (a confidence interval needs two pairs), got {repeats}")
    manifest = Manifest.load(directory)
    missing = manifest.missing_files()
    if missing:
        raise UsageError(f"{directory}: files named in the manifest are missing: {', '.join(missing)}")
    recorded = manifest.library
    library = resolve_library(mpi or recorded["prefix"])
    if library.fingerprint != recorded["fingerprint"]:
        raise UsageError(f"{directory} was tuned for {recorded['name']} ({recorded['fingerprint']}), "
                         f"not {library.name} ({library.fingerprint}); give --mpi with that library")
    selection = {row.cell: row.algorithm for row in manifest.selection()}
    return VerifyPlan(manifest, library, selection, repeats, verify_plan(selection, repeats))


def measure_pairs(plan: VerifyPlan, settings: MeasureSettings, topology: str, listener: VerifyListener
                  ) -> tuple[list[PointResult], list[Cell]]:
    """The planned runs, then as many pairs again for the cells that look slower without the evidence to
    say so (a real slowdown is not waved through for lack of runs, nor a good rule dropped for one
    outlier). Returns every result and the cells of the second pass."""
    from tunempi.mpi.discovery import adapter_for
    from tunempi.tune.job import scheduling

    adapter = adapter_for(plan.library)
    multi_node = any(layout.nodes > 1 for layout in plan.work)
    allocation = NodeAllocation.from_environment() if multi_node else None
    system = str(plan.manifest.data.get("system", ""))

    def make_runner(layout: Layout, hosts: NodeAllocation | None) -> LayoutRunner:
        return LayoutRunner(plan.library, adapter, layout, settings=settings, allocation=hosts, system=system)

    runner = ParallelRunner(make_runner, scheduling(topology, allocation), allocation)
    progress = {"done": 0, "total": plan.runs}

    def on_point(result: PointResult) -> None:
        progress["done"] += 1
        listener.measured(result, progress["done"], progress["total"])

    try:
        results = list(runner.run(plan.work, on_point=on_point))
        again = suspicious(evaluate(plan.selection, results))
        if again:
            extra = verify_plan({c: plan.selection[c] for c in again}, plan.repeats, first_run=plan.repeats)
            progress["total"] += sum(len(points) for points in extra.values())
            results += runner.run(extra, on_point=on_point)
    finally:
        runner.close()
    return results, again


def rewrite_files(manifest: Manifest, library: MPILibrary, fixed: Mapping[Cell, str], smoke: bool) -> None:
    """Rule sets and tuning files (smoke-checked) for the selection after replacements, and the manifest's
    selection rows (a replaced row keeps the default's median and says what it replaced)."""
    from tunempi.mpi.discovery import adapter_for

    table = selection_table(fixed, preferred_ppn=manifest.data.get("preferred_ppn"))
    rule_sets = rule_sets_for(table)
    written = write_tuning_files(manifest.directory, library, adapter_for(library), rule_sets,
                                 smoke_ranks=sorted({cell.ranks for cell in fixed}), smoke=smoke)
    manifest.data.update({
        "files": written.files, "env_files": written.env_files, "env": written.env,
        "env_file": written.env_file, "needs_file": list(written.needs_file),
        "rule_sets": {c: rs.to_dict() for c, rs in sorted(rule_sets.items())},
        "smoke": [record.to_dict() for record in written.smoke],
    })
    manifest.data["selection"] = [
        {**SelectionRow(row.cell, fixed[row.cell], row.median_us if fixed[row.cell] == row.algorithm
                        else row.default_us, row.default_us).to_dict(),
         **({"replaced_from": row.algorithm} if fixed[row.cell] != row.algorithm else {})}
        for row in manifest.selection()
    ]


def record_verify(manifest: Manifest, verified: Sequence[VerifiedCell], *, repeats: int, second_pass: int,
                  settings: MeasureSettings, wall_s: float) -> dict:
    """The manifest's `verify` section (every cell, the summary), saved; returns the summary."""
    numbers = summary(verified)
    manifest.data["verify"] = {
        "verified_at": utc_timestamp(), "repeats": repeats, "second_pass_cells": second_pass,
        "time_cap_s": settings.time_cap_s, "wall_s": round(wall_s, 3), "summary": numbers,
        "cells": [v.to_dict() for v in verified],
    }
    manifest.save()
    return numbers


def run_verify(directory: Path, *, repeats: int = 3, settings: MeasureSettings = VERIFY_SETTINGS,
               mpi: str | None = None, topology: str = "serial", smoke: bool = True,
               listener: VerifyListener | None = None) -> VerifyReport:
    """Tuned against default, interleaved per layout; rules slower than the default (beyond noise, or
    by the estimate) go back to default and the files are rewritten (smoke-checked). The manifest's
    `verify` section records every cell."""
    listener = listener or VerifyListener()
    started = time.monotonic()
    plan = plan_verify(directory, repeats=repeats, mpi=mpi)
    listener.started(plan)
    results, again = measure_pairs(plan, settings, topology, listener)
    fixed, verified = apply_replacements(plan.selection, evaluate(plan.selection, results))
    replaced = sum(v.replaced for v in verified)
    if replaced:
        listener.rewriting()
        rewrite_files(plan.manifest, plan.library, fixed, smoke)
    numbers = record_verify(plan.manifest, verified, repeats=repeats, second_pass=len(again), settings=settings,
                            wall_s=time.monotonic() - started)
    return VerifyReport(plan.manifest, verified, numbers, replaced, len(again))
