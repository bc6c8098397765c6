"""Composition tuning: measure a collective's hierarchical compositions at a multi-node layout, pick the
fastest usable one, and write it in the library's own form.

A composition is forced for a whole launch (the adapter's Composition.env), so each candidate runs in
an engine launch of its own, next to one launch with the library's default; the engine's strict
selection (the adapter's strict_selection_switch) makes a composition the library cannot use at this
layout fail with the library's "not usable" message: it is recorded as unavailable there and never
selected. Which compositions exist, how they are forced and how they are written is vendor knowledge
(mpi/); this module only measures and compares.

`choose_compositions` is the rule `tunempi tune` applies: a composition is written only where it beats the
library's default, measured the same way, by COMPOSITION_MARGIN; a library that takes one composition for
every collective (the adapter's `composition_applies_to_all`) gets one only where every tuned collective
chose it.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunempi.bench.engine import EngineSession, Layout
from tunempi.bench.protocol import SET_KEEP, MeasureSettings
from tunempi.bench.sweep import BenchPoint, Selection, measure_point
from tunempi.errors import MPIError, UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import Composition, TuningFiles, VendorAdapter

DEFAULT = "default"

#: A composition is written only if its total median over the sizes measured is at least this much below the
#: library default's: each side is one median per size from a launch of its own on a shared node whose
#: run-to-run noise is several % (docs/tune.md, "Measured"); a smaller lead is as likely noise as a real
#: difference, and keeping the library's own choice costs nothing.
COMPOSITION_MARGIN = 0.05

#: A composition's points select nothing themselves: the launch's environment forced it.
_FORCED_AT_LAUNCH = Selection(cvar=None, set_value=SET_KEEP, new_communicator=False)


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompositionResult:
        median = data.get("median_us")
        return cls(str(data["collective"]), int(data["msg_bytes"]), str(data["composition"]), str(data["status"]),
                   float(median) if median is not None else None, str(data.get("reason", "")))


@dataclass(frozen=True)
class CompositionChoice:
    """What was decided for one collective: `chosen` is written, None keeps the library's default (`reason`
    says why either way); `best` is the fastest composition that ran at every size, with its and the
    default's total medians over the sizes."""

    collective: str
    chosen: str | None
    reason: str
    best: str | None = None
    best_us: float | None = None
    default_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompositionChoice:
        return cls(str(data["collective"]), data.get("chosen"), str(data.get("reason", "")), data.get("best"),
                   data.get("best_us"), data.get("default_us"))


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
    retries: int = 2,
    names: Sequence[str] | None = None,
) -> list[CompositionResult]:
    """Every candidate composition and the library's default (or only `names`, DEFAULT among them, launched
    in that order: `verify`'s pairs), at each size, one launch each; each point as bench and tune measure
    theirs (`bench.sweep.measure_point`: a disturbed point measured again up to `retries` times, the
    library's refusal marked not usable)."""
    candidates = adapter.composition_candidates(collective, layout.nodes)
    if not candidates:
        raise UsageError(f"{library.name} offers no composition for {collective} at {layout.nodes} node(s)"
                         " (compositions are candidates only where a layout spans several nodes)")
    strict = adapter.strict_selection_switch()
    results: list[CompositionResult] = []
    runs: list[tuple[str, Mapping[str, str]]] = [(DEFAULT, {})] + [(c.name, c.env) for c in candidates]
    if names is not None:
        known = dict(runs)
        unknown = [name for name in names if name not in known]
        if unknown:
            raise UsageError(f"{', '.join(unknown)}: not a composition of {collective} in {library.name}; have "
                             f"{', '.join(c.name for c in candidates)}")
        runs = [(name, known[name]) for name in names]
    for name, forced in runs:
        env = {**adapter.launch_env(), **forced}
        mine: list[CompositionResult] = []
        try:
            with EngineSession(library, layout, env=env, setup=(strict,) if strict is not None else (),
                               allocation=allocation, point_timeout_s=point_timeout_s) as session:
                next_id = functools.partial(next, itertools.count(1))
                for msg_bytes in sizes:
                    # The composition is forced for the whole launch: nothing to switch per point.
                    outcome = measure_point(session, BenchPoint(collective, name, msg_bytes), _FORCED_AT_LAUNCH,
                                            settings, next_id=next_id, retries=retries,
                                            says_not_usable=adapter.says_not_usable)
                    if outcome.ok and outcome.statistics is not None:
                        mine.append(CompositionResult(collective, msg_bytes, name, "ok",
                                                      outcome.statistics.median_us))
                    else:
                        status = "unavailable" if outcome.not_usable else "failed"
                        mine.append(CompositionResult(collective, msg_bytes, name, status, reason=outcome.reason))
        except MPIError as exc:  # the launch itself failed: every size not measured is failed, with why
            done = {r.msg_bytes for r in mine}
            mine += [CompositionResult(collective, size, name, "failed", reason=str(exc))
                     for size in sizes if size not in done]
        results += mine
    return results


