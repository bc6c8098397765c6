"""The results store: measured benchmark points with their provenance, in SQLite.

Contract (what every caller may rely on):
- A `Measurement` is a frozen record. Its natural key (schema.NATURAL_KEY: library fingerprint, system,
  collective, algorithm, ranks, nodes, ppn, msg_bytes, run, distribution, objective) names one repetition of one
  point; the store
  holds at most one row per key.
- Writing a key that exists updates the row ("upsert"), except that a failed or timed-out record never
  replaces a successful one: a retry that fails again does not lose an earlier good measurement.
  `on_conflict="ignore"` keeps the existing row instead (used by import).
- `add_many` is one transaction: all rows or none.
- Several processes may write to the same file at once: the database runs in WAL mode, every write
  transaction takes the write lock up front (BEGIN IMMEDIATE) and waits up to `busy_timeout_s` for it.
  Readers never block writers. (WAL needs a local file system that supports shared memory: not NFS.)
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from tunempi.errors import TunempiError, UsageError
from tunempi.store.schema import NATURAL_KEY, migrate
from tunempi.store.transaction import write_transaction

STATUSES: tuple[str, ...] = ("ok", "failed", "timeout")
STATISTICS: tuple[str, ...] = ("median_us", "min_us", "p90_us", "mean_us", "ci_low_us", "ci_high_us")
_NO_ENV: Mapping[str, str] = MappingProxyType({})


def utc_timestamp() -> str:
    """Now, as ISO 8601 in UTC with second precision: '2026-11-22T01:02:03Z'."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Measurement:
    """One measured (or failed) repetition of one benchmark point, with where and how it was measured.

    Times are in microseconds. `mean_us` is the average over iterations (what OSU reports and what the
    dataset format calls latency_us); `ci_low_us`/`ci_high_us` bound the median (95 %). A failed or
    timed-out point has status != "ok", a `reason`, and usually no statistics.

    `hosts` and `launch_argv` may be given as any sequence and `env` as any mapping; they are stored as
    tuples and a read-only mapping so records stay hashable and immutable.
    """

    library_fingerprint: str
    library: str  # name and version, e.g. "mpich-5.0.2"
    collective: str
    algorithm: str
    ranks: int
    msg_bytes: int
    nodes: int = 1
    ppn: int = 0  # 0: ranks // nodes (rounded up), filled in by __post_init__
    run: int = 0
    status: str = "ok"
    reason: str = ""
    median_us: float | None = None
    min_us: float | None = None
    p90_us: float | None = None
    mean_us: float | None = None
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    iterations: int | None = None
    errors: int = 0
    hosts: tuple[str, ...] = ()
    launch_argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: _NO_ENV)
    timestamp: str = field(default_factory=utc_timestamp)
    system: str = ""
    job_id: str = ""
    #: How a vector collective's blocks differ between ranks (uniform, skewed, sparse: bench/c/engine.h);
    #: uniform for every other collective.
    distribution: str = "uniform"
    #: What the point measured (collectives.OBJECTIVES): `latency` for every blocking collective and for a
    #: non-blocking one timed start + wait; `time` (start + a computation of `compute_us` + wait) and `overlap`
    #: (the time not hidden behind a computation as long as the latency) for non-blocking ones only.
    objective: str = "latency"
    compute_us: float | None = None  # `time`: the median of the computation between start and wait
    #: Seconds from the request to the engine's reply on the tuner's side (its retries included, an engine start
    #: not): what the run cost, beyond its timed iterations (tune/plan.py). None where not recorded.
    run_s: float | None = None
    #: The tune's launch block that measured it (1: the exploring launch, 2...: deciding blocks); None outside tune.
    launch_block: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise UsageError(f"unknown measurement status {self.status!r}; valid: {', '.join(STATUSES)}")
        if self.ranks <= 0 or self.nodes <= 0 or self.msg_bytes < 0 or self.run < 0:
            raise UsageError(
                f"bad measurement point: ranks={self.ranks} nodes={self.nodes} msg_bytes={self.msg_bytes} "
                f"run={self.run} (need ranks, nodes > 0 and msg_bytes, run >= 0)"
            )
        if self.ppn <= 0:
            object.__setattr__(self, "ppn", -(-self.ranks // self.nodes))
        if type(self.hosts) is not tuple:
            object.__setattr__(self, "hosts", tuple(self.hosts))
        if type(self.launch_argv) is not tuple:
            object.__setattr__(self, "launch_argv", tuple(self.launch_argv))
        if self.env is not _NO_ENV:
            object.__setattr__(self, "env", MappingProxyType(dict(sorted(dict(self.env).items()))) if self.env else _NO_ENV)

    def __hash__(self) -> int:
        return hash(tuple(
            tuple(self.env.items()) if f.name == "env" else getattr(self, f.name) for f in fields(self)
        ))

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def key(self) -> PointKey:
        return PointKey(self.collective, self.algorithm, self.ranks, self.nodes, self.ppn, self.msg_bytes, self.run,
                        self.distribution, self.objective)

    @property
    def latency_us(self) -> float | None:
        """The dataset format's latency: the mean where measured, else the median."""
        return self.mean_us if self.mean_us is not None else self.median_us


class PointKey(NamedTuple):
    """A point and repetition within one library and system: what a resumed sweep skips."""

    collective: str
    algorithm: str
    ranks: int
    nodes: int
    ppn: int
    msg_bytes: int
    run: int
    distribution: str = "uniform"
    objective: str = "latency"


_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Measurement))
_JSON_COLUMNS = {"hosts", "launch_argv", "env"}
_INSERT_SQL = f"INSERT INTO measurements ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
_UPDATABLE = [c for c in _COLUMNS if c not in NATURAL_KEY]
_UPSERT_SQL = (
    _INSERT_SQL
    + f" ON CONFLICT ({', '.join(NATURAL_KEY)}) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _UPDATABLE)
    + " WHERE excluded.status = 'ok' OR measurements.status != 'ok'"
)
_IGNORE_SQL = _INSERT_SQL + f" ON CONFLICT ({', '.join(NATURAL_KEY)}) DO NOTHING"


