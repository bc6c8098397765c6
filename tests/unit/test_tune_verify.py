from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tunempi import evidence
from tunempi.bench.engine import Layout, PointOutcome
from tunempi.bench.protocol import PointRequest
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.space import Cell
from tunempi.store.results import Measurement
from tunempi.tune.compositions import DEFAULT, CompositionResult
from tunempi.tune.driver import layout_of
from tunempi.tune.manifest import SelectionRow, VerifyRecord
from tunempi.tune.runner import PointResult
from tunempi.tune.verify import (
    apply_replacements,
    compositions_to_drop,
    evaluate,
    evaluate_composition,
    summary,
    verify_plan,
)

A = Cell("allreduce", 2, 1, 2, 1024)
B = Cell("allreduce", 2, 1, 2, 65536)
C = Cell("allreduce", 4, 1, 4, 1024)
D = Cell("bcast", 2, 1, 2, 8)


def test_plan_interleaves_tuned_and_default_and_alternates_the_order() -> None:
    work = verify_plan({A: "ring", B: "rd", C: "ring", D: DEFAULT_ALGORITHM}, repeats=2)
    assert set(work) == {Layout(2), Layout(4)}
    names = [(p.msg_bytes, p.algorithm, p.run) for p in work[Layout(2)]]
    assert names == [(1024, "ring", 0), (1024, "default", 0), (65536, "rd", 0), (65536, "default", 0),
                     (1024, "default", 1), (1024, "ring", 1), (65536, "default", 1), (65536, "rd", 1)]
    assert all(p.collective != "bcast" for pts in work.values() for p in pts)  # default cells: nothing to compare


def result(cell: Cell, algorithm: str, run: int, median: float | None) -> PointResult:
    request = PointRequest(id=1, collective=cell.collective, msg_bytes=cell.msg_bytes)
    status = "ok" if median is not None else "failed"
    from tunempi.bench.sweep import BenchPoint

    m = Measurement(library_fingerprint="f", library="x", collective=cell.collective, algorithm=algorithm,
                    ranks=cell.ranks, msg_bytes=cell.msg_bytes, nodes=cell.nodes, ppn=cell.ppn, run=run,
                    status=status, median_us=median)
    return PointResult(BenchPoint(cell.collective, algorithm, cell.msg_bytes, run), Layout(cell.ranks),
                       PointOutcome(request, status), m, 0.1, 0)


def test_slower_cells_go_back_to_default_and_the_summary_counts_them() -> None:
    selection = {A: "ring", B: "rd", C: "ring", D: DEFAULT_ALGORITHM}
    results = []
    for run in range(3):
        results += [result(A, "ring", run, 10.0 + run * 0.1), result(A, "default", run, 12.0 + run * 0.1)]  # faster
        results += [result(B, "rd", run, 20.0 + run * 0.1), result(B, "default", run, 16.0 + run * 0.1)]  # slower
        results += [result(C, "ring", run, None), result(C, "default", run, 5.0)]  # tuned failed
    verified = evaluate(selection, results)
    by_cell = {v.cell: v for v in verified}
    assert by_cell[A].verdict == "faster" and by_cell[B].verdict == "slower"
    assert by_cell[C].verdict == "failed" and by_cell[D].verdict == "default"
    fixed, verified = apply_replacements(selection, verified)
    assert fixed == {A: "ring", B: DEFAULT_ALGORITHM, C: DEFAULT_ALGORITHM, D: DEFAULT_ALGORITHM}
    numbers = summary(verified)
    assert numbers["slower_beyond_noise_before"] == 1 and numbers["slower_beyond_noise_after"] == 0
    assert numbers["replaced"] == 2 and numbers["compared"] == 2
    assert numbers["geo_mean_speedup_compared_after"] == pytest.approx(math.sqrt(by_cell[A].speedup * 1.0))
    assert numbers["geo_mean_speedup_compared_before"] < numbers["geo_mean_speedup_compared_after"]
    for v in verified:  # JSON round trip keeps the verdicts
        assert type(v).from_dict(v.to_dict()).verdict == v.verdict


def test_a_launch_s_value_for_a_cell_is_the_median_of_its_runs_so_one_stalled_point_does_not_make_it() -> None:
    """Issue 39: each launch measures every cell RUNS_PER_LAUNCH times; a point stalled 5x in one launch (the
    tuned side's second run) leaves that launch's pair at its median, and the rule faster in every launch."""
    from tunempi.tune.file_launches import RUNS_PER_LAUNCH

    assert RUNS_PER_LAUNCH >= 3
    results = []
    for run in range(3):
        for repeat in range(3):
            stalled = run == 1 and repeat == 1
            results += [result(A, "ring", run, 50.0 if stalled else 10.0 + repeat * 0.1),
                        result(A, "default", run, 12.0 + run * 0.2 + repeat * 0.1)]
    (verified,) = evaluate({A: "ring"}, results)
    assert verified.verdict == "faster" and verified.tuned_us == pytest.approx(10.1)
    # the same launches judged on the stalled run alone in launch 1 (one run per launch, as before)
    single = [r for r in results if r.measurement.run != 1 or r.measurement.median_us in (50.0, 12.3)]
    assert evaluate({A: "ring"}, single)[0].verdict != "faster"


