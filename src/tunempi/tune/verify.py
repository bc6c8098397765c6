"""`tunempi verify`: the written files against the library's default, launch after launch, as the
application's own launch will see them.

For every repetition, each layout of a tuned cell gets two fresh launches, one under the tuning files and
one without them, in alternating order (ABBA, so that drift of a shared machine hits both sides alike),
each measuring every tuned cell (file_launches.RUNS_PER_LAUNCH times: the launch's value is their median)
with nothing switched at run time (tune/verify_run.py
`measure_under_files`). Issue 39 is why: a figure switched through MPI_T inside one launch, which is how
tune explores, did not predict what the written file does in a launch of its own (MPICH's default 4x off,
Open MPI's allgather ring 2.95x slower under the file than in-launch). The launch is also a first-order
factor here (ReproMPI; on this VM one launch can favour an algorithm across a whole range of sizes by
10-30 %), so a verdict must hold across launches, not across runs of one launch.

The unit judged is the *rule*, as the file writes it: a run of neighbouring sizes of one layout where
the tuning selects one algorithm (`rules_of`). Its block values (log default/tuned, one per cell and
launch pair) go to the across-launch form of the shared evidence rule (evidence.compare_launches on the
spread of the rule's own launch means: docs/evidence.md), which gives the speedup default/tuned, its
95 % interval and the verdict; every cell of the rule carries it, and keeps its own estimate and verdict
across the launches too. **A rule stays only where that evidence says it is faster** (goes_back_to_default),
and in an undecided rule, the cells its own launches call faster beyond noise (the rule is split there);
an undecided rule with a promising estimate gets more passes of launches first (up to
verify_run.MAX_PASSES). A cell slower beyond
noise on its own goes back too, whatever its rule's verdict. The rule sets and files are rewritten (and
smoke-checked again), and verify says so.

The figures verify reports come from launches that did not choose the rules: after the replacements, the
final files are measured again against the default in `repeats` new launch pairs (`held_out`), so the
winner's curse of keeping the rules that happened to look best does not inflate them. A held-out cell slower
beyond noise (`slower_beyond_noise`) goes back too (issue 58: the figures a user is shown must not call a
shipped rule slower), and the rewritten files get a new held-out round (verify_run.hold_out_rounds); each such
cell is recorded (`HeldOutSendBack`), sent back or with the reason it could not be.

A composition `tune` wrote at a multi-node layout (tune/compositions.py) is verified the same way: it is
forced for a whole launch, so each repetition is one launch of the written composition and one of the
library's default at that layout (order alternating), each measuring the composition sizes; every
(repetition, size) is a pair. One that is slower beyond noise or failed is dropped
(`compositions_to_drop`; where the library takes one composition for every collective, all of them go):
its file is rewritten without it or deleted, and the manifest no longer activates it.

The command as a library call, in steps, is tune/verify_run.py (this module is what the manifest records).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tunempi import evidence
from tunempi.bench.engine import Layout
from tunempi.bench.sweep import BenchPoint
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.space import Cell
from tunempi.store.results import Measurement
from tunempi.tune.compositions import DEFAULT, CompositionResult
from tunempi.tune.driver import layout_of
from tunempi.tune.machine_state import StatesMet, in_reference, launch_probes, same_state
from tunempi.tune.runner import PointResult

VERDICTS: tuple[str, ...] = ("faster", "same", "slower", "default", "failed")


@dataclass(frozen=True)
class VerifiedCell:
    """Tuned against default in one cell. speedup = default time / tuned time (> 1: tuning helps), with its
    interval and verdict, are those of the cell's rule across `launches` launches (its `rule_cells` cells
    from size `rule_from` on); `own_speedup` and `own_verdict` are the cell's own launches alone (tuned_us /
    default_us the medians of its pairs)."""

    cell: Cell
    algorithm: str
    tuned_us: float | None
    default_us: float | None
    speedup: float
    ci_low: float
    ci_high: float
    verdict: str  # one of VERDICTS
    replaced: bool = False
    rule_cells: int = 1
    launches: int = 0
    own_speedup: float = float("nan")
    own_verdict: str = ""
    rule_from: int = -1  # the rule's smallest size; -1: the cell's own

    @property
    def rule(self) -> tuple[str, int, int, int, int]:
        """Which rule of the file the cell belongs to (its layout and first size)."""
        c = self.cell
        return c.collective, c.ranks, c.nodes, c.ppn, c.msg_bytes if self.rule_from < 0 else self.rule_from

    def to_dict(self) -> dict:
        def r(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else round(float(x), 5)

        return {**self.cell.to_dict(), "algorithm": self.algorithm, "tuned_us": r(self.tuned_us),
                "default_us": r(self.default_us), "speedup": r(self.speedup), "ci_low": r(self.ci_low),
                "ci_high": r(self.ci_high), "verdict": self.verdict, "replaced": self.replaced,
                "rule_cells": self.rule_cells, "launches": self.launches, "own_speedup": r(self.own_speedup),
                "own_verdict": self.own_verdict, "rule_from": self.rule_from}

    @classmethod
    def from_dict(cls, data: Mapping) -> VerifiedCell:
        def f(x: float | str | None) -> float:
            return float("nan") if x is None else float(x)

        return cls(Cell.from_dict(data), str(data["algorithm"]), data.get("tuned_us"), data.get("default_us"),
                   f(data.get("speedup")), f(data.get("ci_low")), f(data.get("ci_high")), str(data["verdict"]),
                   bool(data.get("replaced", False)), int(data.get("rule_cells", 1)), int(data.get("launches", 0)),
                   f(data.get("own_speedup")), str(data.get("own_verdict", "")),
                   int(data.get("rule_from", -1)))


@dataclass(frozen=True)
class HeldOutSendBack:
    """A tuned cell the held-out launches of round `round` (1: the first) found slower beyond noise, or that went
    back with one (a library whose files cannot select it apart: a whole collective), with those launches'
    figures (`cell`, replaced where it went back); `why_not`: why verify could not send it back ("": it did)."""

    cell: VerifiedCell
    round: int
    why_not: str = ""

    @property
    def sent_back(self) -> bool:
        return not self.why_not

    def to_dict(self) -> dict:
        return {**self.cell.to_dict(), "round": self.round, "why_not": self.why_not}

    @classmethod
    def from_dict(cls, data: Mapping) -> HeldOutSendBack:
        return cls(VerifiedCell.from_dict(data), int(data.get("round", 1)), str(data.get("why_not", "")))


@dataclass(frozen=True)
class DeadlineStop:
    """Where verify stopped at its deadline: `launches` measured of `planned`; the tuned cells it kept as tune
    decided them, unjudged (fewer than two launch pairs of their layout measured: a verdict needs two), the
    written compositions likewise, and the tuned cells the held-out launches did not reach."""

    launches: int
    planned: int
    unverified: int = 0
    compositions_unverified: int = 0
    not_held_out: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, int]) -> DeadlineStop:
        return cls(**{f.name: int(data.get(f.name, 0)) for f in dataclasses.fields(cls)})

    def line(self) -> str:
        kept = [f"{n} tuned cell{'' if n == 1 else 's'} kept as tune decided, unverified (fewer than 2 launch pairs "
                f"of their layout measured)" if (n := self.unverified) else "",
                f"{n} composition{'' if n == 1 else 's'} kept unverified" if (n := self.compositions_unverified)
                else "",
                f"{n} tuned cell{'' if n == 1 else 's'} not held out" if (n := self.not_held_out) else ""]
        return (f"stopped at its deadline after {self.launches} of {self.planned} planned launches; what it measured "
                "is judged and kept" + "".join(f"; {k}" for k in kept if k))


def verify_plan(selection: Mapping[Cell, str], repeats: int, *, first_run: int = 0) -> dict[Layout, list[BenchPoint]]:
    """Per layout: tuned and default points of every non-default cell, interleaved, order alternating per
    repetition (evidence.pair_order); the point's `run` is the repetition, which is measured in a launch of
    its own (from `first_run`: a further pass adds launches)."""
    work: dict[Layout, list[BenchPoint]] = {}
    cells = sorted(c for c, a in selection.items() if a != DEFAULT_ALGORITHM)
    for run in range(first_run, first_run + repeats):
        for cell in cells:  # a cell's pair is measured back to back
            work.setdefault(layout_of(cell), []).extend(
                BenchPoint(cell.collective, name, cell.msg_bytes, run)
                for name in evidence.pair_order(selection[cell], DEFAULT_ALGORITHM, run))
    return work


def rules_of(selection: Mapping[Cell, str]) -> list[list[Cell]]:
    """The tuned rules as the files write them: per layout, each run of neighbouring sizes (neighbours among
    the selection's cells of that layout) with one algorithm other than `default`, smallest size first."""
    def layout(cell: Cell) -> tuple[str, int, int, int]:
        return cell.collective, cell.ranks, cell.nodes, cell.ppn

    rules = []
    for _, cells in itertools.groupby(sorted(selection, key=lambda c: (*layout(c), c.msg_bytes)), key=layout):
        for algorithm, run in itertools.groupby(cells, key=selection.__getitem__):
            if algorithm != DEFAULT_ALGORITHM:
                rules.append(list(run))
    return rules


Pairs = dict[Cell, dict[int, tuple[float, float]]]


def _launch_key(m: Measurement) -> tuple[int, int, int, int, bool]:
    """The launch a verify point ran in: its layout, repetition and side (under the files or not)."""
    return m.ranks, m.nodes, m.ppn, m.run, m.algorithm == DEFAULT_ALGORITHM


def _pairs(selection: Mapping[Cell, str], results: Sequence[PointResult]
           ) -> tuple[Pairs, dict[Cell, dict[int, tuple[float | None, float | None]]]]:
    """(tuned, default) medians per tuned cell and repetition (= launch) where both sides ran (a launch's
    value for a cell: the median of its runs there, file_launches.RUNS_PER_LAUNCH), and the probes of the two
    launches (machine_state.launch_probes: the median of each launch's points' probes, where steady)."""
    measured: dict[tuple[Cell, str, int], list[float]] = {}
    for result in results:
        m = result.measurement
        if m.ok and not m.errors and m.median_us is not None:
            cell = Cell(m.collective, m.ranks, m.nodes, m.ppn, m.msg_bytes)
            measured.setdefault((cell, m.algorithm, m.run), []).append(float(m.median_us))
    runs = {key: float(np.median(values)) for key, values in measured.items()}
    probes = launch_probes((_launch_key(r.measurement), r.probe_us) for r in results)
    pairs: Pairs = {}
    states: dict[Cell, dict[int, tuple[float | None, float | None]]] = {}
    for (cell, algorithm, run), tuned in runs.items():
        if algorithm == selection.get(cell) and algorithm != DEFAULT_ALGORITHM \
                and (cell, DEFAULT_ALGORITHM, run) in runs:
            pairs.setdefault(cell, {})[run] = (tuned, runs[(cell, DEFAULT_ALGORITHM, run)])
            layout = (cell.ranks, cell.nodes, cell.ppn, run)
            states.setdefault(cell, {})[run] = (probes.get((*layout, False)), probes.get((*layout, True)))
    return pairs, states


LayoutKey = tuple[int, int, int]  # ranks, nodes, ppn


def split_by_state(pairs: Pairs, states: Mapping[Cell, Mapping[int, tuple[float | None, float | None]]],
                   reference_us: Mapping[LayoutKey, float] | None = None) -> tuple[Pairs, Pairs, StatesMet]:
    """The pairs whose two launches were in the machine's reference state at their layout (the fastest probe
    among the layout's launches and `reference_us`, the tune's there), those in one other state, and what was
    met; a pair whose two launches met different states is in neither (machine_state)."""
    seen: dict[LayoutKey, list[float]] = {}
    for cell, runs in states.items():
        seen.setdefault((cell.ranks, cell.nodes, cell.ppn), []).extend(
            p for pair in runs.values() for p in pair if p is not None)
    references = {key: min([*probes, *([reference_us[key]] if reference_us and key in reference_us else [])],
                           default=None) for key, probes in seen.items()}
    in_ref: Pairs = {}
    other: Pairs = {}
    launches: dict[str, set[tuple]] = {"reference": set(), "other": set(), "mixed": set()}
    for cell, runs in pairs.items():
        reference = references.get((cell.ranks, cell.nodes, cell.ppn))
        for run, pair in runs.items():
            tuned_probe, default_probe = states.get(cell, {}).get(run, (None, None))
            key = (cell.ranks, cell.nodes, cell.ppn, run)
            if not same_state(tuned_probe, default_probe):
                launches["mixed"].add(key)
            elif in_reference(tuned_probe, reference) and in_reference(default_probe, reference):
                in_ref.setdefault(cell, {})[run] = pair
                launches["reference"].add(key)
            else:
                other.setdefault(cell, {})[run] = pair
                launches["other"].add(key)
    ratios = [max(probes) / reference for key, probes in seen.items()
              if probes and (reference := references[key]) is not None]
    met = StatesMet(len(launches["reference"]), len(launches["other"]), len(launches["mixed"]),
                    max(ratios, default=1.0))
    return in_ref, other, met


def _blocks(rule: Sequence[Cell], pairs: Mapping[Cell, Mapping[int, tuple[float, float]]]) -> np.ndarray:
    """The rule's block values, cells (those with a pair) x the launches where each of them has one:
    log(default / tuned) of the launch's pair."""
    cells = [cell for cell in rule if pairs.get(cell)]
    launches = sorted(set.intersection(*(set(pairs[cell]) for cell in cells))) if cells else []
    return np.array([[evidence.launch_log_ratio([pairs[cell][run][0]], [pairs[cell][run][1]]) for run in launches]
                     for cell in cells]).reshape(len(cells), len(launches))


def _judged(rule: Sequence[Cell], in_ref: Pairs, other: Pairs) -> tuple[Pairs, evidence.Comparison | None]:
    """The pairs a rule is judged on and the judgment: its launches in the reference state where it has two
    (every cell of the rule in both), else every launch in one state; vetoed to "slower" where the launches
    of another state say it is slower there (a rule that loses in one of the machine's states is a loss)."""
    ref_matrix = _blocks(rule, in_ref)
    if ref_matrix.shape[1] >= 2:
        judged = in_ref
        found = evidence.compare_launches(ref_matrix)
        others = _blocks(rule, other)
        if others.shape[1] >= 2:
            veto = evidence.compare_launches(others)
            if veto.verdict == "slower" and found.verdict != "slower":
                found = veto
        return judged, found
    merged: Pairs = {cell: {**other.get(cell, {}), **in_ref.get(cell, {})} for cell in {*in_ref, *other}}
    matrix = _blocks(rule, merged)
    return merged, evidence.compare_launches(matrix) if matrix.size else None


def evaluate(selection: Mapping[Cell, str], results: Sequence[PointResult], *,
             reference_us: Mapping[LayoutKey, float] | None = None) -> list[VerifiedCell]:
    """One VerifiedCell per selection cell, from the results of `verify_plan` (each repetition one launch):
    each tuned cell carries its rule's verdict across launches (evidence.compare_launches on the rule's
    cells x launches, on the spread of its own launch means), and its own estimate and
    verdict, on the launch pairs of the machine's reference state (`_judged`, machine_state; `reference_us`:
    the tune's fastest probe per layout). A cell with no pair (its tuned run failed) is "failed" whatever
    its rule."""
    return evaluate_states(selection, results, reference_us=reference_us)[0]


def evaluate_states(selection: Mapping[Cell, str], results: Sequence[PointResult], *,
                    reference_us: Mapping[LayoutKey, float] | None = None) -> tuple[list[VerifiedCell], StatesMet]:
    """`evaluate`, and the machine states its launches met."""
    nan = float("nan")
    all_pairs, states = _pairs(selection, results)
    in_ref, other, met = split_by_state(all_pairs, states, reference_us)
    verified = {cell: VerifiedCell(cell, algorithm, None, None, 1.0, 1.0, 1.0, "default")
                for cell, algorithm in selection.items() if algorithm == DEFAULT_ALGORITHM}
    for rule in rules_of(selection):
        # on the rule's own launches alone: the rules' launch spreads differ too much to pool (one wild rule
        # widened every other rule's interval in one verify and not in the next; docs/measurements/tune.md "verify twice")
        pairs, found = _judged(rule, in_ref, other)
        for cell in rule:
            own = pairs.get(cell)
            if not own or found is None:
                verified[cell] = VerifiedCell(cell, selection[cell], None, None, nan, nan, nan, "failed",
                                              rule_cells=len(rule), rule_from=rule[0].msg_bytes)
                continue
            tuned, default = [p[0] for p in own.values()], [p[1] for p in own.values()]
            alone = found if len(rule) == 1 else \
                evidence.compare_launches([evidence.launch_log_ratio([t], [d]) for t, d in own.values()])
            verified[cell] = VerifiedCell(cell, selection[cell], float(np.median(tuned)), float(np.median(default)),
                                          found.speedup, found.low, found.high, found.verdict,
                                          rule_cells=len(rule), launches=found.pairs, own_speedup=alone.speedup,
                                          own_verdict=alone.verdict, rule_from=rule[0].msg_bytes)
    return [verified[cell] for cell in sorted(verified)], met


def reference_shortfall(selection: Mapping[Cell, str], results: Sequence[PointResult],
                        reference_us: Mapping[LayoutKey, float] | None = None, needed: int = 2
                        ) -> tuple[Pairs, StatesMet, set[LayoutKey]]:
    """The pairs in the reference state, the states met, and the layouts with launch pairs but fewer than
    `needed` of them in it (verify_run waits for the machine there)."""
    all_pairs, states = _pairs(selection, results)
    in_ref, _, met = split_by_state(all_pairs, states, reference_us)
    runs: dict[LayoutKey, set[int]] = {}
    for cell, pairs in in_ref.items():
        runs.setdefault((cell.ranks, cell.nodes, cell.ppn), set()).update(pairs)
    layouts = {(c.ranks, c.nodes, c.ppn) for c in all_pairs}  # a layout whose tuned runs all failed: nothing to wait for
    return in_ref, met, {key for key in layouts if len(runs.get(key, ())) < needed}


#: A rule estimated at least this much faster than the default without the evidence to say so gets a
#: second pass of launches: a rule stays only with that evidence, and a real gain should not be lost for
#: lack of launches (its verdict flipped from verify to verify: "faster" 1.93x [1.86, 2.00] in one, "same"
#: 1.09x [0.31, 3.88] in the next, one launch in three wild; docs/measurements/tune.md "verify twice").
PROMISING_ABOVE = 1.03


def needs_more_launches(verified: Sequence[VerifiedCell], above: float = PROMISING_ABOVE,
                      decided: Mapping[Cell, tuple[float, float, float, int] | None] | None = None) -> list[Cell]:
    """Cells whose rule is undecided ("same") with an estimate of at least `above`: measured again (every
    cell of such a rule, since the verdict is the rule's). An undecided rule below it goes back anyway, unless
    tune's decision there (`decided`: the manifest's (speedup, low, high, launches)) is wholly above verify's
    interval: the two met the machine differently (Open MPI's default at 4 ranks on 2 cores is 2-3x slower
    in some launches than in others), and more launches are measured before the rule is judged."""
    def conflicting(v: VerifiedCell) -> bool:
        tune = (decided or {}).get(v.cell)
        return tune is not None and v.verdict != "faster" and tune[1] > v.ci_high

    return [v.cell for v in verified
            if v.algorithm != DEFAULT_ALGORITHM and ((v.verdict == "same" and v.speedup >= above) or conflicting(v))]


def goes_back_to_default(verdict: str, own_verdict: str = "") -> bool:
    """The rule for a tuned choice against the library's (issue 39): it stays only where the evidence says
    it is faster (across launches, under the written files); undecided, slower or failed, it goes back to
    the library's default, and so does a cell of a faster rule that is slower beyond noise on its own.
    A near tie kept in the files was a loss as often as a gain (a verified demo shipped rows at 0.97x and
    a second verify sent 18 more cells back), and a tuning that keeps only evidence is also one that a
    second tune writes again. In an undecided rule, a cell its own launches call faster beyond noise stays
    (the rewrite splits the rule there): one tied size must not send back sizes each 2x faster on their own
    (issue 58: LAMMPS' 8-23 B rule, 1.62x [0.93, 1.80] over its sizes, its 8 B a tie, 12 and 16 B 2x)."""
    if own_verdict == "slower":
        return True
    return not (verdict == "faster" or (verdict == "same" and own_verdict == "faster"))


def slower_beyond_noise(v: VerifiedCell) -> bool:
    """Slower beyond noise: the cell's rule, or the cell on its own."""
    return v.verdict == "slower" or v.own_verdict == "slower"


def unfit_to_ship(v: VerifiedCell) -> bool:
    """What a held-out round must not ship: a cell slower beyond noise, or one whose run under the files
    failed (a crash or a wrong result there is worse than any slowdown)."""
    return slower_beyond_noise(v) or v.verdict == "failed"


def _back_to_default(v: VerifiedCell) -> bool:
    return goes_back_to_default(v.verdict, v.own_verdict)


def apply_replacements(selection: Mapping[Cell, str], verified: Sequence[VerifiedCell], *, whole: bool = False,
                       back: Callable[[VerifiedCell], bool] = _back_to_default
                       ) -> tuple[dict[Cell, str], list[VerifiedCell]]:
    """Tuned cells whose rule is not faster with evidence, that are slower beyond noise on their own, or
    whose tuned run failed go back to `default` (goes_back_to_default; `back`: another test, the held-out
    launches' slower_beyond_noise). whole: the library's files select per collective as a whole (Intel MPI: a
    selection string replaces its own choice at every size, tune.files.whole_collectives), so a collective
    is judged as one: every cell of it goes back to default when one cell is slower beyond noise or failed."""
    fixed = dict(selection)
    out = []
    tuned = [v for v in verified if v.algorithm != DEFAULT_ALGORITHM]
    dropped = {v.cell.collective for v in tuned if back(v)} if whole else set()
    for v in verified:
        back_here = v.algorithm != DEFAULT_ALGORITHM and (v.cell.collective in dropped if whole else back(v))
        if back_here:
            fixed[v.cell] = DEFAULT_ALGORITHM
            v = dataclasses.replace(v, replaced=True)
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
        "slower_beyond_noise_before": sum(slower_beyond_noise(v) for v in verified),
        "slower_beyond_noise_after": sum(slower_beyond_noise(v) and not v.replaced for v in verified),
        "rules": len({v.rule for v in measured}),
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
    """Collectives whose composition goes: slower beyond noise or failed (as for a cell's rule). Where the
    library takes one composition for every collective, one such verdict drops it for all of them."""
    drop = {v.collective for v in verified if goes_back_to_default(v.verdict)}
    return {v.collective for v in verified} if drop and applies_to_all else drop
