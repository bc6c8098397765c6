"""The results store: records, upserts, filters, resume keys, schema migrations, concurrent writers, import/export."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from store_history import measurement_row, store_at_version

from tunempi.errors import TunempiError, UsageError
from tunempi.store import (
    NATURAL_KEY,
    SCHEMA_VERSION,
    Measurement,
    PointKey,
    ResultStore,
    export_dataset,
    import_dataset,
)
from tunempi.store import schema as schema_module
from tunempi.store.dataset import read_dataset, write_dataset
from tunempi.store.exchange import row_from_measurement
from tunempi.store.fits import FitTiming, add_fits, recorded_fits
from tunempi.store.launches import LaunchTiming, add_launches, launch_seconds

FP = "mpich-5.0.2-0123456789ab"


def _m(**over: object) -> Measurement:
    base: dict[str, object] = dict(
        library_fingerprint=FP, library="mpich-5.0.2", collective="allreduce", algorithm="ring", ranks=2,
        msg_bytes=1024, median_us=3.5, min_us=3.1, p90_us=4.0, mean_us=3.6, ci_low_us=3.4, ci_high_us=3.7,
        iterations=200, hosts=["localhost"], launch_argv=["mpiexec", "-n", "2", "engine"],
        env={"MPIR_CVAR_X": "1"}, timestamp="2026-11-22T01:00:00Z", system="laptop", job_id="job-1",
    )
    base.update(over)
    return Measurement(**base)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    with ResultStore(tmp_path / "sub" / "results.sqlite") as opened:
        yield opened


def test_measurement_is_frozen_normalised_and_hashable() -> None:
    m = _m()
    assert m.ppn == 2 and m.nodes == 1  # ppn defaults to ranks per node
    assert m.hosts == ("localhost",) and m.launch_argv == ("mpiexec", "-n", "2", "engine")
    with pytest.raises(TypeError):
        m.env["X"] = "2"  # type: ignore[index]
    assert hash(m) == hash(_m()) and m == _m()
    assert _m(ranks=5, nodes=2).ppn == 3
    assert m.key == PointKey("allreduce", "ring", 2, 1, 2, 1024, 0)
    assert m.latency_us == 3.6 and _m(mean_us=None).latency_us == 3.5
    with pytest.raises(UsageError, match="valid: ok, failed, timeout"):
        _m(status="crashed")
    with pytest.raises(UsageError, match="bad measurement point"):
        _m(ranks=0)


def test_round_trip_keeps_every_field(store: ResultStore) -> None:
    failed = _m(algorithm="tree", status="timeout", reason="timed out after 30 s", median_us=None, mean_us=None,
                min_us=None, p90_us=None, ci_low_us=None, ci_high_us=None, iterations=None, errors=3)
    store.add_many([_m(), failed])
    assert store.query() == [_m(), failed]
    assert list(store) == [_m(), failed] and len(store) == 2


def test_upsert_rules(store: ResultStore) -> None:
    store.add(_m(median_us=5.0, status="failed", reason="crash"))
    store.add(_m(median_us=4.0))  # ok replaces failed
    assert store.query()[0].median_us == 4.0 and store.query()[0].status == "ok"
    store.add(_m(status="timeout", reason="hang"))  # a failure never replaces a good measurement
    assert store.query()[0].status == "ok"
    store.add(_m(median_us=3.0))  # ok replaces ok (a forced re-measure)
    assert store.query()[0].median_us == 3.0
    store.add(_m(median_us=9.0), on_conflict="ignore")
    assert store.query()[0].median_us == 3.0
    store.add(_m(run=1))
    assert len(store) == 2
    with pytest.raises(UsageError, match="valid: update, ignore"):
        store.add(_m(), on_conflict="replace")  # type: ignore[arg-type]


def test_add_many_is_one_transaction(store: ResultStore) -> None:
    def rows():
        yield _m(run=0)
        yield _m(run=1)
        raise RuntimeError("measurement source failed")

    with pytest.raises(RuntimeError):
        store.add_many(rows())
    assert len(store) == 0
    assert store.add_many([_m(run=r) for r in range(5)]) == 5


def test_filters(store: ResultStore) -> None:
    store.add_many(
        [_m(collective=c, algorithm=a, msg_bytes=s) for c in ("allreduce", "bcast") for a in ("ring", "tree")
         for s in (8, 64, 1024)]
    )
    assert store.count(collective="bcast") == 6
    assert store.count(collective="bcast", algorithm="ring", msg_bytes=[8, 1024]) == 2
    assert store.count(msg_bytes=[]) == 0
    assert store.count(library_fingerprint=FP, ranks=2, status="ok", system="laptop") == 12
    assert [m.msg_bytes for m in store.query(collective="allreduce", algorithm="tree")] == [8, 64, 1024]
    with pytest.raises(UsageError, match="cannot filter on 'colour'"):
        store.count(colour="red")
    assert store.delete(collective="bcast") == 6 and len(store) == 6
    with pytest.raises(UsageError, match="at least one filter"):
        store.delete()
    assert store.libraries() == [(FP, "mpich-5.0.2")]


def test_measured_points_for_resume(store: ResultStore) -> None:
    store.add_many([
        _m(msg_bytes=8), _m(msg_bytes=64, status="failed", reason="abort"), _m(msg_bytes=8, system="other"),
        _m(msg_bytes=8, library_fingerprint="openmpi-5.0.11-ffffffffffff"), _m(msg_bytes=8, collective="bcast"),
    ])
    done = store.measured_points(FP, system="laptop", collective="allreduce")
    assert done == {PointKey("allreduce", "ring", 2, 1, 2, 8, 0)}
    assert len(store.measured_points(FP, system="laptop", include_failed=True)) == 3
    assert store.measured_points(FP, system="nowhere") == set()


def test_schema_version_wal_and_natural_key(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ResultStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    index = conn.execute("PRAGMA index_info(measurements_natural_key)").fetchall()
    assert tuple(row[2] for row in index) == NATURAL_KEY
    conn.close()


def test_migrations_apply_in_order_and_newer_schema_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as store:
        store.add(_m())
    extra = ("ALTER TABLE measurements ADD COLUMN note TEXT NOT NULL DEFAULT 'v2'",)
    monkeypatch.setattr(schema_module, "MIGRATIONS", (*schema_module.MIGRATIONS, extra))
    monkeypatch.setattr(schema_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with ResultStore(path) as store:
        assert store.query() == [_m()]  # data kept through the migration
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert conn.execute("SELECT note FROM measurements").fetchone()[0] == "v2"
    conn.close()
    monkeypatch.setattr(schema_module, "MIGRATIONS", schema_module.MIGRATIONS[:-1])
    monkeypatch.setattr(schema_module, "SCHEMA_VERSION", SCHEMA_VERSION)
    with pytest.raises(TunempiError, match="newer than this tunempi"):
        ResultStore(path)


def test_a_version_3_database_gains_the_distribution_and_keeps_its_rows(tmp_path: Path) -> None:
    """Version 4 (issue 40): a vector collective's count distribution is part of a point's key; rows from
    before are uniform, and the same point measured skewed is another row."""
    path = store_at_version(tmp_path / "v3.sqlite", 3, measurement_row(
        "alltoallv", "scattered", library_fingerprint=FP, library="mpich-5.0.2", median_us=5.0))
    with ResultStore(path) as store:
        (old,) = store.query()
        assert old.distribution == "uniform" and old.median_us == 5.0
        assert old.key == PointKey("alltoallv", "scattered", 2, 1, 2, 1024, 0, "uniform")
        skewed = replace(old, distribution="skewed", median_us=7.0)
        store.add(skewed)
        store.add(replace(old, median_us=6.0))  # the uniform point again: an update
        assert sorted((m.distribution, m.median_us) for m in store.query()) == [("skewed", 7.0), ("uniform", 6.0)]
        assert store.measured_points(FP) == {old.key, skewed.key}
        assert [m.median_us for m in store.query(distribution="skewed")] == [7.0]


def test_a_version_5_database_gains_run_seconds_and_launch_blocks_and_keeps_its_rows(tmp_path: Path) -> None:
    """Version 6 (issue 57): what a run took and which tune launch block measured it; rows from before have
    neither (NULL: tune/plan.py prices them from their latencies), and both round-trip."""
    path = store_at_version(tmp_path / "v5.sqlite", 5, measurement_row(
        "allreduce", "ring", library_fingerprint=FP, library="mpich-5.0.2", median_us=5.0))
    with ResultStore(path) as store:
        (old,) = store.query()
        assert (old.median_us, old.run_s, old.launch_block) == (5.0, None, None)
        timed = replace(old, run=1, run_s=0.0125, launch_block=2)
        store.add(timed)
        assert sorted((m.run, m.run_s, m.launch_block) for m in store.query()) == [(0, None, None), (1, 0.0125, 2)]
        assert store.query(launch_block=2) == [timed]


def test_a_version_6_database_gains_the_engine_launches_and_keeps_its_rows(tmp_path: Path) -> None:
    """Version 7 (issue 57): what each engine launch took, per library and layout (store/launches.py); a store
    from before has none (tune/plan.py then prices a launch by its constants)."""
    path = store_at_version(tmp_path / "v6.sqlite", 6, measurement_row(
        "allreduce", "ring", library_fingerprint=FP, library="mpich-5.0.2", median_us=5.0))
    with ResultStore(path) as store:
        assert [m.median_us for m in store.query()] == [5.0]
        assert launch_seconds(store, FP) == {}
        launches = [LaunchTiming(FP, 4, 1, 4, start_s=start, close_s=0.01) for start in (0.05, 0.07, 0.30)]
        other = LaunchTiming("openmpi-5.0.11-ffffffffffff", 4, 1, 4, start_s=0.2, close_s=0.07)
        assert add_launches(store, [*launches, other], system="laptop") == 4
        assert add_launches(store, []) == 0
        # the median launch of this library on this system, start and close
        assert launch_seconds(store, FP, "laptop") == {(4, 1, 4): pytest.approx(0.08)}
        assert launch_seconds(store, FP) == {}  # another system's launches are not this one's


def test_a_version_7_database_gains_the_model_fits_and_keeps_its_rows(tmp_path: Path) -> None:
    """Version 8 (issue 57): what each ask of a tune's strategy took (store/fits.py), per strategy and system; a
    store from before has none (tune/plan.py then times its replay's fits)."""
    path = store_at_version(tmp_path / "v7.sqlite", 7, measurement_row(
        "allreduce", "ring", library_fingerprint=FP, library="mpich-5.0.2", median_us=5.0))
    with ResultStore(path) as store:
        assert [m.median_us for m in store.query()] == [5.0]
        assert recorded_fits(store, "tunempi") == ()
        fits = [FitTiming("tunempi", 56, 0, 0.0002), FitTiming("tunempi", 56, 29, 0.15),
                FitTiming("tunempi", 840, 50, 0.4)]
        assert add_fits(store, [*fits, FitTiming("acclaim", 56, 29, 0.9)], system="laptop") == 4
        assert add_fits(store, []) == 0
        assert recorded_fits(store, "tunempi", "laptop") == tuple(fits)  # in the order stored
        assert recorded_fits(store, "tunempi") == ()  # another system's fits are not this one's
        with pytest.raises(sqlite3.IntegrityError):  # a space has points
            add_fits(store, [FitTiming("tunempi", 0, 0, 0.1)])


def test_in_memory_store() -> None:
    with ResultStore(":memory:") as store:
        store.add(_m())
        assert store.query() == [_m()]
    assert not Path(":memory:").exists()


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TunempiError, match="cannot open results database"):
        ResultStore(path)