def test_only_a_rule_faster_with_evidence_stays_a_loss_or_a_gain_within_noise_goes_back() -> None:
    """Issue 39: a rule stays in the files only where the evidence says it is faster than the default."""
    from tunempi.tune.verify import VerifiedCell

    E = Cell("allreduce", 2, 1, 2, 1 << 20)
    verified = [VerifiedCell(A, "ring", 11.0, 10.0, 0.91, 0.6, 1.3, "same"),  # a loss within noise: back
                VerifiedCell(B, "rd", 9.0, 10.0, 1.04, 0.8, 1.4, "same"),  # a gain within noise: back too
                VerifiedCell(C, "ring", 13.0, 10.0, 0.77, 0.7, 0.85, "slower"),  # beyond noise: back
                VerifiedCell(D, "ring", 8.0, 10.0, 1.25, 1.1, 1.4, "faster"),  # evidence: stays
                # faster as a rule, but clearly slower on its own: back
                VerifiedCell(E, "ring", 8.0, 10.0, 1.25, 1.1, 1.4, "faster", own_speedup=0.8, own_verdict="slower")]
    selection = {A: "ring", B: "rd", C: "ring", D: "ring", E: "ring"}
    fixed, verified = apply_replacements(selection, verified)
    assert fixed == {A: DEFAULT_ALGORITHM, B: DEFAULT_ALGORITHM, C: DEFAULT_ALGORITHM, D: "ring",
                     E: DEFAULT_ALGORITHM}
    numbers = summary(verified)
    assert numbers["replaced"] == 4 and numbers["slower_point_estimate_after"] == 0
    assert numbers["geo_mean_speedup_compared_after"] == pytest.approx(1.25 ** (1 / 5))


def test_an_undecided_rule_keeps_the_cells_its_own_launches_call_faster_and_the_rewrite_splits_it() -> None:
    """Issue 58: verify sent LAMMPS' 8-23 B recursive_doubling rule back whole (1.62x [0.93, 1.80] over its
    sizes) because its 8 B cell was a tie, though 12 and 16 B were each 2x faster on their own. Each such cell
    stays; the tie goes back; an undecided rule with no cell faster on its own goes back whole, and a slower
    rule goes back whatever its cells say."""
    from tunempi.tune.verify import VerifiedCell, rules_of

    eight, twelve, sixteen = (Cell("allreduce", 2, 2, 1, size) for size in (8, 12, 16))
    rule = dict(speedup=1.62, ci_low=0.93, ci_high=1.80, verdict="same", rule_cells=3, rule_from=8)
    verified = [VerifiedCell(eight, "recursive_doubling", 5.0, 5.1, own_speedup=1.02, own_verdict="same", **rule),
                VerifiedCell(twelve, "recursive_doubling", 5.0, 10.0, own_speedup=2.0, own_verdict="faster", **rule),
                VerifiedCell(sixteen, "recursive_doubling", 5.0, 10.0, own_speedup=2.1, own_verdict="faster",
                             **rule)]
    selection = {v.cell: v.algorithm for v in verified}
    fixed, judged = apply_replacements(selection, verified)
    assert fixed == {eight: DEFAULT_ALGORITHM, twelve: "recursive_doubling", sixteen: "recursive_doubling"}
    assert [v.replaced for v in judged] == [True, False, False]
    assert [[c.msg_bytes for c in r] for r in rules_of(fixed)] == [[12, 16]]  # the rewritten files' one rule

    nobody = [replace(v, own_verdict="same") for v in verified]
    assert set(apply_replacements(selection, nobody)[0].values()) == {DEFAULT_ALGORITHM}
    slower = [replace(v, verdict="slower") for v in verified]
    assert set(apply_replacements(selection, slower)[0].values()) == {DEFAULT_ALGORITHM}


def test_where_files_select_a_collective_whole_it_is_judged_as_one() -> None:
    """Intel MPI: a selection string replaces the library's choice at every size, so a collective stays only
    where every tuned cell of it is faster with evidence; one that is not sends every cell of its
    collective back to the default."""
    from tunempi.space import Cell
    from tunempi.tune.verify import VerifiedCell

    other = Cell("bcast", A.ranks, A.nodes, A.ppn, A.msg_bytes)
    verified = [VerifiedCell(A, "ring", 8.0, 10.0, 1.25, 1.1, 1.4, "faster"),
                VerifiedCell(B, "rd", 9.0, 10.0, 1.2, 1.1, 1.3, "faster"),
                VerifiedCell(other, "p1", 14.0, 10.0, 0.7, 0.6, 0.8, "slower")]
    selection = {A: "ring", B: "rd", other: "p1"}
    fixed, _ = apply_replacements(selection, verified, whole=True)
    assert fixed == {A: "ring", B: "rd", other: DEFAULT_ALGORITHM}
    undecided = [verified[0], VerifiedCell(B, "rd", 9.5, 10.0, 1.04, 0.8, 1.4, "same"), verified[2]]
    fixed, judged = apply_replacements(selection, undecided, whole=True)
    assert set(fixed.values()) == {DEFAULT_ALGORITHM} and all(v.replaced for v in judged)


