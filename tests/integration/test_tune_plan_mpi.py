"""tune --plan and the plan a real tune records (issue 57 part 4): embedded MPICH, 2 ranks, one collective."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunempi.bench.protocol import MeasureSettings
from tunempi.store.fits import recorded_fits
from tunempi.store.launches import launch_seconds
from tunempi.store.results import ResultStore
from tunempi.tune import plan as plan_module
from tunempi.tune.job import TuneOptions, TunePlan, plan_tune, run_tune, store_costs
from tunempi.tune.manifest import Manifest

pytestmark = pytest.mark.mpi

FAST = MeasureSettings(warmup=2, min_iters=5, max_iters=50, rel_ci=0.2, time_cap_s=0.01)


def test_a_real_tune_records_what_it_planned_and_what_it_took(tmp_path: Path) -> None:
    options = TuneOptions(out=tmp_path / "tuning", collectives="allreduce", mpi="mpich", ranks=2, max_msg=64,
                          min_msg=4, timeout_s=60.0, db=tmp_path / "results.sqlite", settings=FAST, launches=2)
    planned = plan_tune(options)  # no store yet: nothing launched, nothing created
    assert not options.db.exists() and not options.out.exists()  # type: ignore[union-attr]
    report = run_tune(options)
    assert report.manifest is not None
    record = Manifest.load(options.out).plan
    assert record is not None and record.actual is not None
    # the tune planned what --plan printed before it (same store: empty), and its actual is its own run record
    assert record.predicted.wall_s == pytest.approx(planned.predicted.wall_s, abs=1e-3)  # the manifest rounds
    assert (record.predicted.launches, record.predicted.runs) == (planned.predicted.launches, planned.predicted.runs)
    assert record.predicted.runs > 0
    assert record.actual.launches == report.outcome.launches == report.manifest.run.launches
    assert record.actual.runs == report.outcome.measured
    assert record.actual.wall_s >= report.outcome.wall_s > 0  # the whole tune, its loop included
    # with the store this tune filled, the plan's costs are its runs, each timed from request to reply, and
    # numbered by the launch block that measured it: the exploring launch (1), then the deciding one (2)
    assert "runs of mpich" in plan_tune(options).costs_from
    with ResultStore(options.db) as store:  # type: ignore[arg-type]
        stored = store.query()
    assert len(stored) == report.outcome.measured
    assert all(m.run_s is not None and 0 < m.run_s < record.actual.wall_s for m in stored if m.ok)
    assert {m.launch_block for m in stored} == {1, 2}
    assert sum(m.run_s or 0.0 for m in stored) <= report.outcome.bench_s  # bench time adds the engine starts
    # and every launch it closed, timed (an engine that died or was killed is not): the plan's price of a launch
    with ResultStore(options.db) as store:  # type: ignore[arg-type]
        launches = store.fetch_all("SELECT ranks, nodes, ppn, start_s, close_s FROM engine_launches")
        per_layout = launch_seconds(store, TunePlan.of(options).library.fingerprint)
        assert store_costs(store, TunePlan.of(options)).start_s((2, 1, 2)) == per_layout[(2, 1, 2)]
    assert 0 < len(launches) <= report.outcome.launches
    assert {(row["ranks"], row["nodes"], row["ppn"]) for row in launches} == {(2, 1, 2)}
    assert all(row["start_s"] > 0 and row["close_s"] >= 0 for row in launches)
    assert 0 < per_layout[(2, 1, 2)] < record.actual.wall_s
    # and every ask of its strategy, timed (the guard may end it after the initial design's)
    with ResultStore(options.db) as store:  # type: ignore[arg-type]
        fits = recorded_fits(store, "tunempi")
    assert len(fits) >= 1 and fits[0].records == 0
    assert {fit.points for fit in fits} == {int(TunePlan.of(options).spaces["allreduce"].availability().sum())}


def test_the_plan_replays_the_fits_a_real_tune_recorded_and_is_the_same_at_any_moment(tmp_path: Path) -> None:
    """The plan replays tune's loop with the model fits the tune recorded (store/fits.py), not with its own
    fits timed now: the same store gives the same plan (timed, two plans differ in the microseconds at least).
    Without tune's guard the strategy fits its model in every round until it stops."""
    options = TuneOptions(out=tmp_path / "tuning", collectives="allreduce", mpi="mpich", ranks=2, max_msg=64,
                          min_msg=4, timeout_s=60.0, db=tmp_path / "results.sqlite", settings=FAST, launches=1,
                          exhaustive_guard=False)
    report = run_tune(options)
    assert report.outcome.stop_reason == "converged"
    with ResultStore(options.db) as store:  # type: ignore[arg-type]
        fits = recorded_fits(store, "tunempi")
    assert fits[0].records == 0 and any(fit.records > 0 for fit in fits)  # the initial design, then the model's
    assert [fit.records for fit in fits] == sorted(fit.records for fit in fits)
    assert all(fit.fit_s >= 0 for fit in fits) and sum(fit.fit_s for fit in fits) < report.outcome.wall_s
    first, again = plan_tune(options), plan_tune(options)
    assert (first.predicted.wall_s, first.predicted.runs) == (again.predicted.wall_s, again.predicted.runs)
    assert first.predicted.runs > 0 and f"{len(fits)} model fits recorded by earlier tunes" in first.costs_from