WRITER = textwrap.dedent(
    """
    import sys
    from tunempi.store import Measurement, ResultStore
    path, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with ResultStore(path, busy_timeout_s=60) as store:
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        sys.stdin.readline()  # both writers start together
        for i in range(count):
            store.add(Measurement(library_fingerprint="fp", library="lib", collective="allreduce",
                                  algorithm=writer, ranks=2, msg_bytes=i, median_us=float(i)))
            if i % 10 == 0:
                store.add_many([Measurement(library_fingerprint="fp", library="lib", collective="bcast",
                                            algorithm=writer, ranks=2, msg_bytes=i, run=r) for r in range(5)])
    """
)


def test_two_processes_write_at_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    count = 400
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(count)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("a", "b")
    ]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    with ResultStore(path) as store:
        for name in ("a", "b"):
            assert store.count(algorithm=name, collective="allreduce") == count
            assert store.count(algorithm=name, collective="bcast") == 5 * len(range(0, count, 10))


def test_import_shared_dataset_once(store: ResultStore, peak_dataset: Path) -> None:
    read, written = import_dataset(store, peak_dataset)
    assert read == written == 30861 == len(store)
    assert import_dataset(store, peak_dataset) == (30861, 0)
    assert len(store) == 30861
    library = "openmpi-master@4318d41+ucx-1.7.0"
    assert store.libraries() == [(library, library)]
    some = store.query(collective="allreduce", algorithm="default", ranks=64, msg_bytes=1024)
    assert [m.run for m in some] == [0, 1, 2]
    assert all(m.system == "peak" and m.nodes == 2 and m.ppn == 42 and m.mean_us and m.mean_us > 0 for m in some)