def test_undecided_rules_with_a_promising_estimate_get_a_second_pass_with_new_run_indices() -> None:
    """Undecided ("same") with an estimate of at least 1.03 (a gain that may yet show its evidence: without
    it the rule goes back): more launches. Below it (it goes back anyway), or decided: not."""
    from tunempi.tune.verify import VerifiedCell, needs_more_launches

    D = Cell(A.collective, A.ranks, A.nodes, A.ppn, 1 << 20)
    verified = [VerifiedCell(A, "ring", 11.0, 10.0, 0.9, 0.6, 1.3, "same"),
                VerifiedCell(B, "rd", 9.5, 10.0, 1.05, 0.8, 1.4, "same"),
                VerifiedCell(C, "ring", 12.0, 10.0, 0.8, 0.7, 0.9, "slower"),
                VerifiedCell(D, "ring", 5.0, 10.0, 1.9, 0.5, 6.5, "same"),
                VerifiedCell(Cell(A.collective, A.ranks, A.nodes, A.ppn, 1 << 21), "ring", 5.0, 10.0, 2.0, 1.9,
                             2.1, "faster")]
    assert needs_more_launches(verified) == [B, D]
    # A (0.9x [0.6, 1.3]) goes back, unless tune decided it wholly above that interval: the launches of the two
    # met the machine differently (Open MPI's default at 4 ranks has two speeds by launch), so more launches
    tune_far_above = {A: (1.6, 1.4, 1.8, 3), B: (1.05, 1.04, 1.06, 2)}
    assert needs_more_launches(verified, decided=tune_far_above) == [A, B, D]
    assert needs_more_launches(verified, decided={A: (1.2, 1.1, 1.3, 3)}) == [B, D]  # overlapping: A goes back
    work = verify_plan({A: "ring"}, 2, first_run=3)
    assert [(p.algorithm, p.run) for p in work[Layout(2)]] == [("default", 3), ("ring", 3), ("ring", 4),
                                                                ("default", 4)]  # order alternates by run


def test_a_rule_is_a_run_of_neighbouring_sizes_of_one_layout_with_one_tuned_algorithm() -> None:
    from tunempi.tune.verify import rules_of

    sizes = [8, 64, 512, 4096, 32768]
    algorithms = ["ring", "ring", DEFAULT_ALGORITHM, "ring", "rd"]
    selection = {Cell("allreduce", 2, 1, 2, s): a for s, a in zip(sizes, algorithms, strict=True)}
    selection |= {Cell("allreduce", 4, 1, 4, 8): "ring", Cell("bcast", 2, 1, 2, 64): "ring"}
    rules = [[(c.collective, c.ranks, c.msg_bytes) for c in rule] for rule in rules_of(selection)]
    assert rules == [[("allreduce", 2, 8), ("allreduce", 2, 64)],  # the default at 512 B splits the ring runs
                     [("allreduce", 2, 4096)], [("allreduce", 2, 32768)],
                     [("allreduce", 4, 8)], [("bcast", 2, 64)]]  # other layouts, other rules


def noisy_rule(rng: np.random.Generator, cells: list[Cell], gain: float, sigma: float, repeats: int = 3,
               launch_sigma: float = 0.0) -> list[PointResult]:
    """Verify results for `cells` (tuned "ring"), one launch per repetition: the tuned side `gain` times
    faster, each median with log-normal noise of `sigma`, and each launch favouring one side across the whole
    rule by a log-normal factor of `launch_sigma` (what one launch of this VM does)."""
    out = []
    for run in range(repeats):
        favour = math.exp(rng.normal(0, launch_sigma))
        for cell in cells:
            out += [result(cell, "ring", run, 10.0 / gain / favour * math.exp(rng.normal(0, sigma))),
                    result(cell, DEFAULT_ALGORITHM, run, 10.0 * math.exp(rng.normal(0, sigma)))]
    return out


RULE = [Cell("allreduce", 2, 1, 2, 2 ** k) for k in (3, 6, 9, 12, 15)]


def verdicts(rng: np.random.Generator, gain: float, launch_sigma: float, trials: int = 200) -> list[str]:
    """The rule's verdict in `trials` simulated verifies of 3 launches each."""
    out = []
    for _ in range(trials):
        verified = evaluate(dict.fromkeys(RULE, "ring"), noisy_rule(rng, RULE, gain, 0.10, launch_sigma=launch_sigma))
        assert len({(v.speedup, v.verdict, v.launches, v.rule_from) for v in verified}) == 1  # the rule's verdict
        assert (verified[0].launches, verified[0].rule_cells, verified[0].rule_from) == (3, 5, 8)
        out.append(verified[0].verdict)
    return out


def agreement(found: list[str]) -> float:
    """The chance that two independent verifies give the same verdict."""
    return sum((found.count(v) / len(found)) ** 2 for v in set(found))


