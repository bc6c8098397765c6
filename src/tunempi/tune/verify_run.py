"""`tunempi verify` as a library call, in steps: `plan_verify` (load and check the tuning directory),
`measure_pairs` (the interleaved runs and the further passes), `apply_replacements` (tune/verify.py),
`rewrite_files`, `verify_compositions` and `drop_compositions` (the written compositions, where a layout
spans nodes), `hold_out_rounds` (the final files measured again in launches that decide nothing; a cell they
find slower beyond noise is sent back through `rewrite_files` and the rewritten files measured in a new
round), `record_verify` (the manifest's `verify` section). Progress goes to a VerifyListener;
nothing here prints. The statistics and the rule are in tune/verify.py and tunempi.evidence.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi import evidence
from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint
from tunempi.bench.validate import DEFAULT_ALGORITHM
from tunempi.collectives import check_objective
from tunempi.errors import TuningFileError, UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import VendorAdapter
from tunempi.space import Cell
from tunempi.store.results import utc_timestamp
from tunempi.tune.compositions import (
    DEFAULT,
    CompositionResult,
    measure_compositions,
    write_composition_choices,
)
from tunempi.tune.driver import layout_of
from tunempi.tune.file_launches import RUNS_PER_LAUNCH, LaunchSide, measure_sides
from tunempi.tune.files import (
    files_rule_sets,
    one_choice_per_scale,
    whole_collectives,
    write_tuning_files,
)
from tunempi.tune.machine_state import STATE_PAUSE_S, STATE_WAIT_S, StatesMet
from tunempi.tune.manifest import CompositionsRecord, Manifest, SelectionRow, VerifyRecord
from tunempi.tune.objective import Figures
from tunempi.tune.runner import PointResult
from tunempi.tune.verify import (
    DeadlineStop,
    HeldOutSendBack,
    VerifiedCell,
    VerifiedComposition,
    apply_replacements,
    compositions_to_drop,
    evaluate,
    evaluate_composition,
    evaluate_states,
    goes_back_to_default,
    needs_more_launches,
    reference_shortfall,
    slower_beyond_noise,
    summary,
    unfit_to_ship,
    verify_plan,
)
from tunempi.units import format_size

#: What verify measures per point by default (each cell: `repeats` x tuned and default).
VERIFY_SETTINGS = MeasureSettings(warmup=64, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.1)


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
        """Points measured by the first pass: each of `work`'s in RUNS_PER_LAUNCH runs of its launch."""
        return RUNS_PER_LAUNCH * sum(len(points) for points in self.work.values())


class VerifyListener:
    """Progress of `run_verify`; every method does nothing here (a front end overrides what it shows)."""

    def started(self, plan: VerifyPlan) -> None:
        """The plan is checked; measuring starts."""

    def measured(self, result: PointResult, done: int, total: int) -> None:
        """One run done (`total` grows when a further pass adds runs)."""

    def rewriting(self) -> None:
        """Rules were replaced: the files are being rewritten and smoke-checked."""

    def composition_measured(self, collective: str, composition: str, done: int, total: int) -> None:
        """One repetition (a launch of the composition and one of the default) done."""

    def holding_out(self, runs: int) -> None:
        """The final files are measured again against the default: `runs` more runs (`measured` follows)."""

    def waiting_for_state(self, layouts: int, waited_s: float) -> None:
        """No launch pair of `layouts` layouts met the machine in its fastest state yet: verify pauses and
        measures another pair there (machine_state)."""