def test_export_round_trips_through_the_dataset_format(store: ResultStore, tmp_path: Path) -> None:
    measured = [_m(), _m(collective="bcast", launch_argv=["mpiexec", "-genv", "A", "x y", "prog"]),
                _m(msg_bytes=8, median_us=None, mean_us=None, status="failed", reason="abort")]
    store.add_many(measured)
    out = tmp_path / "export.csv.gz"
    assert export_dataset(store, out) == 2  # the failed point has no latency to export
    rows = read_dataset(out)
    assert rows == [row_from_measurement(m) for m in measured[:2]]
    assert rows[0].latency_us == 3.6 and rows[0].median_us == 3.5 and rows[0].ci_high_us == 3.7
    assert rows[1].launch == "mpiexec -genv A 'x y' prog"
    buffer = io.StringIO()
    assert export_dataset(store, buffer, collective="bcast") == 1
    assert buffer.getvalue().splitlines()[0].startswith("system,library,collective,algorithm,ranks")
    # Into a fresh store: statistics, argv and timestamp survive; the fingerprint becomes the library name.
    with ResultStore(tmp_path / "other.sqlite") as other:
        assert import_dataset(other, out) == (2, 2)
        back = other.query(collective="bcast")[0]
        assert back.launch_argv == ("mpiexec", "-genv", "A", "x y", "prog")
        assert back.library_fingerprint == "mpich-5.0.2" and back.median_us == 3.5 and back.iterations == 200
        assert back.timestamp == "2026-11-22T01:00:00Z"