def test_a_rule_holds_only_if_it_holds_across_launches_so_a_rerun_reaches_the_same_verdict() -> None:
    """A rule of five sizes judged on its own 3 launches, 10 % noise per median.
    A launch that favours one side across the rule (15 %) looks like a real difference to the pairs of one
    launch: pooled as if they were independent, the same A/A data say "faster" or "slower" at several
    times the level (5 % both sides), and two verifies disagree on them. Across launches the verdict stays
    "same" at about the level, and a real 1.3x gain is still "faster". Seeded."""
    rng = np.random.default_rng(28)
    same = verdicts(rng, gain=1.0, launch_sigma=0.15)
    assert same.count("same") >= 0.92 * len(same) and agreement(same) >= 0.85
    flagged = 0
    for _ in range(200):  # the same A/A data judged as if one launch's pairs were independent
        pooled = [r.measurement.median_us for r in noisy_rule(rng, RULE, 1.0, 0.10, launch_sigma=0.15)]
        flagged += evidence.compare(pooled[0::2], pooled[1::2]).verdict != "same"
    assert flagged >= 0.12 * 200
    real = verdicts(rng, gain=1.3, launch_sigma=0.03)
    assert real.count("faster") >= 0.85 * len(real) and agreement(real) >= 0.75


def test_a_cell_clearly_slower_on_its_own_pairs_goes_back_even_in_a_faster_rule() -> None:
    cells = [Cell("allreduce", 2, 1, 2, 2 ** k) for k in range(3, 19, 2)]
    selection = dict.fromkeys(cells, "ring")
    results = []
    for run in range(4):
        for cell in cells[:-1]:  # 1.3x faster, a little noise
            results += [result(cell, "ring", run, 10.0 + 0.1 * run), result(cell, DEFAULT_ALGORITHM, run, 13.0)]
        results += [result(cells[-1], "ring", run, 20.0 + 0.1 * run),  # 2x slower at the largest size
                    result(cells[-1], DEFAULT_ALGORITHM, run, 10.0)]
    verified = evaluate(selection, results)
    assert {v.verdict for v in verified} == {"faster"} and verified[-1].own_verdict == "slower"
    fixed, judged = apply_replacements(selection, verified)
    assert fixed == {**selection, cells[-1]: DEFAULT_ALGORITHM}
    assert [v.replaced for v in judged] == [False] * 7 + [True]
    assert summary(judged)["slower_beyond_noise_before"] == 1 and summary(judged)["rules"] == 1
    back = type(judged[-1]).from_dict(judged[-1].to_dict())  # the manifest keeps the rule and the cell's own
    assert (back.rule, back.rule_cells, back.launches, back.own_verdict, back.replaced) == \
        (judged[-1].rule, 8, 4, "slower", True)


# --- written compositions (tune/compositions.py) against the default, a launch each ------------------------

def composition_runs(composition: str, times: list[tuple[float | None, float | None]],
                     sizes: tuple[int, ...] = (8, 4096)) -> list[list[CompositionResult]]:
    """One repetition per (composition time, default time); every size scaled from them (x1, x100)."""
    runs = []
    for mine, default in times:
        results = []
        for index, size in enumerate(sizes):
            for name, t in ((composition, mine), (DEFAULT, default)):
                scaled = None if t is None else t * 100 ** index
                results.append(CompositionResult("allreduce", size, name, "ok" if t is not None else "failed", scaled))
        runs.append(results)
    return runs


def test_a_composition_faster_in_every_pair_is_kept_and_one_slower_is_dropped() -> None:
    faster = evaluate_composition("allreduce", "beta", (2, 2, 1),
                                  composition_runs("beta", [(8.0, 10.0), (8.2, 10.1), (7.9, 9.8)]))
    assert faster.pairs == 6 and faster.verdict == "faster" and faster.speedup == pytest.approx(1.24, abs=0.03)
    slower = evaluate_composition("bcast", "beta", (2, 2, 1),
                                  composition_runs("beta", [(12.0, 10.0), (12.5, 10.1), (11.9, 9.8)]))
    assert slower.verdict == "slower" and slower.speedup < 1
    assert compositions_to_drop([faster, slower], applies_to_all=False) == {"bcast"}
    # Open MPI takes one component for every collective: one bad verdict drops it for all.
    assert compositions_to_drop([faster, slower], applies_to_all=True) == {"allreduce", "bcast"}
    assert compositions_to_drop([faster], applies_to_all=True) == set()


def test_a_composition_stays_only_with_evidence_and_one_that_never_ran_goes() -> None:
    mixed = [(9.0, 10.0), (11.0, 10.0)]  # 4 pairs, half won: no verdict either way
    ahead = evaluate_composition("allreduce", "beta", (2, 2, 1), composition_runs("beta", mixed))
    behind = evaluate_composition("allreduce", "beta", (2, 2, 1), composition_runs("beta", [(11.5, 10.0), (9.5, 10.0)]))
    assert ahead.verdict == behind.verdict == "same" and ahead.speedup > 1 > behind.speedup
    assert compositions_to_drop([ahead, behind], applies_to_all=False) == {"allreduce"}  # issue 39: evidence only
    never = evaluate_composition("allreduce", "beta", (2, 2, 1), composition_runs("beta", [(None, 10.0), (None, 9.0)]))
    assert never.verdict == "failed" and never.pairs == 0
    assert compositions_to_drop([never], applies_to_all=False) == {"allreduce"}


