"""What a non-blocking collective's point measures (`--objective time|latency|overlap`, issue 41): the objective
of each collective, the engine request and the figure each objective is judged by, the store keeping the
objective in a point's key (schema version 5), tune's computations (one per cell, kept across runs) and the
manifest that hands them to verify. Pure parts; the engine in tests/integration/test_tune_objective.py."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from store_history import measurement_row, nb_measurement, store_at_version

from tunempi.bench.engine import Layout
from tunempi.bench.protocol import NB_OVERLAP, NB_TIME, PointReply, PointRequest, decode_line
from tunempi.bench.sweep import BenchPoint, computations, figure_request, figure_samples
from tunempi.collectives import LATENCY_OBJECTIVE, check_objective, objective_of
from tunempi.errors import TunempiError, UsageError
from tunempi.space import Cell, FeatureSpace
from tunempi.store.results import Measurement, PointKey, ResultStore
from tunempi.tune.driver import records_from_store
from tunempi.tune.manifest import LibraryRecord, Manifest
from tunempi.tune.objective import Figures, compute_lengths

FP = "fp-objective"


def _m(collective: str = "iallreduce", algorithm: str = "default", msg_bytes: int = 1024, **kw: object) -> Measurement:
    return nb_measurement(FP, collective, algorithm, msg_bytes, **kw)


def test_blocking_collectives_are_measured_for_their_call_time_whatever_the_objective() -> None:
    assert objective_of("iallreduce", "time") == "time" and objective_of("ialltoall", "overlap") == "overlap"
    assert objective_of("allreduce", "time") == LATENCY_OBJECTIVE == objective_of("bcast", "overlap")
    with pytest.raises(UsageError, match="applies to non-blocking"):
        BenchPoint("allreduce", "default", 8, objective="time", compute_us=3.0)
    with pytest.raises(UsageError, match="needs the computation"):
        BenchPoint("iallreduce", "default", 8, objective="time")
    with pytest.raises(UsageError, match="needs the computation"):
        BenchPoint("iallreduce", "default", 8, objective="overlap", compute_us=3.0)
    assert check_objective("overlap", ["iallreduce"]) == "overlap"


def test_each_objective_asks_the_engine_for_its_mode_and_is_judged_by_its_own_samples() -> None:
    timed = BenchPoint("iallreduce", "default", 64, objective="time", compute_us=12.5)
    assert figure_request(timed) == (NB_TIME, 12.5e-6)
    assert figure_request(BenchPoint("ibcast", "binomial", 64, objective="overlap")) == (NB_OVERLAP, None)
    assert figure_request(BenchPoint("ibcast", "binomial", 64)) == ("", None)
    assert figure_request(BenchPoint("ibcast", "binomial", 64), NB_OVERLAP) == (NB_OVERLAP, None)  # bench --overlap
    line = json.dumps({
        "event": "point", "id": 3, "status": "ok", "iterations": 2, "warmup": 1, "errors": 0, "checked": 5,
        "stop": "ci", "elapsed_s": 0.1, "median_us": 10.0, "ci_low_us": 9.0, "ci_high_us": 11.0,
        "samples_us": [9.0, 11.0], "nb": "overlap", "overlap_iterations": 2, "compute_loops": 100,
        "overlapped_us": 14.0, "compute_us": 10.0, "overlap_pct": 60.0, "unhidden_samples_us": [3.0, 5.0]})
    reply = decode_line(line)
    assert isinstance(reply, PointReply) and reply.unhidden_samples_us == (3.0, 5.0)
    assert figure_samples(reply, "overlap") == (3.0, 5.0)  # the time not hidden: smaller is better
    assert figure_samples(reply, "time") == figure_samples(reply, "latency") == (9.0, 11.0)


def test_the_time_request_carries_its_computation_and_nothing_else_does() -> None:
    request = PointRequest(1, "iallreduce", 64, nb=NB_TIME, compute_s=12.5e-6)
    assert request.encode().endswith(" nb=time compute=0.000012500")
    with pytest.raises(ValueError, match="go together"):
        PointRequest(1, "iallreduce", 64, nb=NB_TIME).encode()
    with pytest.raises(ValueError, match="go together"):
        PointRequest(1, "iallreduce", 64, compute_s=1e-6).encode()
    with pytest.raises(ValueError, match="needs a non-blocking"):
        PointRequest(1, "allreduce", 64, nb=NB_TIME, compute_s=1e-6).encode()


def test_a_version_4_database_gains_the_objective_and_figures_of_two_objectives_never_mix(tmp_path: Path) -> None:
    """Version 5: a point's objective is part of its key; rows from before are latency (the only figure the
    store kept), the same iallreduce point measured for time is another row, and a query for one objective
    returns its figures only."""
    path = store_at_version(tmp_path / "v4.sqlite", 4, measurement_row(
        "iallreduce", "default", library_fingerprint=FP, library="mpich-5.0.2", median_us=5.0))
    with ResultStore(path) as store:
        (old,) = store.query()
        assert old.objective == "latency" and old.compute_us is None and old.median_us == 5.0
        assert old.key == PointKey("iallreduce", "default", 2, 1, 2, 1024, 0, "uniform", "latency")
        timed = replace(old, objective="time", compute_us=5.0, median_us=8.0)
        store.add(timed)
        store.add(replace(old, median_us=6.0))  # the latency point again: an update, not a third row
        assert sorted((m.objective, m.median_us, m.compute_us) for m in store.query()) == [
            ("latency", 6.0, None), ("time", 8.0, 5.0)]
        assert store.measured_points(FP) == {old.key, timed.key}
        assert [m.median_us for m in store.query(objective="time")] == [8.0]


def test_a_tune_reads_back_only_the_points_of_its_objective() -> None:
    cell = Cell("iallreduce", 2, 1, 2, 1024)
    spaces = {"iallreduce": FeatureSpace("iallreduce", (cell,), ("default", "ring")),
              "allreduce": FeatureSpace("allreduce", (Cell("allreduce", 2, 1, 2, 1024),), ("default", "ring"))}
    with ResultStore(":memory:") as store:
        store.add_many([_m(median_us=5.0), _m(objective="time", compute_us=5.0, median_us=8.0),
                        _m(algorithm="ring", objective="overlap", median_us=1.0), _m("allreduce", median_us=4.0)])
        for objective, expected in (("time", [8.0]), ("latency", [5.0]), ("overlap", [1.0])):
            records, _ = records_from_store(store, FP, spaces, objective=objective)
            assert [r.latency_us for r in records["iallreduce"]] == expected
            assert [r.latency_us for r in records["allreduce"]] == [4.0]  # blocking: its call time always


def test_time_measures_every_algorithm_of_a_cell_on_the_computation_of_that_cell() -> None:
    a, b = Cell("iallreduce", 2, 1, 2, 64), Cell("iallreduce", 2, 1, 2, 4096)
    figures = Figures("time", {a: 3.5, b: 40.0})
    points = [figures.point(a, name, 0) for name in ("default", "ring", "tsp_ring")]
    assert {(p.objective, p.compute_us) for p in points} == {("time", 3.5)}
    assert figures.point(b, "ring", 1).compute_us == 40.0
    blocking = figures.point(Cell("allreduce", 2, 1, 2, 64), "ring", 0)
    assert (blocking.objective, blocking.compute_us) == ("latency", None)
    with pytest.raises(TunempiError, match="no computation length"):
        figures.point(Cell("ibcast", 2, 1, 2, 64), "default", 0)
    with pytest.raises(UsageError, match="no computation length is recorded for ibcast 64 B"):
        figures.check_cells([a, Cell("ibcast", 2, 1, 2, 64), Cell("allreduce", 2, 1, 2, 64)])
    Figures("latency").check_cells([Cell("ibcast", 2, 1, 2, 64)])  # nothing to record for latency


def test_a_cell_keeps_the_computation_of_its_stored_time_points_and_the_others_take_the_defaults_latency() -> None:
    kept, fresh = Cell("iallreduce", 2, 1, 2, 64), Cell("iallreduce", 2, 1, 2, 4096)
    asked: list[tuple[str, str, int, int, str]] = []

    def measure(work: Mapping[Layout, Sequence[BenchPoint]]) -> list[Measurement]:
        out = []
        for layout, points in work.items():
            for p in points:
                asked.append((p.collective, p.algorithm, p.msg_bytes, p.run, p.objective))
                out.append(_m(msg_bytes=p.msg_bytes, ranks=layout.ranks, run=p.run, median_us=41.23456))
        return out

    with ResultStore(":memory:") as store:
        store.add(_m(msg_bytes=64, algorithm="ring", objective="time", compute_us=3.5, median_us=9.0))
        lengths = compute_lengths([kept, fresh, Cell("allreduce", 2, 1, 2, 64)], store, FP, measure,
                                  run_of=lambda cell: 7)
        assert lengths == {kept: 3.5, fresh: 41.235}  # blocking cells get none
        assert asked == [("iallreduce", "default", 4096, 7, "latency")]  # only the cell without one, once
        assert computations(store, FP, Layout(2), [("iallreduce", 64), ("iallreduce", 4096)]) == {
            ("iallreduce", 64): 3.5}

        def failing(work: Mapping[Layout, Sequence[BenchPoint]]) -> list[Measurement]:
            return [_m(msg_bytes=p.msg_bytes, status="failed", reason="x", median_us=None)
                    for points in work.values() for p in points]

        with pytest.raises(TunempiError, match="default failed at iallreduce 4096 B"):
            compute_lengths([fresh], store, FP, failing)


def test_the_manifest_records_the_objective_with_its_computations_and_an_older_one_reads_as_latency(
        tmp_path: Path) -> None:
    record = LibraryRecord("mpich-5.0.2", "mpich", "5.0.2", "fp", "/x", "/x/bin/mpicc")
    cell = Cell("iallreduce", 2, 1, 2, 1024)
    Manifest(directory=tmp_path, library=record, objective="time", compute_us={cell: 12.5}).save()
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["objective"] == "time" and data["compute_us"] == [{**cell.to_dict(), "compute_us": 12.5}]
    loaded = Manifest.load(tmp_path)
    assert loaded.figures() == Figures("time", {cell: 12.5})
    del data["objective"], data["compute_us"]
    assert Manifest.from_dict(tmp_path, data).figures() == Figures("latency", {})


def test_the_report_says_what_the_non_blocking_speedups_are_of(tmp_path: Path) -> None:
    from tunempi.report.tuning import speedup_table, summary_lines, write_html

    record = LibraryRecord("mpich-5.0.2", "mpich", "5.0.2", "fp", "/x", "/x/bin/mpicc")
    manifest = Manifest(directory=tmp_path, library=record, collectives=("allreduce", "iallreduce"), objective="time")
    assert str(speedup_table(manifest).title).endswith("; non-blocking collectives by their time")
    assert any(line.startswith("iallreduce: tuned for their time (--objective; time: start + a computation")
               for line in summary_lines(manifest))
    assert "iallreduce: speedups of their time" in write_html(manifest, {}, tmp_path / "r.html").read_text()
    blocking = Manifest(directory=tmp_path, library=record, collectives=("allreduce",), objective="time")
    assert "non-blocking" not in str(speedup_table(blocking).title)