def test_import_replace_and_bad_file_leaves_store_untouched(store: ResultStore, tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    write_dataset([row_from_measurement(_m())], path)
    import_dataset(store, path)
    write_dataset([row_from_measurement(replace(_m(), mean_us=7.0))], path)
    assert import_dataset(store, path) == (1, 0) and store.query()[0].mean_us == 3.6
    assert import_dataset(store, path, replace=True) == (1, 1) and store.query()[0].mean_us == 7.0
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1].replace("allreduce", "bcast"), "x,y,z"]) + "\n")
    with pytest.raises(UsageError):
        import_dataset(store, path)
    assert len(store) == 1


OPENER = textwrap.dedent(
    """
    import sys
    from tunempi.store import ResultStore
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()  # every opener starts together
    with ResultStore(sys.argv[1]) as store:
        print(len(store))
    """
)


def test_several_processes_open_a_fresh_file_at_once(tmp_path: Path) -> None:
    """Raw SQLite answers a concurrent switch to WAL mode with "database is locked" without waiting (13 of
    30 trials of 4 openers here); the store retries it, so every opener gets in."""
    for trial in range(5):
        path = tmp_path / f"fresh{trial}.sqlite"
        openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(path)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        for opener in openers:
            assert opener.stdout is not None and opener.stdout.readline() == "ready\n"
        for opener in openers:
            assert opener.stdin is not None
            opener.stdin.write("go\n")
            opener.stdin.flush()
        for opener in openers:
            out, err = opener.communicate(timeout=120)
            assert opener.returncode == 0 and out.strip() == "0", err