def test_verified_compositions_round_trip_through_the_manifest_record() -> None:
    verified = evaluate_composition("allreduce", "beta", (2, 2, 1), composition_runs("beta", [(8.0, 10.0), (8.1, 9.9)]))
    record = VerifyRecord("2026-11-24T00:00:00Z", 2, 0, 0.1, 1.0, {}, (), (replace(verified, dropped=True),))
    again = VerifyRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    (back,) = again.compositions
    assert replace(back, speedup=0, ci_low=0, ci_high=0) == replace(record.compositions[0], speedup=0, ci_low=0,
                                                                     ci_high=0)
    assert back.speedup == pytest.approx(verified.speedup, abs=1e-5)  # kept to 5 decimals
    assert VerifyRecord.from_dict({"cells": []}).compositions == ()  # verified before compositions were


def test_verify_says_which_rule_a_replaced_cell_belongs_to_and_why() -> None:
    from tunempi.tune.verify import VerifiedCell
    from tunempi.tune.verify_run import VerifyReport

    big = Cell("allreduce", 2, 1, 2, 131072)
    rule = {"rule_cells": 3, "launches": 3, "rule_from": A.msg_bytes}
    verified = [VerifiedCell(A, "ring", 8.0, 10.0, 1.2, 1.1, 1.3, "faster", own_speedup=1.25, own_verdict="faster",
                             **rule),
                VerifiedCell(B, "ring", 8.0, 10.0, 1.2, 1.1, 1.3, "faster", own_speedup=1.3, own_verdict="faster",
                             **rule),
                VerifiedCell(big, "ring", 20.0, 10.0, 1.2, 1.1, 1.3, "faster", replaced=True, own_speedup=0.5,
                             own_verdict="slower", **rule)]
    report = VerifyReport(None, verified, summary(verified), replaced=1)  # type: ignore[arg-type]
    first, last = report.lines()[0], report.lines()[-1]
    assert first.startswith("replaced allreduce 128KiB at 2 ranks: ring was slower on its own (speedup 0.500) in a rule faster")
    assert "its rule of 3 sizes, 3 launches" in first and first.endswith("-> default")
    assert "tune had" not in first
    # with the manifest's row, the line says what tune's deciding launches had said there
    row = SelectionRow(big, "ring", 20.0, 10.0, decided=(1.081, 1.04, 1.123, 2))
    said = VerifyReport(SimpleNamespace(selection=(row,)), verified, summary(verified),  # type: ignore[arg-type]
                        replaced=1).lines()[0]
    assert ("3 launches; tune had 1.081 (1.040..1.123) over 2 launches for its range (none of this cell's own)) "
            "-> default") in said
    assert "verified 3 cells in 1 rules" in last and "slower beyond noise: 1 -> 0" in last


def test_a_replacement_line_quotes_tune_s_figures_of_the_cell_itself_not_of_its_range() -> None:
    """Issue 58: tune decides per range, and each cell keeps its own figures. A replaced cell's line quotes what
    tune had there: the cell's own (1.081x), not its range's (1.47x, another cell's gain); the manifest keeps
    both through a rewrite and a save."""
    from tunempi.tune.verify import VerifiedCell
    from tunempi.tune.verify_run import VerifyReport

    verified = [VerifiedCell(B, "ring", 20.0, 10.0, 0.5, 0.4, 0.6, "slower", replaced=True, own_speedup=0.5,
                             own_verdict="slower", rule_cells=1, launches=3, rule_from=B.msg_bytes)]
    row = SelectionRow(B, "ring", 20.0, 10.0, decided=(1.47, 1.11, 1.93, 3), own=(1.081, 1.04, 1.123, 3))
    assert SelectionRow.from_dict(row.to_dict()) == row
    said = VerifyReport(SimpleNamespace(selection=(row,)), verified, summary(verified),  # type: ignore[arg-type]
                        replaced=1).lines()[0]
    assert "tune had 1.081 (1.040..1.123) over 3 launches at this size) -> default" in said
    assert "1.470" not in said


def test_a_cell_sent_back_with_its_whole_collective_says_so() -> None:
    """Intel MPI reads one selection per collective: a rule faster with evidence goes back because another rule
    of its collective was slower, and the line must say that rather than look like "faster -> default"."""
    from tunempi.tune.verify import VerifiedCell
    from tunempi.tune.verify_run import VerifyReport

    steady = VerifiedCell(A, "ring", 8.0, 10.0, 1.25, 1.2, 1.3, "faster", own_speedup=1.25, own_verdict="faster",
                          launches=3)
    slower = VerifiedCell(B, "ring", 20.0, 10.0, 0.5, 0.45, 0.55, "slower", own_speedup=0.5, own_verdict="slower",
                          launches=3)
    _, judged = apply_replacements({A: "ring", B: "ring"}, [steady, slower], whole=True)
    report = VerifyReport(None, judged, summary(judged), replaced=2)  # type: ignore[arg-type]
    by_size = dict(zip((A.msg_bytes, B.msg_bytes), report.lines()[:2], strict=True))
    assert by_size[A.msg_bytes].endswith("-> default with the whole collective (the library reads one selection per "
                                         "collective, and another rule of it was not faster with evidence)")
    assert "ring was faster (speedup 1.250" in by_size[A.msg_bytes]
    assert by_size[B.msg_bytes].endswith("3 launches) -> default") and "ring was slower" in by_size[B.msg_bytes]


