"""Launches as blocks: tune decides every measured cell from runs of at least two launches.

One `mpiexec` is one sample (Hunold and Carpen-Amarie, ReproMPI): the runs of one launch share its
placement, binding and the machine's state, and a launch can favour one algorithm over another for its
whole life. Two tunes of the same machine minutes apart chose the same algorithm at 66 % of the cells
(issue 28), each confident in its own launch. So, after the strategies converge, the contenders of every
measured cell are measured again in fresh launches (`Tuner(launches=...)`), in a seeded random order inside
each launch, and a cell's choice must hold across the launches:

- contenders (`contenders`): the library's default and, where the tune would override it, the selected
  algorithm and the next one the strategy's estimate also puts ahead of the default by the margin; where
  it would keep it, the algorithm estimated fastest after it (the exploring launch can favour the default
  too). Each measured there at least once;
- each launch gives one block value per (cell, contender): log(default / contender) over its runs there
  (evidence.launch_log_ratio); the exploring launch is the first block, runs read back from the store
  (earlier launches) another;
- a cell's lead is the contender with the highest mean block value; neighbouring cells with the same lead
  ahead of the default (or all behind it) form a range (what one tuning-file rule covers), decided as one
  by evidence.compare_launches, with the
  variances pooled over the collective's ranges (they were measured in the same launches): the run-to-run
  noise of this VM (~15 % per run) needs many samples per cell, a range has them;
- a range takes its algorithm only where every cell it covers supports it on its own figures (issue 58): its
  lead is that algorithm, ahead of the default by its own block values, and not slower than the default
  beyond noise by its block values as measured (evidence.compare_launches on the cell alone, before any spike
  is smoothed). A cell that fails is left to the default and splits the range; each part is decided again on
  its own cells, so the figures a range records are those of the cells it covers. miniAMR's allreduce had
  recursive_doubling written for 6-12 B as "1.47x [1.11, 1.93]" though at 8 B it ran 26.2 us against the
  default's 16.2.

A cell's outcome: "tuned" (its range's lead decided faster than the default by at least MIN_GAIN), "tie"
(not decided either way, or faster by less than MIN_GAIN: the library's default is kept, and reported as a
tie) or "default" (decided slower).

Why a floor under the gain (issue 39): verify judges each rule again on launches of its own, on the rule's
own spread, so a rule tune's pooled spread called faster by a few % came back "same" from verify a third of
the time (allgather ring at 4-128 B, 1.03x), and the file changed for a gain no application would see. The
range must be faster than default x (1 + MIN_GAIN) with the evidence: the interval's lower bound above it.
The comparison the tune reports is still the plain one (default / contender with its interval).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby

import numpy as np

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.evidence import LEVEL, Comparison, compare_launches, launch_log_ratio, launch_spread
from tunempi.space import Cell
from tunempi.strategy import MeasurementRecord, Strategy
from tunempi.tune.machine_state import SAME_STATE_RATIO, STATE_RATIO, layout_takes_turns, same_state

OUTCOMES: tuple[str, ...] = ("tuned", "tie", "default")
#: Contenders beside the library's default in a cell: the selected algorithm and this many minus one more.
MOST_CONTENDERS = 2
#: A range is tuned only where it is faster than the default by at least this share with the evidence (its
#: interval's lower bound above 1 + MIN_GAIN): the gain a file is worth writing for, and one verify's own
#: launches can confirm (module docstring).
MIN_GAIN = 0.03


@dataclass(frozen=True)
class CellDecision:
    """A cell's choice and why: `comparison` is the choice against the default across launches (for a tie,
    the contender that came closest); None where no contender was measured against it in two launches."""

    cell: Cell
    choice: str
    outcome: str  # one of OUTCOMES
    comparison: Comparison | None = None
    #: The same contender against the default in this cell alone, across its launches: the cell's own
    #: figures (`comparison` is its range's, shared by every cell the range covers). None: not measured.
    own: Comparison | None = None

    def evidence(self) -> tuple[float, float, float, int] | None:
        """(speedup, low, high, launches) of `comparison` (the manifest's selection rows keep it), or None."""
        return _figures(self.comparison)

    def own_evidence(self) -> tuple[float, float, float, int] | None:
        """(speedup, low, high, launches) of `own`, the cell's own figures (autotune's expected gain), or None."""
        return _figures(self.own)

    def to_dict(self) -> dict:
        return {"choice": self.choice, "outcome": self.outcome,
                "comparison": self.comparison.to_dict() if self.comparison is not None else None,
                "own": self.own.to_dict() if self.own is not None else None}


def _figures(c: Comparison | None) -> tuple[float, float, float, int] | None:
    return None if c is None else (c.speedup, c.low, c.high, c.pairs)


def contenders(strategy: Strategy, selection: Mapping[Cell, str], margin: float,
               most: int = MOST_CONTENDERS) -> dict[Cell, tuple[str, ...]]:
    """cell -> (default, contenders...) for every measurable cell where the default and another algorithm
    were measured: where the selection overrides the default, the selected algorithm first, then up to
    `most` - 1 others the strategy's estimate puts ahead of the default by `margin`, fastest first; where it
    keeps the default, the algorithm estimated fastest after it (the exploring launch may have favoured
    the default as well as any other). Each contender was measured in that cell at least once."""
    space = strategy.space
    if DEFAULT_ALGORITHM not in space.algorithms:
        return {}
    estimate = strategy.estimate_log_latency()
    usable, counts = strategy.usable_mask(), strategy.measured_counts()
    j_default = space.algorithms.index(DEFAULT_ALGORITHM)
    chosen: dict[Cell, tuple[str, ...]] = {}
    for cell, selected in selection.items():
        if cell not in strategy.measurable or selected not in space.algorithms:
            continue
        i = space.index(cell)
        if not usable[i, j_default] or counts[i, j_default] == 0:
            continue
        measured = [space.algorithms[j] for j in np.argsort(estimate[i], kind="stable")
                    if space.algorithms[j] != DEFAULT_ALGORITHM and usable[i, j] and counts[i, j] > 0
                    and math.isfinite(estimate[i, j])]
        if selected == DEFAULT_ALGORITHM:
            if measured:
                chosen[cell] = (DEFAULT_ALGORITHM, measured[0])
            continue
        ahead = [a for a in measured if a != selected
                 and estimate[i, j_default] - estimate[i, space.algorithms.index(a)] >= math.log1p(margin)]
        chosen[cell] = (DEFAULT_ALGORITHM, selected, *ahead[: max(0, most - 1)])
    return chosen


LayoutKey = tuple[int, int, int]  # ranks, nodes, ppn


def _layout(cell: Cell) -> LayoutKey:
    return cell.ranks, cell.nodes, cell.ppn


def _states(probes: Iterable[float]) -> list[list[float]]:
    """Probes sorted and cut into states where one is more than SAME_STATE_RATIO above its state's first."""
    states: list[list[float]] = []
    for probe in sorted(probes):
        if states and probe <= SAME_STATE_RATIO * states[-1][0]:
            states[-1].append(probe)
        else:
            states.append([probe])
    return states


def _state_of(probes: list[float]) -> float:
    """The probe of the state most of these runs (at least one) met inside the reference band (STATE_RATIO of
    the fastest): the probes cut into states (_states), the state with the most runs (the faster of a tie),
    its median. Where other jobs' ranks take turns on the cores the probes spread and that state holds few of
    them: the tune then decides on few runs rather than compare runs of different states."""
    fastest = min(probes)
    states = _states(p for p in probes if p <= STATE_RATIO * fastest)
    return float(np.median(max(states, key=lambda state: len(state))))


def reference_probes(records: Iterable[MeasurementRecord]) -> dict[LayoutKey, float]:
    """layout -> the probe of its reference state (`_state_of` over its runs in the exploring and deciding
    launches); a layout without probes (oversubscribed: machine_state.usable_probe) is absent, and all its
    runs are taken."""
    found: dict[LayoutKey, list[float]] = {}
    for r in records:
        if r.launch_block >= 1 and r.probe_us is not None and r.probe_us > 0:
            found.setdefault(_layout(r.cell), []).append(r.probe_us)
    return {layout: _state_of(probes) for layout, probes in found.items()}


def block_states(records: Iterable[MeasurementRecord]) -> dict[LayoutKey, dict[int, str]]:
    """layout -> deciding block -> "reference" unless one of its launches (the default's and each contender
    rank's under files, `MeasurementRecord.launch_side`; a switched block is one launch) measured most of its
    runs in another state than the layout's reference (reference_probes): "other". Inside the band the probe
    read two states, about 25 and 44 us, and in the rarer 25 small collectives ran 1.2-1.4x slower: a block
    whose contender launch met it (or the 3x slower state, 43-132 us in one launch) beside a default launch at
    44 read a 1.5x alltoall gain as a tie. A launch whose probes spread so that no state holds most of them
    (other jobs' ranks taking turns on the cores) is not "other": its runs in the reference state still
    decide (launch_runs), and the tune does not wait for a machine that will stay busy."""
    records = list(records)
    reference = reference_probes(records)
    probes: dict[LayoutKey, dict[tuple[int, str], list[float]]] = {}
    for r in records:
        if r.launch_block >= 2 and r.probe_us is not None and r.probe_us > 0:
            probes.setdefault(_layout(r.cell), {}).setdefault((r.launch_block, r.launch_side), []).append(r.probe_us)
    out: dict[LayoutKey, dict[int, str]] = {}
    for layout, launches in probes.items():
        elsewhere: set[int] = set()
        for (block, _), values in launches.items():
            # another state held most of its runs: the launch met the machine elsewhere, not a busy machine
            modal = max(_states(values), key=lambda state: len(state))
            if 2 * len(modal) > len(values) and not same_state(float(np.median(modal)), reference.get(layout)):
                elsewhere.add(block)
        out[layout] = {block: "other" if block in elsewhere else "reference"
                       for block in sorted({block for block, _ in launches})}
    return out


def reference_blocks(records: Iterable[MeasurementRecord]) -> dict[LayoutKey, set[int]]:
    """layout -> the deciding blocks tune decides on there: those in the reference state where two or more
    are, else every one (block_states); of their runs, launch_runs takes those in the reference state."""
    out = {}
    for layout, states in block_states(records).items():
        reference = {b for b, state in states.items() if state == "reference"}
        out[layout] = reference if len(reference) >= 2 else set(states)
    return out


def layouts_short_of_reference(strategies: Iterable[Strategy]) -> set[LayoutKey]:
    """Layouts with deciding blocks (and probes) of which fewer than two are in the reference state
    (block_states): the tune measures another block there (driver)."""
    records = [r for s in strategies for r in s.records]
    return {layout for layout, states in block_states(records).items()
            if states and sum(state == "reference" for state in states.values()) < 2}


#: Deciding blocks a layout gets where its ranks take turns on the cores (machine_state.layout_takes_turns;
#: machine_state.usable_probe reads no probe there): its launches differ by more than two blocks can pin down. Open MPI at 4 ranks on 2 cores, decided on two: a demo's verify sent back 13 of 42 tuned cells (tune
#: 1.25-1.71x, verify 0.74-1.19x; docs/measurements/tune.md "More passes, and a third block where ranks take
#: turns").
TURNS_BLOCKS = 3


def deciding_blocks(launches: int, taking_turns: bool) -> int:
    """The deciding blocks tune makes at a layout (driver), before any for the machine's state: one per launch
    after the exploring one, and at least TURNS_BLOCKS where its ranks take turns on the cores and launches > 2."""
    blocks = max(launches, 1) - 1
    return max(blocks, TURNS_BLOCKS) if taking_turns and launches > 2 else blocks


def layouts_taking_turns(strategies: Iterable[Strategy], cores: int | None = None, emulated: bool = False
                         ) -> set[LayoutKey]:
    """Layouts with deciding blocks whose ranks take turns on the `cores` (machine_state.layout_takes_turns;
    `emulated`: the nodes are emulated on this machine): they get `deciding_blocks`' more (driver)."""
    layouts = {_layout(r.cell) for s in strategies for r in s.records if r.launch_block >= 2}
    return {layout for layout in layouts if layout_takes_turns(layout[0], layout[2], emulated, cores)}


def launch_runs(strategy: Strategy, first_block: int = 0, keep: Mapping[LayoutKey, set[int]] | None = None
                ) -> dict[Cell, dict[tuple[str, int], list[float]]]:
    """cell -> (algorithm, launch block) -> the latencies of its successful runs there, blocks from
    `first_block` on. `keep`: layout -> the deciding blocks to use there (reference_blocks); a layout it does
    not name, every block. Of the deciding blocks' runs, those measured outside the layout's reference state
    (reference_probes) are left out."""
    reference = reference_probes(strategy.records)
    runs: dict[Cell, dict[tuple[str, int], list[float]]] = {}
    for record in strategy.records:
        layout = _layout(record.cell)
        blocks = keep.get(layout) if keep is not None else None
        if not record.ok or record.launch_block < first_block:
            continue
        if record.launch_block >= 2 and ((blocks is not None and record.launch_block not in blocks)
                                         or not same_state(record.probe_us, reference.get(layout))):
            continue
        runs.setdefault(record.cell, {}).setdefault((record.algorithm, record.launch_block), []).append(
            record.measured_us)
    return runs


def block_values(runs: Mapping[tuple[str, int], list[float]], algorithm: str) -> dict[int, float]:
    """launch block -> block value of `algorithm` against the default, in the blocks where both ran."""
    return {block: launch_log_ratio(values, runs[(DEFAULT_ALGORITHM, block)])
            for (name, block), values in runs.items() if name == algorithm and (DEFAULT_ALGORITHM, block) in runs}


#: A block value this far (log) from both its neighbours' in the same launch, on the same side of both, is a
#: spike (despike): 2x, where the run-to-run noise of a block value is 5-15 %.
SPIKE = math.log(2.0)


def despike(values: dict[Cell, dict[str, dict[int, float]]]) -> int:
    """Replace, in place, each block value that is a spike among its neighbours (the next smaller and larger
    measured sizes of its collective and scale, for the same algorithm in the same launch block) by their
    mean, where the cell's other launches do not repeat it; returns how many. A cell of one launch can read 3x
    off while every other size of that launch reads the algorithm as the others do (pairwise alltoall at 4 KiB
    0.34x in one launch, 1.27x in the next, its neighbours 1.1-1.9x in both): a cell effect of that launch,
    which split the algorithm's range in two and widened its interval. Noise never reaches SPIKE; a real
    crossover moves a value past one neighbour only. A dip at one size that most of the cell's launches show is
    the cell's own figure, not a launch's, and stays (issue 58: MPICH's default allreduce at 8 B was 1.6x
    faster than recursive_doubling in every launch, between sizes where it was 2x slower: smoothed, the 8 B
    cell joined their range and the file selected recursive_doubling there). Each value is judged against the
    values as measured, not against a neighbour already replaced."""
    by_line: dict[tuple, list[Cell]] = {}
    for cell in values:
        by_line.setdefault((cell.collective, cell.scale), []).append(cell)
    replacements: list[tuple[dict[int, float], int, float]] = []
    for cells in by_line.values():
        cells.sort(key=lambda c: c.msg_bytes)
        for before, cell, after in zip(cells, cells[1:], cells[2:], strict=False):
            for algorithm, blocks in values[cell].items():
                # per block with both neighbours measured: +1 a spike above both, -1 below both, 0 none
                sides: dict[int, tuple[int, float]] = {}
                for block, value in blocks.items():
                    left = values[before].get(algorithm, {}).get(block)
                    right = values[after].get(algorithm, {}).get(block)
                    if left is None or right is None:
                        continue
                    side = (1 if value - left > SPIKE and value - right > SPIKE
                            else -1 if left - value > SPIKE and right - value > SPIKE else 0)
                    sides[block] = (side, (left + right) / 2.0)
                for block, (side, mean) in sides.items():
                    repeated = sum(other == side for b, (other, _) in sides.items() if b != block)
                    if side and repeated < len(sides) - 1 - repeated:
                        replacements.append((blocks, block, mean))
    for blocks, block, mean in replacements:
        blocks[block] = mean
    return len(replacements)


def ranges_of(cells: list[Cell], leads: Mapping[Cell, str], sizes: list[int]) -> list[list[Cell]]:
    """Neighbouring cells (same collective and scale, consecutive sizes of the space) with the same `leads`
    value, as the ranges a tuning-file rule would cover."""
    ranges: list[list[Cell]] = []
    for cell in sorted(cells, key=lambda c: (c.collective, c.scale, c.msg_bytes)):
        last = ranges[-1][-1] if ranges else None
        if (last is not None and (last.collective, last.scale) == (cell.collective, cell.scale)
                and leads[last] == leads[cell] and sizes.index(cell.msg_bytes) == sizes.index(last.msg_bytes) + 1):
            ranges[-1].append(cell)
        else:
            ranges.append([cell])
    return ranges


def decide_cells(strategy: Strategy, contested: Mapping[Cell, tuple[str, ...]], *, level: float = LEVEL,
                 keep: Mapping[LayoutKey, set[int]] | None = None, min_gain: float | None = None
                 ) -> dict[Cell, CellDecision]:
    """Each contested cell's decision (module docstring). A cell's lead is the contender with the highest
    mean block value against the default (over two launches at least); neighbouring cells with the same
    lead ahead of the default, or with their leads behind it, form a range, decided as one
    (evidence.compare_launches over the range's cells and the launches all of them have), with the spread
    pooled over the ranges of the collective at that layout; "tuned" needs the range faster than the default by `min_gain`
    (None: MIN_GAIN), and every cell of it not slower than the default beyond noise on its own block values as
    measured: a cell that is goes to the default, and the rest of the range is decided again in parts."""
    min_gain = MIN_GAIN if min_gain is None else min_gain
    values: dict[Cell, dict[str, dict[int, float]]] = {}
    deciding = {r.launch_block for r in strategy.records if r.launch_block >= 2}
    # With two deciding launches or more, the exploring launch (its order set by the strategy's rounds, the
    # default often measured first at a size) is left out: only the randomized launches decide; and of
    # those, the ones in the machine's reference state where two or more were, never a mixed one (`keep`,
    # reference_blocks).
    runs = launch_runs(strategy, 2 if len(deciding) >= 2 else 0, keep)
    for cell, algorithms in contested.items():
        values[cell] = {a: block_values(runs.get(cell, {}), a) for a in algorithms[1:]}
    measured = {cell: {a: dict(blocks) for a, blocks in found.items()} for cell, found in values.items()}
    despike(values)
    means = {cell: {a: float(np.mean(list(v.values()))) if len(v) >= 2 else -math.inf for a, v in found.items()}
             for cell, found in values.items()}
    leads = {cell: max(found, key=lambda a: means[cell][a]) for cell, found in values.items()}
    # A range: neighbouring cells whose lead is ahead of the default so far, led by the same algorithm, or
    # neighbouring cells whose lead is behind it (the default so far, whichever algorithm trails).
    provisional = {cell: lead if means[cell][lead] > 0 else DEFAULT_ALGORITHM for cell, lead in leads.items()}
    sizes = sorted({cell.msg_bytes for cell in strategy.space.cells})

    def matrix_of(cells: list[Cell]) -> np.ndarray | None:
        blocks = sorted(set.intersection(*(set(values[c][leads[c]]) for c in cells)))
        return np.array([[values[c][leads[c]][b] for b in blocks] for c in cells]) if blocks else None

    ranges = ranges_of(list(contested), provisional, sizes)
    matrices = [(cells, matrix_of(cells)) for cells in ranges]
    # pooled over the ranges measured in the same launches, i.e. of one layout: the 4-rank layout's launches
    # (ranks taking turns on 2 cores) spread several times more than the 2-rank one's, and pooled with them
    # its ranges looked decided where verify's own launches of them were not
    spreads = {layout: launch_spread(m for cells, m in matrices if m is not None and _layout(cells[0]) == layout)
               for layout in {_layout(cells[0]) for cells, _ in matrices}}

    def alone(cell: Cell, found: Mapping[Cell, Mapping[str, Mapping[int, float]]]) -> Comparison | None:
        """The cell's lead against the default on the cell's own block values in `found`."""
        row = list(found[cell][leads[cell]].values())
        return compare_launches(row, spread=spreads[_layout(cell)], level=level) if row else None

    decisions: dict[Cell, CellDecision] = {}
    pending = list(ranges)
    while pending:
        cells = pending.pop()
        matrix, spread = matrix_of(cells), spreads[_layout(cells[0])]
        comparison = compare_launches(matrix, spread=spread, level=level) if matrix is not None else None
        verdict = comparison.verdict if comparison is not None else "same"
        if verdict == "faster" and min_gain > 0 and matrix is not None:
            # faster than default x (1 + min_gain) with the evidence, not only faster
            verdict = compare_launches(matrix - math.log1p(min_gain), spread=spread, level=level).verdict
            verdict = "faster" if verdict == "faster" else "same"
        tuned = verdict == "faster" and provisional[cells[0]] != DEFAULT_ALGORITHM
        # a range's algorithm at every cell it covers, on the cell's own figures: one slower beyond noise by its
        # values as measured (no spike smoothed) is left to the default and splits the range (module docstring)
        slower = {c: own for c in cells if tuned and (own := alone(c, measured)) is not None and own.verdict == "slower"}
        if slower:
            for cell, own in slower.items():
                decisions[cell] = CellDecision(cell, DEFAULT_ALGORITHM, "default", own, own)
            pending += [list(part) for kept, part in groupby(cells, key=lambda c: c not in slower) if kept]
            continue
        for cell in cells:
            own = alone(cell, values)
            if tuned:
                decisions[cell] = CellDecision(cell, leads[cell], "tuned", comparison, own)
            else:
                decisions[cell] = CellDecision(cell, DEFAULT_ALGORITHM, "default" if verdict == "slower" else "tie",
                                               comparison, own)
    return decisions
