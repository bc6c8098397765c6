"""`tune --objective time` and verify on a non-blocking collective (issue 41): MPICH at 2 ranks, iallreduce at
three sizes. tune sizes each cell's computation by the library default's latency there (stored as a latency
point), measures every algorithm of the cell on that computation (stored as time points, apart from the
latency ones), and records the objective and the computations in the manifest; verify measures under the
files with the manifest's computations, and refuses a manifest that lost them. Nothing here asserts a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.session import BenchOptions, run_bench
from tunempi.errors import UsageError
from tunempi.mpi.discovery import adapter_for
from tunempi.store.results import ResultStore
from tunempi.tune.apply import tuning_library
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.runner import PointResult
from tunempi.tune.verify_run import VerifyListener, rewrite_files, run_verify

pytestmark = pytest.mark.mpi

FAST = MeasureSettings(warmup=1, min_iters=5, max_iters=100, rel_ci=0.1, time_cap_s=0.01)


class Seen(VerifyListener):
    def __init__(self) -> None:
        self.results: list[PointResult] = []

    def measured(self, result: PointResult, done: int, total: int) -> None:
        self.results.append(result)


def test_tune_for_time_records_its_computations_and_verify_measures_with_them(tmp_path: Path) -> None:
    db = tmp_path / "results.sqlite"
    report = run_tune(TuneOptions(out=tmp_path / "tuning", collectives="iallreduce", mpi="mpich", ranks=2,
                                  min_msg=256, max_msg=1024, timeout_s=30.0, db=db, settings=FAST, launches=1,
                                  objective="time"))
    manifest = report.manifest
    assert manifest is not None and manifest.objective == "time"
    cells = {row.cell for row in manifest.selection}
    assert {c.msg_bytes for c in cells} >= {256, 512, 1024} and set(manifest.compute_us) == cells
    with ResultStore(db) as store:
        timed = store.query(objective="time", status="ok")
        latency = store.query(objective="latency")
    # every algorithm of a cell measured on the cell's one computation, the default's latency there
    assert timed and all(m.compute_us == manifest.compute_us[next(c for c in cells if c.msg_bytes == m.msg_bytes)]
                         for m in timed)
    assert len({m.algorithm for m in timed}) > 1
    assert {(m.algorithm, m.msg_bytes) for m in latency} == {("default", c.msg_bytes) for c in cells}
    for cell in cells:
        default = next(m for m in latency if m.msg_bytes == cell.msg_bytes)
        assert default.median_us is not None and manifest.compute_us[cell] == pytest.approx(default.median_us,
                                                                                            abs=1e-3)

    # a non-default file in every cell, so verify has cells to measure whatever the tune chose
    library = tuning_library(manifest)
    forced = adapter_for(library).tuning_file_algorithms("iallreduce").selectable[-1]
    manifest = rewrite_files(manifest, library, dict.fromkeys(cells, forced), smoke=True)
    manifest.save()
    seen = Seen()
    verified = run_verify(manifest.directory, repeats=2, settings=FAST, listener=seen)
    assert verified.manifest.verify is not None and verified.manifest.objective == "time"
    measured = [r.measurement for r in seen.results]
    assert {m.algorithm for m in measured} >= {"default", forced}
    for m in measured:  # both sides of every pair under the objective, on the manifest's computation
        cell = next(c for c in cells if c.msg_bytes == m.msg_bytes)
        assert m.objective == "time" and m.compute_us == manifest.compute_us[cell]

    lost = manifest.to_dict()  # the forced selection, without its computations, cannot be verified under time
    lost["compute_us"] = []
    (manifest.directory / "manifest.json").write_text(json.dumps(lost))
    with pytest.raises(UsageError, match="no computation length is recorded for iallreduce"):
        run_verify(manifest.directory, repeats=2, settings=FAST)


def test_bench_stores_each_objective_apart_and_times_every_algorithm_on_the_defaults_latency(tmp_path: Path) -> None:
    db = str(tmp_path / "r.sqlite")
    algorithms = ("default", "sched_recursive_doubling")
    common = {"mpi": "mpich", "collectives": "iallreduce", "algorithms": ",".join(algorithms), "sizes": "64,4KiB",
              "ranks": 2, "db": db, "settings": FAST}
    timed = run_bench(BenchOptions(**common, objective="time"))
    hidden = run_bench(BenchOptions(**common, objective="overlap"))
    blocking = run_bench(BenchOptions(**{**common, "collectives": "allreduce", "algorithms": "default"},
                                      objective="time"))
    with ResultStore(db) as store:
        rows = store.query()
    latency = {m.msg_bytes: m.median_us for m in rows
               if m.collective == "iallreduce" and m.objective == "latency" and m.algorithm == "default"}
    assert set(latency) == {64, 4096}  # measured first: the computation of each size's time points
    for m in rows:
        if m.collective == "allreduce":
            assert m.objective == "latency" and m.compute_us is None  # blocking: its call time, whatever asked
        elif m.objective == "time":
            assert m.ok and m.compute_us == pytest.approx(latency[m.msg_bytes], abs=1e-3)
    every = {(a, s) for a in algorithms for s in (64, 4096)}
    assert {(m.algorithm, m.msg_bytes) for m in rows if m.objective == "time"} == every
    assert {(m.algorithm, m.msg_bytes) for m in rows if m.objective == "overlap" and m.ok} == every
    assert {r.collective for r in timed.rows} == {"iallreduce [time]"}
    assert {r.collective for r in hidden.rows} == {"iallreduce [overlap]"}
    assert {r.collective for r in blocking.rows} == {"allreduce"}
    with pytest.raises(UsageError, match="overlap applies to the non-blocking"):
        run_bench(BenchOptions(**{**common, "collectives": "allreduce", "algorithms": "default"}, objective="overlap"))