# --- held out: a cell the held-out launches call slower beyond noise does not ship (issue 58) ---------------

def scripted_rounds(*rounds: list) -> tuple[list[int], object]:
    """A held-out measure that returns the scripted figures of each round in turn, and the rounds it ran."""
    ran: list[int] = []

    def measure(number: int) -> list:
        ran.append(number)
        return rounds[number - 1]
    return ran, measure


def test_a_held_out_cell_slower_beyond_noise_goes_back_and_the_figures_are_a_fresh_round_of_the_files_shipped() -> None:
    """miniAMR: the held-out line read "10 slower beyond noise" and those rules stayed in the files. A held-out
    cell slower beyond noise (its rule's verdict or its own) sends its rule back, the files are rewritten, and the
    figures reported are those of new launches under the rewritten files, which chose nothing."""
    from tunempi.tune.verify import HeldOutSendBack, VerifiedCell
    from tunempi.tune.verify_run import hold_out_rounds

    slow = VerifiedCell(A, "pairwise", 11.6, 10.0, 0.863, 0.80, 0.93, "slower", launches=3)
    own_slow = VerifiedCell(C, "ring", 9.0, 10.0, 1.2, 1.1, 1.3, "faster", own_speedup=0.7, own_verdict="slower")
    kept = VerifiedCell(B, "rd", 8.0, 10.0, 1.25, 1.1, 1.4, "faster", launches=3)
    within = VerifiedCell(D, "ring", 10.5, 10.0, 0.95, 0.8, 1.1, "same", launches=3)  # not beyond noise: stays
    again = [replace(kept, speedup=1.18, ci_low=1.05, ci_high=1.3),
             replace(within, speedup=1.01, ci_low=0.9, ci_high=1.1)]
    ran, measure = scripted_rounds([slow, kept, own_slow, within], again)
    written: list[dict] = []

    def rewrite(fixed: dict) -> dict:
        written.append(dict(fixed))
        return fixed

    selection = {A: "pairwise", B: "rd", C: "ring", D: "ring"}
    found = hold_out_rounds(selection, measure, rewrite)
    assert written == [{A: DEFAULT_ALGORITHM, B: "rd", C: DEFAULT_ALGORITHM, D: "ring"}]
    assert ran == [1, 2] and found.rounds == 2 and found.excluded == 0
    assert found.figures == again  # the shipped files' own round, not the one that chose the send-back
    assert summary(found.figures)["slower_beyond_noise_before"] == 0
    assert [(s.cell.cell, s.cell.replaced, s.round, s.sent_back) for s in found.sent_back] == \
        [(A, True, 1, True), (C, True, 1, True)]
    assert found.selection == written[0]
    back = HeldOutSendBack.from_dict(json.loads(json.dumps(found.sent_back[0].to_dict())))
    assert back == replace(found.sent_back[0], cell=back.cell) and back.cell.verdict == "slower"


def test_held_out_rounds_are_bounded_and_the_last_round_s_figures_say_what_they_leave_out() -> None:
    from tunempi.tune.verify import VerifiedCell
    from tunempi.tune.verify_run import HOLD_OUT_ROUNDS, VerifyReport, hold_out_rounds

    assert HOLD_OUT_ROUNDS == 2
    first = [VerifiedCell(A, "ring", 12.0, 10.0, 0.83, 0.75, 0.9, "slower", launches=3),
             VerifiedCell(B, "rd", 8.0, 10.0, 1.25, 1.1, 1.4, "faster", launches=3)]
    second = [VerifiedCell(B, "rd", 11.0, 10.0, 0.9, 0.85, 0.95, "slower", launches=3)]
    ran, measure = scripted_rounds(first, second, [])
    found = hold_out_rounds({A: "ring", B: "rd"}, measure, lambda fixed: fixed)
    assert ran == [1, 2] and found.rounds == 2  # no third round
    assert found.selection == {A: DEFAULT_ALGORITHM, B: DEFAULT_ALGORITHM}  # nothing slower ships
    assert found.figures == [] and found.excluded == 1
    report = VerifyReport(None, [], summary([]), replaced=0, held_out=found.figures,  # type: ignore[arg-type]
                          sent_back=found.sent_back, held_out_rounds=found.rounds)
    lines = report.lines()
    assert lines[0].endswith("; files unchanged by these launches")  # not "unchanged": hold-out rewrote them
    assert any(line.startswith("sent back at hold-out (round 1): allreduce 1KiB at 2 ranks: ring was slower "
                               "(speedup 0.830, 95% CI 0.750..0.900, 3 launches) -> default") for line in lines)
    assert any("round 2" in line and "allreduce 64KiB" in line for line in lines)
    assert any("no tuned cell is left" in line and "1 cell sent back on those same launches" in line
               for line in lines)