def _to_row(m: Measurement) -> tuple[Any, ...]:
    values: list[Any] = []
    for name in _COLUMNS:
        value = getattr(m, name)
        if name == "env":
            value = json.dumps(dict(value), sort_keys=True) if value else "{}"
        elif name in _JSON_COLUMNS:
            value = json.dumps(list(value)) if value else "[]"
        values.append(value)
    return tuple(values)


def _from_row(row: sqlite3.Row) -> Measurement:
    values = {name: row[name] for name in _COLUMNS}
    for name in _JSON_COLUMNS:
        text = values[name]
        values[name] = json.loads(text) if len(text) > 2 else ({} if name == "env" else ())
    return Measurement(**values)


#: A filter value: one value, or any collection of accepted values (SQL IN).
Filter = Any


def _where(filters: Mapping[str, Filter]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in filters.items():
        if value is None:
            continue
        if column not in _COLUMNS:
            raise UsageError(f"cannot filter on {column!r}; valid: {', '.join(_COLUMNS)}")
        if isinstance(value, Collection) and not isinstance(value, str):
            values = list(value)
            if not values:
                clauses.append("0")
                continue
            clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
            params.extend(values)
        else:
            clauses.append(f"{column} = ?")
            params.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


class ResultStore:
    """A results database file. Open with `ResultStore(path)`; use as a context manager or call close().

    `ResultStore(":memory:")` is a private in-memory store (tests, simulations). One connection per
    instance: use one ResultStore per thread.

    Query filters are keyword arguments named after Measurement fields; each takes one value or a
    collection of values, None means "any". Example:
    `store.query(library_fingerprint=fp, collective="allreduce", msg_bytes=[8, 1024], status="ok")`.
    """

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 60.0) -> None:
        in_memory = str(path) == ":memory:"  # for tests and simulations: private, gone on close()
        self.path = Path(path)
        if not in_memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                ":memory:" if in_memory else self.path, timeout=busy_timeout_s, isolation_level=None
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            if not in_memory:
                self._switch_to_wal(busy_timeout_s)
                # In WAL mode NORMAL is durable against application crashes, which is what a sweep needs.
                self._conn.execute("PRAGMA synchronous = NORMAL")
            migrate(self._conn, path=str(self.path))
        except sqlite3.DatabaseError as exc:
            raise TunempiError(f"cannot open results database {self.path}: {exc}") from exc

    def _switch_to_wal(self, busy_timeout_s: float) -> None:
        """WAL mode, waiting like any other write: when two processes open a fresh file at once, SQLite can
        answer the journal-mode change with "locked" (or leave the old mode) without calling the busy
        handler, so the switch is retried until the busy timeout."""
        deadline = time.monotonic() + busy_timeout_s
        while True:
            try:
                mode = str(self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                mode = "locked"
            if mode == "wal":
                return
            if time.monotonic() >= deadline:
                raise TunempiError(f"results database {self.path}: cannot switch to WAL mode (got {mode})")
            time.sleep(0.05)

    # --- life cycle -------------------------------------------------------------------------------
    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ----------------------------------------------------------------------------------
    def add(self, measurement: Measurement, *, on_conflict: Literal["update", "ignore"] = "update") -> None:
        """Store one measurement (see the module docstring for what happens to an existing key)."""
        self.add_many([measurement], on_conflict=on_conflict)

    def add_many(
        self, measurements: Iterable[Measurement], *, on_conflict: Literal["update", "ignore"] = "update"
    ) -> int:
        """Store measurements in one transaction; returns how many rows were inserted or changed."""
        if on_conflict not in ("update", "ignore"):
            raise UsageError(f"unknown on_conflict {on_conflict!r}; valid: update, ignore")
        sql = _UPSERT_SQL if on_conflict == "update" else _IGNORE_SQL
        conn = self._conn
        before = conn.total_changes
        with write_transaction(conn):
            conn.executemany(sql, (_to_row(m) for m in measurements))
        return conn.total_changes - before

    def delete(self, **filters: Filter) -> int:
        """Delete the measurements matching the filters (at least one filter is required)."""
        where, params = _where(filters)
        if not where:
            raise UsageError("delete needs at least one filter (refusing to empty the store)")
        with write_transaction(self._conn) as conn:
            count = conn.execute(f"DELETE FROM measurements{where}", params).rowcount
        return int(count)

    # --- other tables in the same file (store/searches.py) ----------------------------------------
    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction on the store's connection (BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error)."""
        return write_transaction(self._conn)

    def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Rows of one read-only query on the store's connection."""
        return self._conn.execute(sql, params).fetchall()

    # --- reading ----------------------------------------------------------------------------------
    def iter_measurements(self, **filters: Filter) -> Iterator[Measurement]:
        """Matching measurements, in insertion order, streamed (suitable for exporting large stores)."""
        where, params = _where(filters)
        cursor = self._conn.execute(f"SELECT * FROM measurements{where} ORDER BY id", params)
        for row in cursor:
            yield _from_row(row)

    def query(self, **filters: Filter) -> list[Measurement]:
        return list(self.iter_measurements(**filters))

    def __iter__(self) -> Iterator[Measurement]:
        return self.iter_measurements()

    def count(self, **filters: Filter) -> int:
        where, params = _where(filters)
        return int(self._conn.execute(f"SELECT COUNT(*) FROM measurements{where}", params).fetchone()[0])

    def __len__(self) -> int:
        return self.count()

    def measured_points(
        self, library_fingerprint: str, *, system: str = "", include_failed: bool = False, **filters: Filter
    ) -> set[PointKey]:
        """Keys already measured for one library (and system): what a resumed sweep can skip.

        Failed and timed-out points are left out unless include_failed, so a rerun retries them.
        """
        filters = {**filters, "library_fingerprint": library_fingerprint, "system": system}
        if not include_failed:
            filters["status"] = "ok"
        where, params = _where(filters)
        columns = ", ".join(PointKey._fields)
        rows = self._conn.execute(f"SELECT {columns} FROM measurements{where}", params).fetchall()
        return {PointKey(*row) for row in rows}

    def libraries(self) -> list[tuple[str, str]]:
        """(fingerprint, library) pairs present in the store, sorted."""
        rows = self._conn.execute(
            "SELECT DISTINCT library_fingerprint, library FROM measurements ORDER BY 1, 2"
        ).fetchall()
        return [(str(a), str(b)) for a, b in rows]