def test_the_plan_command_prints_the_prediction_and_launches_nothing(tmp_path: Path) -> None:
    out, db = tmp_path / "tuning", tmp_path / "results.sqlite"
    done = subprocess.run([sys.executable, "-m", "tunempi", "tune", "--plan", "--out", str(out), "--db", str(db),
                           "--mpi", "mpich", "--ranks", "4", "--collectives", "allreduce", "--max-msg", "1KiB"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "plan: " in done.stdout and "engine launches" in done.stdout and "runs" in done.stdout
    assert not out.exists() and not db.exists()
    bad = subprocess.run([sys.executable, "-m", "tunempi", "tune", "--out", str(out), "--plan-from", str(db)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--plan-from goes with --plan" in bad.stderr + bad.stdout


def test_a_library_that_takes_its_choice_at_init_is_planned_a_launch_per_forced_algorithm(tmp_path: Path) -> None:
    """Intel MPI forces each algorithm in its own launch (tune/runner.py): the plan counts one per algorithm at
    least (its adapter says so), where MPICH's switch at run time in one launch."""
    def planned(mpi: str) -> tuple[int, int]:
        options = TuneOptions(out=tmp_path / mpi, collectives="allreduce", mpi=mpi, ranks=2, max_msg=64, min_msg=4,
                              db=tmp_path / f"{mpi}.sqlite", settings=FAST, launches=1)
        return plan_tune(options).predicted.launches, len(TunePlan.of(options).spaces["allreduce"].algorithms)

    impi_launches, impi_algorithms = planned("impi")
    assert impi_algorithms > 2 and impi_launches == impi_algorithms
    assert planned("mpich")[0] == 1


def test_with_no_launch_recorded_a_launch_is_priced_at_its_vendors_start(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh store: Intel MPI's launches priced at its vendor's start (0.38 s here), not MPICH's 0.08 s."""
    options = TuneOptions(out=tmp_path / "impi", collectives="allreduce", mpi="impi", ranks=2, max_msg=64, min_msg=4,
                          db=tmp_path / "impi.sqlite", settings=FAST, launches=1)
    vendors = plan_module.ENGINE_START_S_BY_VENDOR
    assert vendors["impi"] > vendors["mpich"] == plan_module.ENGINE_START_S
    own = plan_tune(options).predicted
    monkeypatch.setitem(vendors, "impi", plan_module.ENGINE_START_S)
    as_mpich = plan_tune(options).predicted
    assert own.launches == as_mpich.launches > 2
    assert own.wall_s - as_mpich.wall_s == pytest.approx(own.launches * (0.38 - plan_module.ENGINE_START_S))