def test_where_verify_cannot_send_a_held_out_cell_back_it_says_why_and_the_figures_keep_it() -> None:
    from tunempi.errors import TuningFileError
    from tunempi.tune.verify import VerifiedCell
    from tunempi.tune.verify_run import VerifyReport, hold_out_rounds

    first = [VerifiedCell(A, "ring", 12.0, 10.0, 0.83, 0.75, 0.9, "slower", launches=3),
             VerifiedCell(B, "rd", 8.0, 10.0, 1.25, 1.1, 1.4, "faster", launches=3)]
    ran, measure = scripted_rounds(first)

    def refused(fixed: dict) -> dict:
        raise TuningFileError("mpich rejected the tuning files at 2 ranks: exit 1")

    found = hold_out_rounds({A: "ring", B: "rd"}, measure, refused)
    assert ran == [1] and found.selection == {A: "ring", B: "rd"}  # the files in place are the ones measured
    assert found.figures == first and summary(found.figures)["slower_beyond_noise_before"] == 1
    (kept,) = found.sent_back
    assert not kept.sent_back and "rejected the tuning files" in kept.why_not and not kept.cell.replaced
    line = next(line for line in VerifyReport(None, [], summary([]), replaced=0,  # type: ignore[arg-type]
                                              held_out=found.figures, sent_back=found.sent_back).lines()
                if line.startswith("kept"))
    assert line.startswith("kept though slower at hold-out (round 1): allreduce 1KiB at 2 ranks: ring was slower")
    assert line.endswith("verify could not send it back: mpich rejected the tuning files at 2 ranks: exit 1")
    # a rewrite whose files still select it (a mechanism that cannot hold the default there) is said too
    found = hold_out_rounds({A: "ring", B: "rd"}, scripted_rounds(first, first)[1], lambda fixed: {A: "ring", B: "rd"})
    assert found.rounds == 1 and [s.sent_back for s in found.sent_back] == [False]
    assert "the rewritten files still select it" in found.sent_back[0].why_not


def test_where_files_select_a_collective_whole_a_slower_held_out_cell_takes_its_collective_back() -> None:
    from tunempi.tune.verify import VerifiedCell
    from tunempi.tune.verify_run import VerifyReport, hold_out_rounds

    other = Cell("bcast", 2, 1, 2, 8)
    first = [VerifiedCell(A, "ring", 12.0, 10.0, 0.83, 0.75, 0.9, "slower", launches=3),
             VerifiedCell(B, "rd", 8.0, 10.0, 1.25, 1.1, 1.4, "faster", launches=3),
             VerifiedCell(other, "p1", 8.0, 10.0, 1.25, 1.1, 1.4, "faster", launches=3)]
    found = hold_out_rounds({A: "ring", B: "rd", other: "p1"}, scripted_rounds(first, first[2:])[1],
                            lambda fixed: fixed, whole=True)
    assert found.selection == {A: DEFAULT_ALGORITHM, B: DEFAULT_ALGORITHM, other: "p1"}
    assert [s.cell.cell for s in found.sent_back] == [A, B] and found.figures == first[2:]
    lines = VerifyReport(None, [], summary([]), replaced=0, held_out=found.figures,  # type: ignore[arg-type]
                         sent_back=found.sent_back, held_out_rounds=2).lines()
    assert any("allreduce 64KiB" in line and line.endswith("-> default with a slower rule the files cannot select "
                                                          "apart from it") for line in lines)


def test_the_held_out_send_backs_round_trip_through_the_manifest_record() -> None:
    from tunempi.tune.verify import HeldOutSendBack, VerifiedCell

    cell = VerifiedCell(A, "ring", 12.0, 10.0, 0.83, 0.75, 0.9, "slower", replaced=True, launches=3)
    record = VerifyRecord("2026-12-05T00:00:00Z", 3, 0, 0.1, 1.0, {}, held_out_rounds=2,
                          sent_back=(HeldOutSendBack(cell, 1), HeldOutSendBack(cell, 2, "why")))
    again = VerifyRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again.held_out_rounds == 2 and [(s.round, s.why_not) for s in again.sent_back] == [(1, ""), (2, "why")]
    assert VerifyRecord.from_dict({"held_out": [cell.to_dict()]}).held_out_rounds == 1  # verified before issue 58
    assert VerifyRecord.from_dict({}).sent_back == ()


def test_a_held_out_cell_whose_run_under_the_files_failed_goes_back_like_a_slower_one() -> None:
    """A crash or a wrong result under the written files at hold-out ships no more than a slowdown does."""
    from tunempi.tune.verify import VerifiedCell
    from tunempi.tune.verify_run import VerifyReport, hold_out_rounds

    failed = VerifiedCell(A, "ring", math.nan, 10.0, math.nan, math.nan, math.nan, "failed")
    kept = VerifiedCell(B, "rd", 8.0, 10.0, 1.25, 1.1, 1.4, "faster", launches=3)
    ran, measure = scripted_rounds([failed, kept], [kept])
    found = hold_out_rounds({A: "ring", B: "rd"}, measure, lambda fixed: fixed)
    assert ran == [1, 2] and found.selection == {A: DEFAULT_ALGORITHM, B: "rd"}
    assert [(s.cell.cell, s.sent_back) for s in found.sent_back] == [(A, True)]
    lines = VerifyReport(None, [], summary([]), replaced=0, held_out=found.figures,  # type: ignore[arg-type]
                         sent_back=found.sent_back, held_out_rounds=found.rounds).lines()
    assert "sent back at hold-out (round 1): allreduce 1KiB at 2 ranks: ring's run under the files failed " \
           "-> default" in lines


