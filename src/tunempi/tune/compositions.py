"""Composition tuning: measure a collective's hierarchical compositions at a multi-node layout, pick the
fastest usable one, and write it in the library's own form.

A composition is forced for a whole launch (the adapter's Composition.env), so each candidate runs in
an engine launch of its own, next to one launch with the library's default; the engine's strict
selection (the adapter's strict_selection_switch) makes a composition the library cannot use at this
layout fail with the library's "not usable" message: it is recorded as unavailable there and never
selected. Which compositions exist, how they are forced and how they are written is vendor knowledge
(mpi/); this module only measures and compares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.bench.engine import EngineSession, Layout
from tunempi.bench.protocol import MeasureSettings, PointRequest
from tunempi.errors import UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import Composition, TuningFiles, VendorAdapter

DEFAULT = "default"


@dataclass(frozen=True)
class CompositionResult:
    """One composition (or the library's default, name DEFAULT) measured at one point."""

    collective: str
    msg_bytes: int
    name: str
    status: str  # "ok", "unavailable" (the library says it cannot be used here) or "failed"
    median_us: float | None = None
    reason: str = ""

    def as_dict(self) -> dict:
        return {"collective": self.collective, "msg_bytes": self.msg_bytes, "composition": self.name,
                "status": self.status, "median_us": self.median_us, "reason": self.reason}


def measure_compositions(
    library: MPILibrary,
    adapter: VendorAdapter,
    layout: Layout,
    collective: str,
    sizes: Sequence[int],
    *,
    settings: MeasureSettings,
    allocation: NodeAllocation | None = None,
    point_timeout_s: float | None = None,
) -> list[CompositionResult]:
    """Every candidate composition and the library's default, at each size, one launch each."""
    candidates = adapter.composition_candidates(collective, layout.nodes)
    if not candidates:
        raise UsageError(f"{library.name} offers no composition for {collective} at {layout.nodes} node(s)"
                         " (compositions are candidates only where a layout spans several nodes)")
    strict = adapter.strict_selection_switch()
    results: list[CompositionResult] = []
    runs: list[tuple[str, Mapping[str, str]]] = [(DEFAULT, {})] + [(c.name, c.env) for c in candidates]
    for name, forced in runs:
        env = {**adapter.launch_env(), **forced}
        with EngineSession(library, layout, env=env, setup=(strict,) if strict is not None else (),
                           allocation=allocation, point_timeout_s=point_timeout_s) as session:
            for index, msg_bytes in enumerate(sizes):
                outcome = session.measure(PointRequest(id=index + 1, collective=collective, msg_bytes=msg_bytes,
                                                       settings=settings))
                if outcome.ok and outcome.statistics is not None:
                    results.append(CompositionResult(collective, msg_bytes, name, "ok",
                                                     outcome.statistics.median_us))
                elif adapter.says_not_usable(outcome.reason):
                    results.append(CompositionResult(collective, msg_bytes, name, "unavailable",
                                                     reason=outcome.reason))
                else:
                    results.append(CompositionResult(collective, msg_bytes, name, "failed", reason=outcome.reason))
    return results


def select_composition(results: Sequence[CompositionResult]) -> str | None:
    """The composition (never DEFAULT) with the lowest total median over the sizes measured, among those
    that ran at every size; None when none did."""
    sizes = {r.msg_bytes for r in results}
    totals: dict[str, float] = {}
    for name in {r.name for r in results if r.name != DEFAULT}:
        mine = [r for r in results if r.name == name]
        if len(mine) == len(sizes) and all(r.status == "ok" and r.median_us is not None for r in mine):
            totals[name] = sum(r.median_us for r in mine if r.median_us is not None)
    return min(totals, key=lambda name: totals[name]) if totals else None


def write_compositions(adapter: VendorAdapter, collective: str, chosen: str, directory: Path) -> TuningFiles:
    """The chosen composition written in the library's form into `directory`."""
    by_name: dict[str, Composition] = {c.name: c for c in adapter.composition_candidates(collective, nodes=2)}
    if chosen not in by_name:
        raise UsageError(f"{chosen!r} is not a composition of {collective}; have {', '.join(by_name)}")
    return adapter.write_composition_file({collective: by_name[chosen]}, directory)