class VerifyDeadline:
    """verify's end in time (autotune gives it what is left of tune's share, issue 58): a launch pair (a launch
    under the files and one without) begins only where it would end by `at`, a pair taking as long as the
    mean of those measured so far (the first begins while time is left); once one would not, verify begins
    no more launches (`stopped`) and judges what it measured. `at` None: no deadline. `clock`: what the time
    is read from (tests pass theirs). Counts launches measured and planned, and each pair begun."""

    def __init__(self, at: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.at, self.clock = at, clock
        self.launches = 0
        self.planned = 0
        self.stopped = False
        #: (run, layout) of every launch pair begun, in order
        self.begun: list[tuple[int, Layout]] = []
        #: tuned cells the held-out launches did not reach (hold_out)
        self.not_held_out = 0
        self._pair_s: list[float] = []
        self._started: float | None = None

    def plan(self, pairs: int) -> None:
        """`pairs` more launch pairs are planned."""
        self.planned += 2 * pairs

    def begin(self, run: int, layout: Layout) -> bool:
        """Whether the launch pair of `run` at `layout` may begin (it then must be `end`ed)."""
        if self.stopped:
            return False
        now = self.clock()
        typical = sum(self._pair_s) / len(self._pair_s) if self._pair_s else 0.0
        if self.at is not None and (now + typical > self.at if self._pair_s else now >= self.at):
            self.stopped = True
            return False
        self._started = now
        self.begun.append((run, layout))
        return True

    def end(self) -> None:
        assert self._started is not None
        self._pair_s.append(self.clock() - self._started)
        self.launches += 2
        self._started = None

    def short_layouts(self, selection: Mapping[Cell, str], mark: int = 0) -> set[Layout]:
        """The layouts of `selection`'s tuned cells with fewer than two launch pairs begun since `mark` (a length
        of `begun`): a verdict needs two."""
        counts: dict[Layout, int] = {}
        for _, layout in self.begun[mark:]:
            counts[layout] = counts.get(layout, 0) + 1
        return {layout for layout in tuned_layouts(selection) if counts.get(layout, 0) < 2}


@dataclass
class VerifyReport:
    manifest: Manifest
    verified: list[VerifiedCell]
    summary: dict
    replaced: int
    second_pass_cells: int = 0
    compositions: list[VerifiedComposition] = dataclasses.field(default_factory=list)
    held_out: list[VerifiedCell] = dataclasses.field(default_factory=list)
    states: StatesMet = dataclasses.field(default_factory=StatesMet)
    #: held-out cells slower beyond noise, sent back or not (hold_out_rounds), and the rounds measured
    sent_back: list[HeldOutSendBack] = dataclasses.field(default_factory=list)
    held_out_rounds: int = 1
    #: where verify stopped at its deadline (None: it measured all it planned)
    stopped: DeadlineStop | None = None

    def lines(self) -> list[str]:
        """What verify found, as plain text: one line per replaced cell, then the summary."""
        # tune's figures of each cell: its own, the range's only where it has none (SelectionRow.tune_figures)
        said = {row.cell: row.tune_figures() for row in self.manifest.selection} if self.manifest is not None else {}
        out = [_replacement_line(v, said.get(v.cell)) for v in self.verified if v.replaced]
        n = self.summary
        out.append(
            f"verified {n['compared']} cells in {n.get('rules', n['compared'])} rules: geo-mean speedup over default "
            f"{n['geo_mean_speedup_compared_after']:.3f}x "
            f"(before replacements {n['geo_mean_speedup_compared_before']:.3f}x; all {n['cells']} cells "
            f"{n['geo_mean_speedup_all_cells']:.3f}x); slower beyond noise: {n['slower_beyond_noise_before']} "
            f"-> {n['slower_beyond_noise_after']} after verify ({n['slower_point_estimate_after']} below 1 "
            f"within noise; {self.second_pass_cells} cells got more passes)"
            + (f"; files rewritten ({self.replaced} rules -> default)" if self.replaced else
               "; files unchanged by these launches" if any(s.sent_back for s in self.sent_back) else
               "; files unchanged"))
        if self.stopped is not None:
            out.append(self.stopped.line())
        if self.states.line():
            out.append(self.states.line())
        out += held_out_lines(summary(self.held_out) if self.held_out else None, self.sent_back,
                              self.held_out_rounds)
        for v in self.compositions:
            ranks, nodes, ppn = v.layout
            verdict = "slower within noise" if v.verdict == "same" and v.speedup < 1.0 else v.verdict
            out.append(f"{'dropped' if v.dropped else 'kept'} composition {v.composition} of {v.collective} at "
                       f"{nodes} nodes x {ppn} ({ranks} ranks): {verdict} (speedup {v.speedup:.3f}, 95% CI "
                       f"{v.ci_low:.3f}..{v.ci_high:.3f}, {v.pairs} pairs)"
                       + (" -> the library's default composition" if v.dropped else ""))
        return out


def held_out_line(numbers: Mapping[str, float | int], *, rounds: int = 1) -> str:
    """The held-out figures in one line (`summary` of the held-out cells; `rounds`: the round they are of)."""
    which = ("new launches under the final files, which they did not choose" if rounds <= 1 else
             f"round {rounds}: new launches under the files rewritten after the cells sent back before, which "
             "they did not choose")
    return (f"held out ({which}): "
            f"{numbers['compared']} tuned cells, geo-mean speedup {numbers['geo_mean_speedup_compared_before']:.3f}x "
            f"over default; {numbers['faster_beyond_noise']} faster beyond noise, "
            f"{numbers['slower_beyond_noise_before']} slower beyond noise")


def held_out_lines(numbers: Mapping[str, float | int] | None, sent_back: Sequence[HeldOutSendBack],
                   rounds: int) -> list[str]:
    """What hold-out found, as verify, `report` and autotune print it: a line per cell sent back (or kept, and
    why), then the figures of the files as shipped (`numbers`: their summary; None: no held-out cell), saying
    which cells they leave out (those sent back on the same launches, at the round limit)."""
    out = [_sent_back_line(s) for s in sent_back]
    excluded = excluded_from_figures(sent_back, rounds)
    left_out = (f"{excluded} cell{'' if excluded == 1 else 's'} sent back on those same launches (round {rounds}: "
                f"verify measures at most {HOLD_OUT_ROUNDS} held-out rounds)")
    if numbers:
        out.append(held_out_line(numbers, rounds=rounds) + (f"; these figures leave out the {left_out}" if excluded
                                                            else ""))
    elif sent_back:
        out.append("held out: no tuned cell is left in the files" + (f" ({left_out})" if excluded else
                                                                    " after the cells sent back"))
    return out


def _evidence(v: VerifiedCell, tune: tuple[tuple[float, float, float, int], str] | None = None) -> str:
    """'COLL SIZE at N ranks: ALG was VERDICT (speedup, interval, its rule, launches[, what tune had])': a
    verified cell's evidence as a line of verify's says it (`tune`: the manifest row's tune_figures, the
    cell's own or, where it has none, its range's, said which)."""
    tune_said = ""
    if tune is not None:
        (speedup, low, high, launches), whose = tune
        tune_said = (f"; tune had {speedup:.3f} ({low:.3f}..{high:.3f}) over {launches} launches "
                     + ("at this size" if whose == "cell" else "for its range (none of this cell's own)"))
    own_only = v.own_verdict == "slower" and v.verdict != "slower"
    return (f"{v.cell.collective} {format_size(v.cell.msg_bytes)} at {v.cell.ranks} ranks: "
            + (f"{v.algorithm} was slower on its own (speedup {v.own_speedup:.3f}) in a rule "
               if own_only else f"{v.algorithm} was ")
            + f"{VERDICT_WORDS.get(v.verdict, v.verdict)} (speedup {v.speedup:.3f}, 95% CI {v.ci_low:.3f}..{v.ci_high:.3f}"
            + (f"; its rule of {v.rule_cells} sizes" if v.rule_cells > 1 else "") + f", {v.launches} launches"
            + tune_said + ")")


def _replacement_line(v: VerifiedCell, tune: tuple[tuple[float, float, float, int], str] | None = None) -> str:
    """Why a cell went back to the default: its rule's evidence, its own, or (a library reading one selection
    per collective, apply_replacements(whole=True)) another rule of its collective; and what tune's deciding
    launches had said there (`tune`: the manifest row's tune_figures)."""
    with_collective = not goes_back_to_default(v.verdict, v.own_verdict)
    return ("replaced " + _evidence(v, tune)
            + (" -> default with the whole collective (the library reads one selection per collective, and "
               "another rule of it was not faster with evidence)" if with_collective else " -> default"))


def _sent_back_line(s: HeldOutSendBack) -> str:
    """A held-out cell slower beyond noise: sent back (alone, or with the cells its files cannot select apart
    from it), or kept and why."""
    where = f"at hold-out (round {s.round})"
    if s.cell.verdict == "failed":  # no pair to quote: the tuned run itself failed
        cell = s.cell.cell
        failed = (f"{cell.collective} {format_size(cell.msg_bytes)} at {cell.ranks} ranks: "
                  f"{s.cell.algorithm}'s run under the files failed")
        return (f"sent back {where}: {failed} -> default" if s.sent_back
                else f"kept though failed {where}: {failed}: verify could not send it back: {s.why_not}")
    if not s.sent_back:
        return f"kept though slower {where}: {_evidence(s.cell)}: verify could not send it back: {s.why_not}"
    return (f"sent back {where}: {_evidence(s.cell)} -> default"
            + ("" if slower_beyond_noise(s.cell) else " with a slower rule the files cannot select apart from it"))


#: How a verdict reads in a replacement line ("same": the evidence did not tell the two apart).
VERDICT_WORDS = {"same": "not faster with evidence"}


def plan_verify(directory: Path, *, repeats: int, mpi: str | None = None) -> VerifyPlan:
    """Load the tuning directory, check that its files are there and that `mpi` (default: the manifest's
    library) is the library it was tuned for, and plan the interleaved runs."""
    from tunempi.tune.apply import check_tuning_files, tuning_library

    if repeats < 2:
        raise UsageError(f"--repeats must be at least 2 (a verdict needs two launches), got {repeats}")
    manifest = Manifest.load(directory)
    check_objective(manifest.objective)  # measured as tune measured it (Manifest.figures: for time, its computations)
    selection = {row.cell: row.algorithm for row in manifest.selection}
    manifest.figures().check_cells(c for c, a in selection.items() if a != DEFAULT_ALGORITHM)
    library = tuning_library(manifest, mpi)  # the library it was tuned for, by fingerprint
    check_tuning_files(manifest, library)  # present, and read back strictly
    return VerifyPlan(manifest, library, selection, repeats, verify_plan(selection, repeats))


def measure_pairs(plan: VerifyPlan, settings: MeasureSettings, listener: VerifyListener,
                  hostfile: Path | None = None, deadline: VerifyDeadline | None = None
                  ) -> tuple[list[PointResult], list[Cell]]:
    """The planned repetitions under the files against the default (`measure_under_files`: a pair of
    launches each), then more passes for the rules left undecided with a promising estimate
    (`more_passes`: a rule stays only with the evidence that it is faster). Returns every result and the
    cells that got more passes. The launches run one after the other: each is a side measured alone, as the
    application's launch will be. With a `deadline`, no launch pair begins past it (VerifyDeadline)."""
    from tunempi.mpi.discovery import adapter_for

    adapter = adapter_for(plan.library)
    multi_node = any(layout.nodes > 1 for layout in plan.work)
    allocation = NodeAllocation.given_or_found(hostfile) if multi_node else None
    file_env = plan.manifest.activation_env()
    progress = {"done": 0, "total": plan.runs}

    def on_point(result: PointResult) -> None:
        progress["done"] += 1
        listener.measured(result, progress["done"], progress["total"])

    def measure(selection: Mapping[Cell, str], runs: Sequence[int]) -> list[PointResult]:
        if deadline is not None:
            deadline.plan(len(runs) * len(tuned_layouts(selection)))
        return measure_under_files(plan.library, adapter, file_env, selection, runs, settings, on_point, allocation,
                                   plan.manifest.system, distributions=plan.manifest.distributions,
                                   figures=plan.manifest.figures(), deadline=deadline)

    def stopped() -> bool:
        return deadline is not None and deadline.stopped

    results = measure(plan.selection, range(plan.repeats))
    results += wait_for_reference_state(plan, results, measure, listener, progress, stopped=stopped)
    added, again = more_passes(plan, results, measure, progress, stopped=stopped)
    return results + added, again


def tuned_layouts(selection: Mapping[Cell, str]) -> set[Layout]:
    """The layouts of the tuned cells of `selection`: one launch pair each per repetition."""
    return {layout_of(cell) for cell, algorithm in selection.items() if algorithm != DEFAULT_ALGORITHM}


#: At most this many passes of `repeats` launch pairs each (the first included): an undecided rule with a
#: promising estimate is measured again until its evidence decides or this many passes are done. One extra
#: pass left 13 % of a demo's tuned cells undecided at estimates of 1.15-1.50x (6 launches, one launch against
#: them; docs/measurements/tune.md "More passes"). Each look tests at the same level, so a tie kept by chance
#: is a little likelier than one look gives; the held-out launches after it report what ships.
MAX_PASSES = 4


def more_passes(plan: VerifyPlan, results: Sequence[PointResult],
                measure: Callable[[Mapping[Cell, str], Sequence[int]], list[PointResult]],
                progress: dict[str, int], *, max_passes: int = MAX_PASSES,
                stopped: Callable[[], bool] = lambda: False) -> tuple[list[PointResult], list[Cell]]:
    """Passes of `plan.repeats` new launch pairs (new run numbers) for the rules still undecided with a
    promising estimate, or judged below the interval tune decided them on (verify.needs_more_launches, on every
    result so far), until none is or `max_passes` passes are done. Returns the added results and every cell
    measured again. No pass begins once `stopped()` (verify's deadline)."""
    added: list[PointResult] = []
    again: list[Cell] = []
    decided = plan.manifest.decided()
    for number in range(1, max_passes):
        if stopped():
            break
        undecided = needs_more_launches(evaluate(plan.selection, [*results, *added],
                                                 reference_us=plan.manifest.machine_probe_us), decided=decided)
        if not undecided:
            break
        again += [cell for cell in undecided if cell not in again]
        progress["total"] += points_under_files(len(undecided), plan.repeats)
        added += measure({c: plan.selection[c] for c in undecided},
                         range(number * plan.repeats, (number + 1) * plan.repeats))
    return added, again


#: Launch runs measured while waiting are numbered from here (repetitions, the further passes and the held-out
#: launches take the numbers below).
WAITING_RUNS = 1000


def wait_for_reference_state(plan: VerifyPlan, results: Sequence[PointResult],
                             measure: Callable[[Mapping[Cell, str], Sequence[int]], list[PointResult]],
                             listener: VerifyListener, progress: dict[str, int], *,
                             wait_s: float = STATE_WAIT_S, pause_s: float = STATE_PAUSE_S,
                             clock: Callable[[], float] = time.monotonic,
                             sleep: Callable[[float], None] = time.sleep,
                             stopped: Callable[[], bool] = lambda: False) -> list[PointResult]:
    """Where fewer of a layout's launch pairs than the repetitions asked for (two at least) met the machine in
    its reference state (the fastest probe of tune's and verify's launches there: machine_state), another pair
    is measured at that layout after a pause, until that many have or `wait_s` has passed; a rule is then judged on those (verify.py
    `_judged`), so a verify that met a slow spell judges as one that did not. Returns the added results."""
    added: list[PointResult] = []
    started = clock()
    run = WAITING_RUNS
    while True:
        # as many pairs in the tune's state as the repetitions asked for: a rule judged on two pairs (one degree
        # of freedom) came back "same" at 0.2x-6x and was sent back, though tune and the next verify kept it
        _, met, short = reference_shortfall(plan.selection, [*results, *added], plan.manifest.machine_probe_us,
                                            needed=max(2, plan.repeats))
        if not short or clock() - started >= wait_s or stopped():  # stopped: at verify's deadline
            return added
        listener.waiting_for_state(len(short), clock() - started)
        sleep(pause_s)
        extra = {c: a for c, a in plan.selection.items() if (c.ranks, c.nodes, c.ppn) in short}
        progress["total"] += points_under_files(sum(a != DEFAULT_ALGORITHM for a in extra.values()), 1)
        added += measure(extra, [run])
        run += 1


def points_under_files(cells: int, repetitions: int) -> int:
    """The points measure_under_files measures for `cells` tuned cells: per repetition, both sides' launches,
    RUNS_PER_LAUNCH runs of each cell in each (the progress bars' totals)."""
    return 2 * cells * repetitions * RUNS_PER_LAUNCH


def measure_under_files(library: MPILibrary, adapter: VendorAdapter, file_env: Mapping[str, str],
                        selection: Mapping[Cell, str], runs: Sequence[int], settings: MeasureSettings,
                        on_point: Callable[[PointResult], None] = lambda _: None,
                        allocation: NodeAllocation | None = None, system: str = "",
                        distributions: Mapping[str, str] | None = None,
                        figures: Figures | None = None, deadline: VerifyDeadline | None = None) -> list[PointResult]:
    """What the written files do, as the application's launch will see it: for every repetition in `runs`
    and every layout of a tuned cell, one launch under the files (`file_env`) and one without them (the
    library's default), in alternating order, each measuring every tuned cell of the layout with nothing
    switched at run time, in a seeded random order. A point of the files' launch carries the cell's tuned
    algorithm, one of the other launch `default`, and the point's `run` is the repetition: `evaluate` pairs
    them per launch pair (issue 39: a figure switched inside one launch did not predict the file's). A vector
    collective's blocks are measured as tune measured them (`distributions`, the manifest's), and a non-blocking
    collective for tune's objective (`figures`, the manifest's: for time, each cell's computation). With a
    `deadline`, a pair begins only where VerifyDeadline lets it: at the deadline the launches stop between
    pairs and the results so far are returned."""
    by_layout: dict[Layout, list[Cell]] = {}
    for cell in sorted(c for c, a in selection.items() if a != DEFAULT_ALGORITHM):
        by_layout.setdefault(layout_of(cell), []).append(cell)
    results: list[PointResult] = []
    counter = itertools.count(1)
    for run in runs:
        for layout, cells in sorted(by_layout.items(), key=lambda item: (item[0].nodes, item[0].ranks)):
            hosts = allocation.first(layout.nodes) if allocation is not None and layout.nodes > 1 else None
            tuned = LaunchSide("tuned", {cell: selection[cell] for cell in cells}, file_env)
            default = LaunchSide(DEFAULT_ALGORITHM, dict.fromkeys(cells, DEFAULT_ALGORITHM), {})
            if deadline is not None and not deadline.begin(run, layout):
                return results
            results += measure_sides(library, adapter, layout, evidence.pair_order(tuned, default, run), run,
                                     settings, on_point, hosts, system, next_id=lambda: next(counter),
                                     distributions=distributions, figures=figures, repeats=RUNS_PER_LAUNCH)
            if deadline is not None:
                deadline.end()
    return results


def manifest_adapter(manifest: Manifest, library: MPILibrary) -> VendorAdapter:
    """The library's adapter as the directory was tuned: with the requirements the user vouched for
    (`assumes`), so a rewrite may keep what the files already select."""
    from tunempi.mpi.discovery import adapter_for

    return adapter_for(library).assuming(manifest.assumes)


def rewrite_files(manifest: Manifest, library: MPILibrary, fixed: Mapping[Cell, str], smoke: bool) -> Manifest:
    """Rule sets and tuning files (smoke-checked) for the selection after replacements, and the manifest's
    selection rows (a replaced row keeps the default's median and says what it replaced)."""
    from tunempi.tune.job import files_fields

    adapter = manifest_adapter(manifest, library)
    # A replacement may leave a collective that cannot be written as it is.
    fixed = whole_collectives(one_choice_per_scale(fixed, adapter), adapter)
    # the extension policy above the largest measured size again, from tune's medians: a replaced cell's
    # algorithm is the default there, so a rule verify sent back is not carried beyond it either
    # (every median tune measured: the selection's, unless replaced, whose median is the default's; the default's;
    # the other algorithms', which the policy reads where a winner was not selected)
    medians: dict[tuple[Cell, str], float | None] = {}
    for row in manifest.selection:
        medians.update(row.medians())
    rule_sets = files_rule_sets(fixed, adapter, medians, preferred_ppn=manifest.preferred_ppn)
    written = write_tuning_files(manifest.directory, library, adapter, rule_sets,
                                 smoke_ranks=sorted({cell.ranks for cell in fixed}), smoke=smoke)
    return dataclasses.replace(manifest, **files_fields(written, rule_sets), selection=tuple(
        SelectionRow(row.cell, fixed[row.cell],
                     row.median_us if fixed[row.cell] == row.algorithm else row.default_us, row.default_us,
                     # a second rewrite (hold-out's) keeps what an earlier one replaced
            replaced_from=row.algorithm if fixed[row.cell] != row.algorithm else row.replaced_from,
            decided=row.decided, own=row.own, others=row.others)
        for row in manifest.selection))


def verify_compositions(plan: VerifyPlan, adapter: VendorAdapter, settings: MeasureSettings,
                        listener: VerifyListener, hostfile: Path | None = None,
                        deadline: VerifyDeadline | None = None) -> tuple[list[VerifiedComposition], int]:
    """Each written composition against the library's default at the layout it was chosen at: `repeats`
    repetitions of one launch each, order alternating (evidence.pair_order), at the composition sizes. With a
    `deadline`, no repetition begins past it, and a composition with fewer than two is not judged (it stays).
    Returns the judged ones and how many were not."""
    chosen = plan.manifest.compositions.chosen()
    if not chosen:
        return [], 0
    allocation = NodeAllocation.given_or_found(hostfile)
    layouts = {r.collective: r.layout for r in plan.manifest.compositions.collectives}
    sizes = plan.manifest.compositions.sizes
    verified = []
    for collective, composition in sorted(chosen.items()):
        ranks, nodes, ppn = layouts[collective]
        if allocation is None:
            raise UsageError(f"the {composition} composition of {collective} was chosen at {nodes} nodes: verify "
                             "needs an allocation of that many (Slurm, PBS, --hostfile or TUNEMPI_HOSTFILE)")
        repetitions: list[list[CompositionResult]] = []
        layout = Layout(ranks=ranks, nodes=nodes, ppn=ppn)
        for repetition in range(plan.repeats):
            if deadline is not None and not deadline.begin(repetition, layout):
                break
            repetitions.append(measure_compositions(
                plan.library, adapter, layout, collective, sizes,
                settings=settings, allocation=allocation.first(nodes),
                names=evidence.pair_order(composition, DEFAULT, repetition)))
            if deadline is not None:
                deadline.end()
            listener.composition_measured(collective, composition, repetition + 1, plan.repeats)
        if len(repetitions) >= 2 or deadline is None or not deadline.stopped:
            verified.append(evaluate_composition(collective, composition, (ranks, nodes, ppn), repetitions))
    return verified, len(chosen) - len(verified)


def drop_compositions(manifest: Manifest, library: MPILibrary, adapter: VendorAdapter, drop: set[str]) -> Manifest:
    """The manifest without the compositions of `drop`: the composition file rewritten with the rest (read
    back strictly by `run`'s check) or deleted, the choices saying why."""
    from tunempi.tune.apply import check_tuning_files

    before = manifest.compositions
    keep = {c: name for c, name in before.chosen().items() if c not in drop}
    records = tuple(dataclasses.replace(r, choice=dataclasses.replace(
        r.choice, chosen=None, reason=f"dropped by verify (not faster than the default side by side); tune: "
                                      f"{r.choice.reason}")) if r.collective in drop else r
        for r in before.collectives)
    files: dict[str, str] = {}
    env_files: dict[str, str] = {}
    env: dict[str, str] = {}
    if keep:
        nodes = max(r.layout[1] for r in before.collectives)
        written = write_composition_choices(adapter, keep, manifest.directory, nodes=nodes)
        files, env_files, env = dict(written.files), dict(written.env_files), dict(written.env)
    for name in set(before.files.values()) - set(files.values()):
        (manifest.directory / name).unlink(missing_ok=True)
    manifest = dataclasses.replace(manifest, compositions=CompositionsRecord(
        margin=before.margin, sizes=before.sizes, collectives=records, files=files, env_files=env_files, env=env))
    check_tuning_files(manifest, library)
    return manifest


def hold_out(manifest: Manifest, library: MPILibrary, *, repeats: int, first_run: int, settings: MeasureSettings,
             listener: VerifyListener, hostfile: Path | None = None,
             deadline: VerifyDeadline | None = None) -> list[VerifiedCell]:
    """The final files' tuned cells against the default in `repeats` new launch pairs, judged as verify
    judges (`evaluate`), decided on nothing: the figures to report (issue 39: the rules kept are those
    that looked best, so the launches that kept them overstate them). Stopped at its `deadline`, the cells
    of a layout with fewer than two of those pairs are not judged (VerifyDeadline.not_held_out counts them)."""
    from tunempi.mpi.discovery import adapter_for

    final = {row.cell: row.algorithm for row in manifest.selection}
    tuned = [cell for cell, algorithm in final.items() if algorithm != DEFAULT_ALGORITHM]
    if not tuned:
        return []
    multi_node = any(cell.nodes > 1 for cell in tuned)
    allocation = NodeAllocation.given_or_found(hostfile) if multi_node else None
    total = points_under_files(len(tuned), repeats)
    listener.holding_out(total)
    done = {"n": 0}

    def on_point(result: PointResult) -> None:
        done["n"] += 1
        listener.measured(result, done["n"], total)

    mark = len(deadline.begun) if deadline is not None else 0
    results = measure_under_files(library, adapter_for(library), manifest.activation_env(), final,
                                  range(first_run, first_run + repeats), settings, on_point, allocation,
                                  manifest.system, distributions=manifest.distributions,
                                  figures=manifest.figures(), deadline=deadline)
    if deadline is not None and deadline.stopped:
        short = deadline.short_layouts(final, mark)
        deadline.not_held_out = sum(layout_of(cell) in short for cell in tuned)
        final = {c: a for c, a in final.items() if a == DEFAULT_ALGORITHM or layout_of(c) not in short}
    return [v for v in evaluate(final, results, reference_us=manifest.machine_probe_us)
            if v.algorithm != DEFAULT_ALGORITHM]


#: At most this many rounds of held-out launches (issue 58): a round that sends a cell back is followed by one
#: under the rewritten files, whose figures are reported; at the limit the last round's figures leave out
#: the cells it sent back, and say so (docs/tune.md "hold-out sends back").
HOLD_OUT_ROUNDS = 2


@dataclass(frozen=True)
class HeldOutRounds:
    """What the held-out rounds found: `figures`, the last round's, of the cells the files still select as
    measured; `rounds` measured; `sent_back`, every cell found slower beyond noise (and those that went back
    with one), in order; `selection`, what the files select after them."""

    figures: list[VerifiedCell]
    rounds: int
    sent_back: list[HeldOutSendBack]
    selection: dict[Cell, str]

    @property
    def excluded(self) -> int:
        return excluded_from_figures(self.sent_back, self.rounds)


def excluded_from_figures(sent_back: Sequence[HeldOutSendBack], rounds: int) -> int:
    """Cells the last round's figures leave out: those sent back on its own launches (at HOLD_OUT_ROUNDS)."""
    return sum(s.sent_back and s.round == rounds for s in sent_back)


def hold_out_rounds(selection: Mapping[Cell, str], measure: Callable[[int], Sequence[VerifiedCell] | None],
                    rewrite: Callable[[dict[Cell, str]], Mapping[Cell, str]], *, whole: bool = False,
                    rounds: int = HOLD_OUT_ROUNDS) -> HeldOutRounds:
    """Held-out rounds on the files as they stand (`selection`): `measure(round)` judges their tuned cells in new
    launch pairs (hold_out); a cell slower beyond noise there (its rule's verdict or its own, the evidence rule,
    verify.slower_beyond_noise) or whose run under the files failed (verify.unfit_to_ship) goes back to the default (`whole`: with its collective, apply_replacements) and
    `rewrite(fixed)` rewrites and smoke-checks the files (rewrite_files), returning what they select then. A
    round that sent something back is followed by a new one, up to `rounds`: the figures reported are then of
    the shipped files in launches that chose nothing. A cell the rewritten files still select, or every cell
    when the library rejects them (TuningFileError: the files in place stay), is kept, with the reason.
    `measure` returns None where no round begins (verify's deadline): the rounds end there."""
    current = dict(selection)
    sent_back: list[HeldOutSendBack] = []
    cannot: set[Cell] = set()
    figures: list[VerifiedCell] = []
    measured = 0
    for number in range(1, rounds + 1):
        if all(a == DEFAULT_ALGORITHM for a in current.values()):
            break  # nothing tuned is left to measure
        found = measure(number)
        if found is None:  # at verify's deadline: the last round's figures stand, of the cells still selected
            figures = [v for v in figures if current.get(v.cell) == v.algorithm]
            break
        figures, measured = list(found), number
        judged_here = [v for v in figures if v.cell not in cannot]
        slower = [v for v in judged_here if unfit_to_ship(v)]
        if not slower:
            break
        fixed, judged = apply_replacements(current, judged_here, whole=whole, back=unfit_to_ship)
        try:
            after = dict(rewrite(fixed))
        except TuningFileError as exc:  # the files in place, measured above, stay
            sent_back += [HeldOutSendBack(v, number, str(exc)) for v in slower]
            break
        went = [v for v in judged if after.get(v.cell) != current.get(v.cell)]
        sent_back += [HeldOutSendBack(dataclasses.replace(v, replaced=True), number) for v in went]
        for v in slower:
            if after.get(v.cell) == v.algorithm:
                cannot.add(v.cell)
                sent_back.append(HeldOutSendBack(v, number, "the rewritten files still select it (the library's "
                                                            "files cannot hold the default there alone)"))
        current = after
        if not went or number == rounds:
            # the figures of the cells still selected as measured (at the limit: the rest, said so)
            figures = [v for v in figures if current.get(v.cell) == v.algorithm]
            break
    return HeldOutRounds(figures, measured, sent_back, current)


def record_verify(manifest: Manifest, verified: Sequence[VerifiedCell], *, repeats: int, second_pass: int,
                  settings: MeasureSettings, wall_s: float,
                  compositions: Sequence[VerifiedComposition] = (),
                  held_out: Sequence[VerifiedCell] = (), states: StatesMet | None = None,
                  sent_back: Sequence[HeldOutSendBack] = (), held_out_rounds: int = 1,
                  stopped: DeadlineStop | None = None) -> Manifest:
    """The manifest with its `verify` section (every cell, every written composition, the held-out figures
    and what hold-out sent back, the summaries), saved."""
    manifest = dataclasses.replace(manifest, verify=VerifyRecord(
        verified_at=utc_timestamp(), repeats=repeats, second_pass_cells=second_pass,
        time_cap_s=settings.time_cap_s, wall_s=wall_s, summary=summary(verified), cells=tuple(verified),
        compositions=tuple(compositions), held_out=tuple(held_out),
        held_out_summary=summary(held_out) if held_out else {}, states=states or StatesMet(),
        held_out_rounds=held_out_rounds, sent_back=tuple(sent_back), stopped=stopped))
    manifest.save()
    return manifest


def run_verify(directory: Path, *, repeats: int = 3, settings: MeasureSettings = VERIFY_SETTINGS,
               mpi: str | None = None, smoke: bool = True,
               listener: VerifyListener | None = None, hostfile: Path | None = None,
               deadline: float | None = None, clock: Callable[[], float] = time.monotonic) -> VerifyReport:
    """Tuned against default, interleaved per layout; rules slower than the default (beyond noise, or
    by the estimate) go back to default and the files are rewritten (smoke-checked). Written compositions
    likewise, each launch against one of the default; a slower one is dropped. Then the held-out rounds
    (hold_out_rounds): a cell they find slower beyond noise goes back too. The manifest's `verify` section
    records every cell and composition, the held-out figures and what hold-out sent back.

    `deadline` (by `clock`; autotune: the end of tune's share): no launch pair begins that would end past it
    (VerifyDeadline). Stopped there, verify judges what it measured: a layout's tuned cells with two launch
    pairs or more as ever, the others kept as tune decided them, unjudged; the report and the manifest say
    where it stopped (DeadlineStop)."""
    listener = listener or VerifyListener()
    started = time.monotonic()
    plan = plan_verify(directory, repeats=repeats, mpi=mpi)
    bound = VerifyDeadline(deadline, clock)
    # planned beside the first pass (measure_pairs plans it, and each pass it adds): one held-out round and
    # the compositions' repetitions
    bound.plan(repeats * (len(tuned_layouts(plan.selection)) + len(plan.manifest.compositions.chosen())))
    listener.started(plan)
    results, again = measure_pairs(plan, settings, listener, hostfile, bound)
    whole = not manifest_adapter(plan.manifest, plan.library).files_keep_library_choice_elsewhere()
    # at the deadline, a layout with fewer than two launch pairs has no verdict: its cells stay as tune decided
    short = bound.short_layouts(plan.selection) if bound.stopped else set()
    unverified = sum(layout_of(c) in short for c, a in plan.selection.items() if a != DEFAULT_ALGORITHM)
    judged, states = evaluate_states({c: a for c, a in plan.selection.items() if layout_of(c) not in short},
                                     results, reference_us=plan.manifest.machine_probe_us)
    fixed, verified = apply_replacements(plan.selection, judged, whole=whole)
    replaced = sum(v.replaced for v in verified)
    manifest = plan.manifest
    if replaced:
        listener.rewriting()
        manifest = rewrite_files(manifest, plan.library, fixed, smoke)
    unjudged_compositions = 0
    if plan.manifest.compositions.chosen():
        adapter = manifest_adapter(manifest, plan.library)
        compositions, unjudged_compositions = verify_compositions(plan, adapter, settings, listener, hostfile,
                                                                  bound)
        drop = compositions_to_drop(compositions, applies_to_all=adapter.composition_applies_to_all())
        compositions = [dataclasses.replace(v, dropped=v.collective in drop) for v in compositions]
        if drop:
            manifest = drop_compositions(manifest, plan.library, adapter, drop)
    else:
        compositions = []

    def measure_round(number: int) -> list[VerifiedCell] | None:
        if bound.stopped:  # at the deadline: no round begins
            if number == 1:
                bound.not_held_out = sum(a != DEFAULT_ALGORITHM for a in current_selection().values())
            return None
        if number > 1:
            bound.plan(repeats * len(tuned_layouts(current_selection())))
        mark = len(bound.begun)
        # each round's launches numbered after the passes' and the rounds' before it
        found = hold_out(manifest, plan.library, repeats=repeats, first_run=(MAX_PASSES + number - 1) * repeats,
                         settings=settings, listener=listener, hostfile=hostfile, deadline=bound)
        return None if bound.stopped and len(bound.begun) == mark else found  # none of its launches began

    def current_selection() -> dict[Cell, str]:
        return {row.cell: row.algorithm for row in manifest.selection}

    def send_back(fixed: dict[Cell, str]) -> dict[Cell, str]:
        nonlocal manifest
        listener.rewriting()
        manifest = rewrite_files(manifest, plan.library, fixed, smoke)
        return {row.cell: row.algorithm for row in manifest.selection}

    held = hold_out_rounds(current_selection(), measure_round, send_back, whole=whole)
    stopped = DeadlineStop(bound.launches, bound.planned, unverified, unjudged_compositions,
                           bound.not_held_out) if bound.stopped else None
    manifest = record_verify(manifest, verified, repeats=repeats, second_pass=len(again), settings=settings,
                             wall_s=time.monotonic() - started, compositions=compositions, held_out=held.figures,
                             states=states, sent_back=held.sent_back, held_out_rounds=held.rounds, stopped=stopped)
    assert manifest.verify is not None
    return VerifyReport(manifest, verified, dict(manifest.verify.summary), replaced, len(again), compositions,
                        held.figures, states, held.sent_back, held.rounds, stopped)
