"""The machine's state across launches (tune/machine_state.py) and how verify judges by it (issue 39): a
rule is judged on the launch pairs of the machine's fastest state, a slower state can only veto it, and a
pair whose two launches met different states is left out."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import SimpleNamespace

import pytest

from tunempi.bench.engine import Layout, PointOutcome
from tunempi.bench.protocol import PointReply, PointRequest
from tunempi.bench.sweep import BenchPoint
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.space import Cell
from tunempi.store.results import Measurement
from tunempi.strategy import MeasurementRecord
from tunempi.tune.launch_blocks import block_states, launch_runs, layouts_short_of_reference, reference_blocks
from tunempi.tune.machine_state import (
    STATE_RATIO,
    StatesMet,
    in_reference,
    launch_probes,
    ranks_sharing_cores,
    same_state,
    usable_probe,
)
from tunempi.tune.runner import PointResult
from tunempi.tune.verify import evaluate, evaluate_states, reference_shortfall

FAST, SLOW = 45.0, 135.0  # the probe's two states on this kind of VM (us)
RULE = [Cell("bcast", 2, 1, 2, size) for size in (16384, 65536, 262144)]


def result(cell: Cell, algorithm: str, run: int, median: float, probe: float | None) -> PointResult:
    request = PointRequest(id=1, collective=cell.collective, msg_bytes=cell.msg_bytes)
    reply = PointReply(id=1, status="ok", median_us=median, probe_us=probe)
    m = Measurement(library_fingerprint="f", library="x", collective=cell.collective, algorithm=algorithm,
                    ranks=cell.ranks, msg_bytes=cell.msg_bytes, nodes=cell.nodes, ppn=cell.ppn, run=run,
                    median_us=median)
    return PointResult(BenchPoint(cell.collective, algorithm, cell.msg_bytes, run), Layout(cell.ranks),
                       PointOutcome(request, "ok", reply=reply), m, 0.1, 0)


def launches(runs: Sequence[int], tuned: float, default: float, probe: float | None, *, default_probe: float | None = None,
             cells: Sequence[Cell] = RULE) -> list[PointResult]:
    """Launch pairs: in each, the rule's cells at `tuned` us under the files and `default` us without them,
    both launches meeting the machine at `probe` (the default's at `default_probe` if given). Each cell's
    times grow a little with the run, as real launches differ."""
    out = []
    for run in runs:
        for k, cell in enumerate(cells):
            wobble = 1 + 0.01 * ((run + k) % 3)
            out.append(result(cell, "binomial", run, tuned * wobble, probe))
            out.append(result(cell, DEFAULT_ALGORITHM, run, default * wobble,
                              probe if default_probe is None else default_probe))
    return out


SELECTION: Mapping[Cell, str] = dict.fromkeys(RULE, "binomial")


@pytest.fixture(autouse=True)
def _enough_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layouts here are 2 ranks: not oversubscribed on any machine the probe is read on."""
    monkeypatch.setattr("tunempi.tune.machine_state.os.sched_getaffinity", lambda pid: set(range(8)))


def test_a_launch_probe_is_the_median_of_its_points_and_states_are_told_apart_by_the_ratio() -> None:
    assert launch_probes([("a", 44.0), ("a", 40.0), ("a", 900.0), ("b", None), ("b", 0.0)]) == {"a": 44.0}
    # a launch whose probes spread (other jobs' ranks on the cores) says nothing about the state
    assert launch_probes([("c", 44.0), ("c", 873.0), ("c", 1388.0), ("c", 76.0)]) == {}
    assert same_state(FAST, FAST * 1.3) and not same_state(FAST, SLOW)
    # the band's two states (about 25 and 44 us) are one reference band, but not one state for a comparison
    assert not same_state(25.0, 44.0) and in_reference(44.0, 25.0)
    assert same_state(None, SLOW) and in_reference(None, FAST) and in_reference(SLOW, None)
    assert in_reference(FAST * STATE_RATIO, FAST) and not in_reference(SLOW, FAST)
    # an oversubscribed layout's probe reads the ranks' turns on the cores, not the machine
    assert usable_probe(SLOW, ranks_on_cores=2, cores=2) == SLOW and usable_probe(SLOW, 4, cores=2) is None
    assert usable_probe(0.0, 2, cores=2) is None and usable_probe(None, 2, cores=2) is None


def test_emulated_nodes_share_this_machines_cores_so_their_ranks_take_turns_as_one_nodes_do() -> None:
    """2 emulated nodes x 2 (and 4 x 1) put 4 ranks on this machine's cores: their probe reads the turns, as
    one node's 4 ranks' does, and tune adds no block for the machine's state there (the plan's 2x2 and 4x1
    misses). Real nodes have their own cores: 2 x 2 is 2 ranks on a node's."""
    assert ranks_sharing_cores(4, 2, emulated=True) == 4 and ranks_sharing_cores(4, 1, emulated=True) == 4
    assert ranks_sharing_cores(4, 2, emulated=False) == 2
    cell = Cell("bcast", 4, 2, 2, 16384)

    def probed(emulated: bool, ranks: int = 4, nodes: int = 2, ppn: int = 2) -> float | None:
        reply = PointReply(id=1, status="ok", median_us=10.0, probe_us=FAST)
        m = Measurement(library_fingerprint="f", library="x", collective="bcast", algorithm=DEFAULT_ALGORITHM,
                        ranks=ranks, msg_bytes=cell.msg_bytes, nodes=nodes, ppn=ppn, run=0, median_us=10.0)
        return PointResult(BenchPoint("bcast", DEFAULT_ALGORITHM, cell.msg_bytes, 0), Layout(ranks, nodes, ppn),
                           PointOutcome(PointRequest(id=1, collective="bcast", msg_bytes=cell.msg_bytes), "ok",
                                        reply=reply), m, 0.1, 0, emulated=emulated).probe_us

    cores = len(os.sched_getaffinity(0))
    assert probed(emulated=False, ranks=2 * cores, nodes=2, ppn=cores) == FAST  # a node's cores hold its ranks
    assert probed(emulated=True, ranks=2 * cores, nodes=2, ppn=cores) is None   # this machine's do not
    assert probed(emulated=True, ranks=cores, nodes=cores, ppn=1) == FAST       # as many ranks as cores


def test_a_rule_is_judged_in_the_fastest_state_whatever_the_slower_one_says() -> None:
    """The binomial bcast of 2026-11-28: 2x faster than the default in the slow state, slower in the fast one.
    Pooled, the slow launches would keep it; judged in the fastest state it goes back."""
    results = launches(range(3), tuned=12.0, default=10.0, probe=FAST) \
        + launches(range(3, 7), tuned=40.0, default=80.0, probe=SLOW)
    verified, met = evaluate_states(SELECTION, results)
    assert {v.verdict for v in verified} == {"slower"}
    assert all(v.launches == 3 for v in verified)  # the fast pairs only
    assert met == StatesMet(reference_pairs=3, other_pairs=4, mixed_pairs=0, slowest_ratio=SLOW / FAST)
    assert met.changed and "3 launch pair(s) in the fastest state" in met.line()


def test_a_rule_faster_in_the_fastest_state_but_slower_in_another_is_vetoed() -> None:
    results = launches(range(3), tuned=8.0, default=10.0, probe=FAST) \
        + launches(range(3, 6), tuned=60.0, default=30.0, probe=SLOW)
    assert {v.verdict for v in evaluate(SELECTION, results)} == {"slower"}
    fast_only = launches(range(3), tuned=8.0, default=10.0, probe=FAST)
    assert {v.verdict for v in evaluate(SELECTION, fast_only)} == {"faster"}


def test_a_pair_whose_launches_met_different_states_is_left_out() -> None:
    """One launch of the pair in the slow state makes the default look 4x slower: that pair would decide."""
    results = launches(range(3), tuned=10.0, default=10.0, probe=FAST) \
        + launches([3], tuned=10.0, default=40.0, probe=FAST, default_probe=SLOW)
    verified, met = evaluate_states(SELECTION, results)
    assert met.mixed_pairs == 1 and met.reference_pairs == 3
    assert all(v.launches == 3 and v.verdict != "faster" for v in verified)


def test_the_tunes_state_is_the_reference_and_a_layout_without_two_pairs_in_it_is_short() -> None:
    """A verify whose launches all met a state slower than the tune's: none is in the reference state, so
    verify waits for the machine there (verify_run); judged anyway, it uses every pair of one state."""
    slow = launches(range(3), tuned=8.0, default=10.0, probe=SLOW)
    _, met, short = reference_shortfall(SELECTION, slow, {(2, 1, 2): FAST})
    assert short == {(2, 1, 2)} and met.other_pairs == 3 and met.reference_pairs == 0
    assert {v.verdict for v in evaluate(SELECTION, slow, reference_us={(2, 1, 2): FAST})} == {"faster"}
    _, _, short = reference_shortfall(SELECTION, slow + launches([3, 4], 8.0, 10.0, FAST), {(2, 1, 2): FAST})
    assert short == set()
    _, _, short = reference_shortfall(SELECTION, slow, {(2, 1, 2): SLOW})  # tune met the same state
    assert short == set()


def test_without_probes_every_pair_counts_as_before() -> None:
    results = launches(range(3), tuned=8.0, default=10.0, probe=None)
    verified, met = evaluate_states(SELECTION, results)
    assert {v.verdict for v in verified} == {"faster"} and not met.changed and met.reference_pairs == 3
    assert StatesMet.from_dict(met.to_dict()) == met


def test_verify_waits_for_the_fastest_state_and_gives_up_after_its_time() -> None:
    """verify_run.wait_for_reference_state with an injected clock: another launch pair after each pause
    until two pairs met the reference state, or the time is up (then it judges with what it has)."""
    from types import SimpleNamespace

    from tunempi.tune.verify_run import VerifyListener, wait_for_reference_state

    plan = SimpleNamespace(selection=dict(SELECTION), manifest=SimpleNamespace(machine_probe_us={(2, 1, 2): FAST}),
                           repeats=2)
    now = [0.0]
    asked: list[int] = []

    def measure_then_fast(selection: Mapping[Cell, str], runs: Sequence[int]) -> list[PointResult]:
        asked.extend(runs)
        return launches(runs, 8.0, 10.0, SLOW if len(asked) < 2 else FAST)

    def sleep(s: float) -> None:
        now[0] += s

    slow = launches(range(3), 8.0, 10.0, SLOW)
    added = wait_for_reference_state(plan, slow, measure_then_fast, VerifyListener(), {"total": 0},  # type: ignore[arg-type]
                                     wait_s=30, pause_s=2, clock=lambda: now[0], sleep=sleep)
    assert len(asked) == 3 and len(set(asked)) == 3 and min(asked) >= 3  # new run numbers, two of them fast
    assert {r.measurement.run for r in added} == set(asked) and now[0] == 6

    now[0], asked[:] = 0.0, []
    always_slow = wait_for_reference_state(plan, slow, lambda sel, runs: launches(runs, 8.0, 10.0, SLOW),  # type: ignore[arg-type]
                                           VerifyListener(), {"total": 0}, wait_s=10, pause_s=2,
                                           clock=lambda: now[0], sleep=sleep)
    assert now[0] == 10 and len({r.measurement.run for r in always_slow}) == 5
    # verify --repeats 3: it waits for three pairs in the tune's state (two gave one degree of freedom)
    now[0], asked[:] = 0.0, []
    plan.repeats = 3
    added = wait_for_reference_state(plan, slow, measure_then_fast, VerifyListener(), {"total": 0},  # type: ignore[arg-type]
                                     wait_s=30, pause_s=2, clock=lambda: now[0], sleep=sleep)
    assert len(asked) == 4 and now[0] == 8



def test_verify_measures_an_undecided_promising_rule_again_until_its_evidence_decides() -> None:
    """verify_run.more_passes: a rule estimated faster but undecided (one launch in three against it) gets
    passes of new launch pairs (new run numbers) until the signed-rank test decides, and no more; one that
    stays undecided stops after MAX_PASSES; a decided one gets none."""
    from types import SimpleNamespace

    from tunempi.tune.verify import evaluate
    from tunempi.tune.verify_run import MAX_PASSES, more_passes

    plan = SimpleNamespace(selection=dict(SELECTION), manifest=SimpleNamespace(machine_probe_us={(2, 1, 2): FAST},
                                                                               decided=dict), repeats=3)
    first = launches([0, 1], 8.0, 10.0, FAST) + launches([2], 10.0, 8.0, FAST)  # 1.25x, 1.25x, 0.8x
    asked: list[list[int]] = []

    def favour(selection: Mapping[Cell, str], runs: Sequence[int]) -> list[PointResult]:
        asked.append(list(runs))
        return launches(runs, 8.0, 10.0, FAST)

    added, again = more_passes(plan, first, favour, {"total": 0})  # type: ignore[arg-type]
    # 6 launches, one against: not yet at 2.5 %; 9 launches, one against: faster
    assert asked == [[3, 4, 5], [6, 7, 8]] and set(again) == set(SELECTION)
    assert {v.verdict for v in evaluate(plan.selection, [*first, *added])} == {"faster"}

    asked.clear()

    def undecided(selection: Mapping[Cell, str], runs: Sequence[int]) -> list[PointResult]:
        asked.append(list(runs))
        return [r for run in runs for r in launches([run], *((8.0, 12.0) if run % 2 else (10.0, 9.0)), FAST)]

    _, again = more_passes(plan, first, undecided, {"total": 0})  # type: ignore[arg-type]
    assert len(asked) == MAX_PASSES - 1 and set(again) == set(SELECTION)  # estimate about 1.15x, never decided

    asked.clear()
    decided = launches(range(6), 8.0, 10.0, FAST)
    assert more_passes(plan, decided, favour, {"total": 0}) == ([], []) and not asked  # type: ignore[arg-type]

def records_of(blocks: Mapping[int, tuple[float, float]]) -> list[MeasurementRecord]:
    """A tune's runs at one layout: per launch block, (the default's launch probe, the contenders')."""
    cells = [Cell("alltoall", 2, 1, 2, size) for size in (8, 256, 4096)]
    return [MeasurementRecord(cell, algorithm, 10.0, launch_block=block, probe_us=probe,
                              launch_side="" if block == 1 else side)
            for block, (default_probe, contender_probe) in blocks.items() for cell in cells
            for algorithm, side, probe in ((DEFAULT_ALGORITHM, "default", default_probe),
                                           ("pairwise", "contender1", contender_probe))]


def test_deciding_runs_outside_the_reference_state_are_left_out_and_another_block_is_measured() -> None:
    """2026-11-28: a block whose default launch met 44 us and whose contender launch met 25 (inside the band,
    the bulk ping-pong faster, small collectives 1.2-1.4x slower) read pairwise alltoall's 1.5x gain as a tie.
    The reference state is the one most runs in the band met (44); runs outside it do not decide, a block
    with a launch mostly outside it is not in the reference state, and the layout is short of blocks."""
    layout = (2, 1, 2)
    mixed = records_of({1: (44.0, 44.0), 2: (44.0, 25.0), 3: (44.0, 44.0)})
    assert block_states(mixed) == {layout: {2: "other", 3: "reference"}}
    assert reference_blocks(mixed) == {layout: {2, 3}}  # one block in the state: both, their runs filtered
    assert set(launch_runs(SimpleNamespace(records=mixed), 2)[mixed[0].cell]) == {  # type: ignore[arg-type]
        (DEFAULT_ALGORITHM, 2), (DEFAULT_ALGORITHM, 3), ("pairwise", 3)}  # block 2's contender runs left out
    strategy = SimpleNamespace(records=mixed)
    assert layouts_short_of_reference([strategy]) == {layout}  # type: ignore[list-item]
    again = records_of({1: (44.0, 44.0), 2: (44.0, 25.0), 3: (44.0, 44.0), 4: (46.0, 43.0)})
    assert reference_blocks(again) == {layout: {3, 4}}
    assert layouts_short_of_reference([SimpleNamespace(records=again)]) == set()  # type: ignore[list-item]
    # a slow spell (both launches 3x slower) is another state: it decides only where two blocks are not in the band
    slow = records_of({1: (44.0, 44.0), 2: (130.0, 135.0), 3: (44.0, 45.0), 4: (44.0, 44.0)})
    assert block_states(slow) == {layout: {2: "other", 3: "reference", 4: "reference"}}
    assert reference_blocks(slow) == {layout: {3, 4}}
    # two contender launches of one block are two launches: one of them in another state makes the block mixed
    third = [MeasurementRecord(Cell("alltoall", 2, 1, 2, 8), "brucks", 10.0, launch_block=3, probe_us=135.0,
                               launch_side="contender2")] * 3
    assert block_states(again + third)[layout][3] == "other"


def test_a_block_value_far_off_both_neighbours_in_its_launch_is_a_spike_and_a_crossover_is_not() -> None:
    """Pairwise alltoall at 4 KiB read 0.34x in one launch and 1.27x in the next, its neighbours 1.1-1.9x in
    both: the spike is replaced by its neighbours' mean in that launch; a step from 1.3x to 0.8x (a crossover)
    and the noise stay as measured."""
    import math

    from tunempi.tune.launch_blocks import despike

    cells = [Cell("alltoall", 2, 1, 2, size) for size in (256, 1024, 4096, 16384, 65536, 131072)]
    logs = {1: [1.24, 1.3, 0.34, 1.45, 1.3, 0.8], 2: [1.22, 1.28, 1.27, 1.5, 1.32, 0.79]}
    values = {cell: {"pairwise": {block: math.log(row[k]) for block, row in logs.items()}}
              for k, cell in enumerate(cells)}
    assert despike(values) == 1
    assert math.exp(values[cells[2]]["pairwise"][1]) == pytest.approx(math.sqrt(1.3 * 1.45))
    for k, cell in enumerate(cells):
        if k != 2:
            assert values[cell]["pairwise"][1] == pytest.approx(math.log(logs[1][k]))
        assert values[cell]["pairwise"][2] == pytest.approx(math.log(logs[2][k]))


def test_a_dip_at_one_size_that_most_launches_show_is_the_cell_s_own_figure_not_a_spike() -> None:
    """Issue 58: recursive_doubling against MPICH's default allreduce read 1.45x at 4 B, 0.62x at 8 B and 2x at
    12 B in every launch (the default is fast at 8 B): the dip is the cell's, and stays; in three launches, a
    dip two of them show stays too, one only one shows is smoothed."""
    import math

    from tunempi.tune.launch_blocks import despike

    cells = [Cell("allreduce", 2, 1, 2, size) for size in (4, 8, 12)]

    def values_of(logs: dict[int, list[float]]) -> dict[Cell, dict[str, dict[int, float]]]:
        return {cell: {"recursive_doubling": {block: math.log(row[k]) for block, row in logs.items()}}
                for k, cell in enumerate(cells)}

    every = values_of({2: [1.45, 0.62, 2.0], 3: [1.45, 0.62, 2.0]})
    assert despike(every) == 0 and math.exp(every[cells[1]]["recursive_doubling"][2]) == pytest.approx(0.62)
    two_of_three = values_of({2: [1.45, 0.62, 2.0], 3: [1.45, 0.62, 2.0], 4: [1.45, 1.5, 2.0]})
    assert despike(two_of_three) == 0
    one_of_three = values_of({2: [1.45, 0.62, 2.0], 3: [1.45, 1.6, 2.0], 4: [1.45, 1.5, 2.0]})
    assert despike(one_of_three) == 1
    assert math.exp(one_of_three[cells[1]]["recursive_doubling"][2]) == pytest.approx(math.sqrt(1.45 * 2.0))


def test_a_launch_that_met_another_state_is_not_counted_but_a_busy_machine_is_not_waited_for() -> None:
    """A contender launch with most of its runs at 132 us (a few at 43) met the slow state: its block does not
    count. A launch whose probes spread from 44 to 1,388 us (other jobs' ranks on the cores) holds no state:
    its block counts (its runs in the reference state still decide), so a tune on a busy machine does not
    wait 30 s for a state that will not come."""
    layout = (2, 1, 2)
    cell = Cell("alltoall", 2, 1, 2, 8)
    base = records_of({1: (44.0, 44.0), 2: (44.0, 44.0)})

    def launch(block: int, probes: Sequence[float]) -> list[MeasurementRecord]:
        return [MeasurementRecord(cell, "default", 10.0, launch_block=block, probe_us=44.0, launch_side="default")] \
            + [MeasurementRecord(cell, "pairwise", 10.0, launch_block=block, probe_us=p, launch_side="contender1")
               for p in probes]

    slow = base + launch(3, [132.0, 131.0, 133.0, 43.0, 135.0])
    busy = base + launch(3, [44.0, 873.0, 1388.0, 76.0, 230.0])
    assert block_states(slow)[layout][3] == "other"
    assert block_states(busy)[layout][3] == "reference"
