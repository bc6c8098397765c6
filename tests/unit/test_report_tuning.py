"""The tuning report from a manifest alone: speedups pick the best evidence, plots and HTML are written."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rich.console import Console

from tunempi.report.tuning import (
    rules_table,
    speedup_rows,
    speedup_table,
    summary_lines,
    write_html,
    write_plots,
)
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.space import Cell
from tunempi.tune.manifest import KIND, Manifest, SelectionRow


@pytest.fixture()
def manifest(tmp_path: Path) -> Manifest:
    cells = [Cell("allreduce", 2, 1, 2, s) for s in (8, 1024, 65536)] + [Cell("bcast", 4, 1, 4, 8)]
    rows = [SelectionRow(cells[0], "default", 3.0, 3.0), SelectionRow(cells[1], "ring", 5.0, 6.0),
            SelectionRow(cells[2], "rd", 50.0, 40.0), SelectionRow(cells[3], "binomial", 2.0, 3.0)]
    selection = [r.to_dict() for r in rows]
    selection[2] = {**selection[2], "algorithm": "default", "replaced_from": "rd"}
    table = SelectionTable.from_items((r["collective"], r["ranks"], r["msg_bytes"], r["algorithm"]) for r in selection)
    verify_cells = [
        {**cells[1].to_dict(), "algorithm": "ring", "speedup": 1.25, "ci_low": 1.1, "ci_high": 1.4,
         "verdict": "faster", "replaced": False},
        {**cells[2].to_dict(), "algorithm": "rd", "speedup": 0.8, "ci_low": 0.75, "ci_high": 0.85,
         "verdict": "slower", "replaced": True},
    ]
    return Manifest.from_dict(tmp_path, {
        "kind": KIND, "version": 1, "library": {"name": "openmpi-5.0.11", "fingerprint": "f", "prefix": "/x"},
        "collectives": ["allreduce", "bcast"], "scales": [[2, 1, 2], [4, 1, 4]], "strategy": "tunempi",
        "run": {"stop_reason": "converged", "wall_s": 10.0, "bench_s": 5.0, "measured": 40, "resumed": 0},
        "files": {"openmpi-rules": "openmpi.rules"}, "env_file": "tuning.env",
        "smoke": [{"ranks": 2, "ok": True}], "selection": selection,
        "rule_sets": {c: rs.to_dict() for c, rs in build_rule_sets(table).items()},
        "training_curve": [{"wall_s": 0, "bench_s": 0, "points": 0, "convergence": 0, "per_collective": {}},
                           {"wall_s": 5, "bench_s": 4, "points": 40, "convergence": 1.0,
                            "per_collective": {"allreduce": 1.0, "bcast": 1.0}}],
        "verify": {"summary": {"compared": 2, "cells": 4, "geo_mean_speedup_compared_after": 1.118,
                               "geo_mean_speedup_all_cells": 1.06, "faster_beyond_noise": 1,
                               "slower_beyond_noise_before": 1, "slower_beyond_noise_after": 0, "replaced": 1},
                   "cells": verify_cells,
                   "compositions": [{"collective": "bcast", "composition": "han", "layout": [4, 2, 2], "pairs": 6,
                                     "speedup": 0.9, "ci_low": 0.8, "ci_high": 1.01, "verdict": "same",
                                     "dropped": True}]},
    })


def test_speedups_come_from_verify_then_tuning_then_default(manifest: Manifest) -> None:
    rows = {(r.collective, r.msg_bytes): r for r in speedup_rows(manifest)}
    assert rows[("allreduce", 8)].speedup == 1.0 and rows[("allreduce", 8)].source == "default"
    assert rows[("allreduce", 1024)].speedup == 1.25 and rows[("allreduce", 1024)].source == "verify"
    assert rows[("allreduce", 65536)].replaced_from == "rd" and rows[("allreduce", 65536)].speedup == 1.0
    assert rows[("bcast", 8)].speedup == pytest.approx(1.5) and rows[("bcast", 8)].source == "tune"


def test_held_out_figures_are_the_ones_reported_where_verify_measured_them(manifest: Manifest) -> None:
    """Issue 39: the figures printed come from launches that did not choose the rules (the winner's curse)."""
    from tunempi.tune.manifest import VerifyRecord
    from tunempi.tune.verify import VerifiedCell, summary

    assert manifest.verify is not None
    ring = Cell("allreduce", 2, 1, 2, 1024)
    held = (VerifiedCell(ring, "ring", 5.5, 6.0, 1.08, 1.01, 1.16, "faster"),)
    record = dataclasses.replace(manifest.verify, held_out=held, held_out_summary=summary(held))
    again = dataclasses.replace(manifest, verify=VerifyRecord.from_dict(record.to_dict()))
    rows = {(r.collective, r.msg_bytes): r for r in speedup_rows(again)}
    assert rows[("allreduce", 1024)].speedup == pytest.approx(1.08) and rows[("allreduce", 1024)].source == "held-out"
    assert rows[("allreduce", 1024)].ci_low == pytest.approx(1.01)
    assert any(line.startswith("verify: held out") and "1.080x" in line for line in summary_lines(again))



def test_the_cells_hold_out_sent_back_are_shown_with_the_figures_of_the_files_shipped(manifest: Manifest) -> None:
    """Issue 58: `report` says which cells the held-out launches sent back, and of which round its figures are."""
    from tunempi.tune.manifest import VerifyRecord
    from tunempi.tune.verify import HeldOutSendBack, VerifiedCell, summary

    assert manifest.verify is not None
    ring, binomial = Cell("allreduce", 2, 1, 2, 1024), Cell("bcast", 4, 1, 4, 8)
    slower = VerifiedCell(binomial, "binomial", 2.6, 3.0, 0.863, 0.8, 0.93, "slower", replaced=True, launches=3)
    held = (VerifiedCell(ring, "ring", 5.5, 6.0, 1.08, 1.01, 1.16, "faster"),)
    record = dataclasses.replace(manifest.verify, held_out=held, held_out_summary=summary(held), held_out_rounds=2,
                                 sent_back=(HeldOutSendBack(slower, 1),))
    lines = summary_lines(dataclasses.replace(manifest, verify=VerifyRecord.from_dict(record.to_dict())))
    assert "verify: sent back at hold-out (round 1): bcast 8B at 4 ranks: binomial was slower (speedup 0.863, 95% CI " \
           "0.800..0.930, 3 launches) -> default" in lines
    assert any(line.startswith("verify: held out (round 2: new launches under the files rewritten") for line in lines)


def test_report_says_where_verify_stopped_at_its_deadline(manifest: Manifest) -> None:
    """Issue 58: a verify its deadline stopped (autotune's share) says so in `report` too, as verify said it."""
    from tunempi.tune.verify import DeadlineStop

    assert manifest.verify is not None
    stop = DeadlineStop(launches=4, planned=12, not_held_out=3)
    lines = summary_lines(dataclasses.replace(manifest, verify=dataclasses.replace(manifest.verify, stopped=stop)))
    assert "verify: " + stop.line() in lines
    assert not any("stopped at its deadline" in line for line in summary_lines(manifest))


def test_tables_summary_plots_and_html(manifest: Manifest, tmp_path: Path) -> None:
    console = Console(width=150, record=True)
    console.print(rules_table(manifest))
    console.print(speedup_table(manifest))
    text = console.export_text()
    assert "ring" in text and "binomial" in text and "1.118" not in text
    lines = summary_lines(manifest)
    assert any("slower beyond noise 1 -> 0" in line for line in lines)
    assert "verify: composition han of bcast not told apart from the default side by side (speedup 0.900, 95% CI " \
           "0.800..1.010, 6 pairs): dropped" in lines
    plots = write_plots(manifest, tmp_path / "plots")
    for path in plots.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = write_html(manifest, plots, tmp_path / "r.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "replaced rd" in page


def test_an_assumption_the_user_vouched_for_is_said_where_the_files_are_shown(manifest: Manifest) -> None:
    assert not any("assumes" in line for line in summary_lines(manifest))
    vouched = dataclasses.replace(manifest, assumes=("contiguous", "true-lb-zero"))
    said = [line for line in summary_lines(vouched) if "assumes" in line]
    assert len(said) == 1 and "contiguous datatypes" in said[0] and "true lower bound 0" in said[0]
    assert "--assume-contiguous-datatypes" in said[0] and "--assume-same-counts" not in said[0]
    counts = dataclasses.replace(manifest, assumes=("same-counts",))
    said = [line for line in summary_lines(counts) if "assumes" in line]
    assert "same count" in said[0] and "--assume-same-counts" in said[0] and "contiguous" not in said[0]


EXCLUDED = {"allreduce": {"tree": "tree_type", "ring": "true lower bound 0", "ccl": "CCL"},
            "bcast": {"scatter_allgather": "contiguous"}, "alltoall": {"brucks": "why"}}


def test_what_no_file_can_select_is_one_counted_line_the_report_lists_in_full(manifest: Manifest) -> None:
    """`make demo` printed one line per collective and library (28 of 222 lines, issue 58): the summary says the
    count in one line, and `report` lists each algorithm with its reason."""
    lines = summary_lines(dataclasses.replace(manifest, excluded=EXCLUDED))
    said = [line for line in lines if "no tuning file can select" in line]
    assert said == [f"no tuning file can select 5 algorithms of 3 collectives (allreduce 3, alltoall 1, bcast 1; "
                    f"`tunempi report --tuning {manifest.directory}` lists them with the reasons)"]
    assert not any("no tuning file can select" in line for line in summary_lines(manifest))


def test_tune_progress_says_in_one_line_what_no_file_can_select(tmp_path: Path) -> None:
    from tunempi.mpi.library import MPILibrary
    from tunempi.report.console import TuneProgress
    from tunempi.tune.job import TuneStarted
    from tunempi.tune.scope import Scale

    library = MPILibrary(vendor="mpich", version="4.3", version_string="fake", device="", prefix=Path("/x"),
                         mpicc=Path("/x/mpicc"), mpiexec=Path("/x/mpiexec"))
    console = Console(record=True, width=300)
    progress = TuneProgress(console)
    progress.started(TuneStarted(library, ("allreduce",), (Scale(1, 2),), (8, 64), 2, 10, "tunempi", "flat",
                                 tmp_path / "db", 0, EXCLUDED))
    progress.close()
    text = console.export_text()
    assert text.count("no tuning file can select") == 1
    assert "no tuning file can select 5 algorithms of 3 collectives (allreduce 3, alltoall 1, bcast 1" in text


def test_tune_says_why_its_runs_failed_and_where_every_reason_is(tmp_path: Path) -> None:
    from tunempi.report.console import TuneProgress
    from tunempi.tune.driver import TuneOutcome
    from tunempi.tune.job import FAILURES_LOG, TuningStopped, write_failures_log

    reasons = ("allreduce ring 8 B at 4 ranks: failed: exit status 1: MPIR_Allreduce ... invalid count",
               "allreduce ring 16 B at 4 ranks: failed: exit status 1: MPIR_Allreduce ... invalid count")
    outcome = TuneOutcome({}, {}, [], "converged", 1.0, 1.0, measured=12, resumed=0, failed=3, launches=10,
                          failures=reasons)
    log = write_failures_log(tmp_path / "tuned", outcome)
    assert log == tmp_path / "tuned" / FAILURES_LOG
    assert log.read_text().splitlines() == [*reasons, "... and 1 more"]
    assert write_failures_log(tmp_path / "other", dataclasses.replace(outcome, failed=0, failures=())) is None
    console = Console(record=True, width=400)
    TuneProgress(console).stopped(TuningStopped(outcome, log))
    text = console.export_text()
    assert "10 engine launches, 3 runs failed" in text
    assert f"first failed run: {reasons[0]}; every failed run's reason in {log}" in text


def test_tune_counts_the_cells_its_files_select_not_its_decisions(manifest: Manifest) -> None:
    """IS.B: "3 cells tuned" while every file selected the default (issue 58): the count is the files'."""
    from tunempi.report.console import TuneProgress
    from tunempi.tune.job import FilesWritten

    assert manifest.tuned_cells() == 2  # ring and binomial
    defaults = tuple(dataclasses.replace(row, algorithm="default") for row in manifest.selection)
    plain = dataclasses.replace(manifest, selection=defaults,
                                run=dataclasses.replace(manifest.run, decisions={"tuned": 3, "tie": 1}))
    assert plain.tuned_cells() == 0
    console = Console(record=True, width=400)
    TuneProgress(console).written(FilesWritten(plain, plain.directory / "manifest.json"))
    text = console.export_text()
    assert "the files select the library's default in all 4 cells" in text
    assert "tune decided 3 cells for another algorithm across launches; the files hold none of them" in text
    console = Console(record=True, width=400)
    TuneProgress(console).written(FilesWritten(manifest, manifest.directory / "manifest.json"))
    assert "the files select another algorithm than the library's default in 2 of 4 cells" in console.export_text()


def test_each_rule_shows_its_range_and_how_it_got_it(manifest: Manifest, tmp_path: Path) -> None:
    """Issue 57: allreduce was measured at 2 ranks, bcast at 4: every other size is the library's own."""
    console = Console(width=200, record=True)
    console.print(rules_table(manifest))
    rows = [" ".join(line.replace("│", " ").split()) for line in console.export_text().splitlines()]
    assert "allreduce 1..1 library's own (not measured) 1 >= 0B default" in rows
    assert any(row.startswith("2..2 measured 2 ") for row in rows)
    assert any(row.startswith("3+ library's own (not measured) 3+") for row in rows)
    assert any(row.startswith("bcast 1..3 library's own (not measured) 1..3") for row in rows)
    page = write_html(manifest, {}, tmp_path / "r.html").read_text()
    assert "<td>measured 4</td>" in page and "<th>evidence</th>" in page


def test_a_size_keyed_on_processes_per_node_shows_each_layouts_rules(manifest: Manifest, tmp_path: Path) -> None:
    """Issue 57: MPICH's files give 1x2 and 2x1 their own rules, every other ppn the library's own; the report shows
    the three rows (before, one row of the block's fallback: 'default', as if nothing were tuned at 2 ranks)."""
    from tunempi.rules import ScaledChoice

    choices = [ScaledChoice("allreduce", nodes, ppn, size, algorithm) for nodes, ppn, algorithm in
               ((1, 2, "recursive_doubling"), (2, 1, "ring")) for size in (8, 65536)]
    keyed = dataclasses.replace(manifest, rule_sets=build_rule_sets(SelectionTable.from_scaled(choices, by_ppn=True)))
    console = Console(width=200, record=True)
    console.print(rules_table(keyed))
    rows = [" ".join(line.replace("│", " ").split()) for line in console.export_text().splitlines()]
    assert "2..2 at 1 per node measured 2 >= 0B ring" in rows
    assert "2..2 at 2 per node measured 2 >= 0B recursive_doubling" in rows
    assert "2..2 at other ppn library's own >= 0B default" in rows
    page = write_html(keyed, {}, tmp_path / "r.html").read_text()
    assert "<td>2..2 at 1 per node</td><td>measured 2</td>" in page and "2..2 at other ppn" in page