def test_verify_begins_no_launch_pair_past_its_deadline_and_keeps_what_it_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 58 (autotune's steps overran their shares): verify's launches stop between pairs at its deadline.
    Two layouts x 3 repetitions are 6 launch pairs; each takes 10 s on an injected clock and the deadline is
    at 45 s: the pairs at 0, 10, 20 and 30 s end by it, the next (40 s + 10) would not and does not begin.
    What was measured is returned, and nothing begins after (no launch is timed here: the clock is the test's)."""
    import tunempi.tune.verify_run as verify_run

    now = [0.0]
    calls: list[tuple[int, int]] = []

    def measure_sides(library: Any, adapter: Any, layout: Layout, sides: Any, run: int, *args: Any,
                      **kwargs: Any) -> list:
        now[0] += 10.0
        calls.append((run, layout.ranks))
        return [(run, layout.ranks)]

    monkeypatch.setattr(verify_run, "measure_sides", measure_sides)
    selection = {A: "ring", C: "ring", B: DEFAULT_ALGORITHM}  # A at 2 ranks, C at 4
    deadline = verify_run.VerifyDeadline(45.0, clock=lambda: now[0])
    deadline.plan(6)

    def measure(runs: range) -> list:
        return verify_run.measure_under_files(SimpleNamespace(), SimpleNamespace(), {}, selection, runs,
                                              SimpleNamespace(), deadline=deadline)  # type: ignore[arg-type]

    assert measure(range(3)) == [(0, 2), (0, 4), (1, 2), (1, 4)] == calls
    assert deadline.stopped and (deadline.launches, deadline.planned) == (8, 12) and now[0] == 40.0
    assert deadline.short_layouts(selection) == set()  # two pairs of each layout: both judged as ever
    assert measure(range(3, 6)) == [] and len(calls) == 4  # stopped: no later phase begins a launch
    # a layout with one pair has no verdict: its cells stay as tune decided them
    one = verify_run.VerifyDeadline(15.0, clock=lambda: now[0])
    now[0] = 0.0
    verify_run.measure_under_files(SimpleNamespace(), SimpleNamespace(), {}, selection, range(3),  # type: ignore[arg-type]
                                   SimpleNamespace(), deadline=one)  # type: ignore[arg-type]
    assert one.begun == [(0, layout_of(A))] and one.short_layouts(selection) == {layout_of(A), layout_of(C)}
    # no deadline: every pair
    calls.clear()
    verify_run.measure_under_files(SimpleNamespace(), SimpleNamespace(), {}, selection, range(3),  # type: ignore[arg-type]
                                   SimpleNamespace(), deadline=verify_run.VerifyDeadline(None))  # type: ignore[arg-type]
    assert len(calls) == 6


def test_where_verify_stopped_at_its_deadline_its_lines_and_manifest_say_so() -> None:
    """Issue 58: verify stopped by its deadline says how many launches of how many planned it measured, and what
    it kept unjudged; the manifest's verify section records it. A held-out round its deadline did not let begin
    ends the rounds: the figures of the round before stand, of the cells the files still select."""
    from tunempi.tune.verify import DeadlineStop, HeldOutSendBack, VerifiedCell
    from tunempi.tune.verify_run import VerifyReport, hold_out_rounds

    stop = DeadlineStop(launches=8, planned=24, unverified=3, not_held_out=5)
    verified = [VerifiedCell(A, "ring", 8.0, 10.0, 1.2, 1.1, 1.3, "faster", own_speedup=1.2, own_verdict="faster",
                             launches=2)]
    lines = VerifyReport(None, verified, summary(verified), replaced=0, stopped=stop).lines()  # type: ignore[arg-type]
    assert ("stopped at its deadline after 8 of 24 planned launches; what it measured is judged and kept; 3 tuned "
            "cells kept as tune decided, unverified (fewer than 2 launch pairs of their layout measured); 5 tuned "
            "cells not held out") in lines
    record = VerifyRecord("t", 3, 0, 0.1, 1.0, summary(verified), stopped=stop)
    assert VerifyRecord.from_dict(json.loads(json.dumps(record.to_dict()))).stopped == stop
    assert VerifyRecord.from_dict(replace(record, stopped=None).to_dict()).stopped is None
    slow = VerifiedCell(A, "ring", 12.0, 10.0, 0.8, 0.7, 0.9, "slower", launches=2)
    fine = VerifiedCell(B, "ring", 8.0, 10.0, 1.2, 1.1, 1.3, "faster", launches=2)
    found = hold_out_rounds({A: "ring", B: "ring"}, lambda number: [slow, fine] if number == 1 else None,
                            lambda fixed: fixed)
    assert found.rounds == 1 and [v.cell for v in found.figures] == [B]
    assert [(s.cell.cell, s.sent_back) for s in found.sent_back] == [(A, True)]
    assert isinstance(found.sent_back[0], HeldOutSendBack)