def total_medians(results: Sequence[CompositionResult]) -> dict[str, float]:
    """Name (DEFAULT too) -> sum of its medians over the sizes, for those that ran at every size."""
    sizes = {r.msg_bytes for r in results}
    totals: dict[str, float] = {}
    for name in sorted({r.name for r in results}):
        mine = [r for r in results if r.name == name]
        if {r.msg_bytes for r in mine} == sizes and all(r.status == "ok" and r.median_us is not None for r in mine):
            totals[name] = sum(r.median_us for r in mine if r.median_us is not None)
    return totals


def select_composition(results: Sequence[CompositionResult]) -> str | None:
    """The composition (never DEFAULT) with the lowest total median over the sizes measured, among those
    that ran at every size; None when none did."""
    totals = {name: total for name, total in total_medians(results).items() if name != DEFAULT}
    return min(totals, key=lambda name: totals[name]) if totals else None


def choose_composition(collective: str, results: Sequence[CompositionResult], *,
                       margin: float = COMPOSITION_MARGIN) -> CompositionChoice:
    """The fastest usable composition if its total beats the default's by `margin`, else the default kept."""
    totals = total_medians(results)
    best = select_composition(results)
    default_us = totals.get(DEFAULT)
    if best is None:
        return CompositionChoice(collective, None, "no composition ran at every size (none usable here)",
                                 default_us=default_us)
    best_us = totals[best]
    if default_us is None:
        return CompositionChoice(collective, None, "the library's default did not run at every size: nothing to "
                                 "compare with", best, best_us)
    lead = 1.0 - best_us / default_us if default_us > 0 else 0.0
    if lead >= margin:
        return CompositionChoice(collective, best, f"{best} {lead:.0%} faster than the default "
                                 f"({best_us:.1f} vs {default_us:.1f} us over the sizes)", best, best_us, default_us)
    return CompositionChoice(collective, None, f"not faster than the default by {margin:.0%}: best {best} "
                             f"{best_us:.1f} vs {default_us:.1f} us over the sizes", best, best_us, default_us)


def choose_compositions(results: Mapping[str, Sequence[CompositionResult]], *, applies_to_all: bool = False,
                        margin: float = COMPOSITION_MARGIN) -> dict[str, CompositionChoice]:
    """`choose_composition` per collective; where the library takes one composition for every collective
    (`applies_to_all`: Open MPI's component), it is chosen only if every collective chose the same one."""
    choices = {c: choose_composition(c, found, margin=margin) for c, found in sorted(results.items())}
    chosen = {choice.chosen for choice in choices.values()}
    if applies_to_all and choices and (len(chosen) != 1 or None in chosen):
        said = ", ".join(f"{c} {choice.chosen or 'default'}" for c, choice in choices.items())
        choices = {c: dataclasses.replace(
            choice, chosen=None,
            reason=f"the library takes one composition for all collectives and they did not all choose one "
                   f"({said}); {choice.reason}") if choice.chosen is not None else choice
            for c, choice in choices.items()}
    return choices


def write_composition_choices(adapter: VendorAdapter, chosen: Mapping[str, str], directory: Path,
                              nodes: int = 2) -> TuningFiles:
    """Every collective's chosen composition written together (one file per library) into `directory`."""
    compositions: dict[str, Composition] = {}
    for collective, name in chosen.items():
        by_name = {c.name: c for c in adapter.composition_candidates(collective, nodes=max(nodes, 2))}
        if name not in by_name:
            raise UsageError(f"{name!r} is not a composition of {collective}; have {', '.join(by_name)}")
        compositions[collective] = by_name[name]
    return adapter.write_composition_file(compositions, directory)
