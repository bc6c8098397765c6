"""A results database as an older tunempi left it, for the migration tests.

Built from the schema's own history (tunempi.store.schema.MIGRATIONS keeps every released migration, never
edited): the first `version` migrations applied and that version recorded, as `migrate` did when
SCHEMA_VERSION was `version`. Rows go in as SQL, the columns that version had: today's `ResultStore.add`
writes columns an old version lacks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from tunempi.store.results import Measurement
from tunempi.store.schema import MIGRATIONS

#: One statement to run in the old database: SQL alone or SQL with its parameters.
Statement = str | tuple[str, Sequence[object]]


def store_at_version(path: Path, version: int, *rows: Statement) -> Path:
    """Create the database `path` at schema `version` (1 .. len(MIGRATIONS) - 1) and run `rows` in it."""
    if not 1 <= version < len(MIGRATIONS):
        raise ValueError(f"an old schema version is 1 .. {len(MIGRATIONS) - 1}, not {version}")
    if path.exists():
        raise ValueError(f"{path} exists: an old database is built from nothing")
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for statements in MIGRATIONS[:version]:
                for statement in statements:
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            for row in rows:
                sql, params = (row, ()) if isinstance(row, str) else row
                conn.execute(sql, tuple(params))
    finally:
        conn.close()
    return path


def measurement_row(collective: str, algorithm: str, **columns: object) -> tuple[str, tuple[object, ...]]:
    """An INSERT of one measurement with the columns every version has (version 1's); `columns` override or
    add to them (e.g. median_us=5.0)."""
    values: dict[str, object] = dict(
        library_fingerprint="fp", library="mpich-9.9", collective=collective, algorithm=algorithm, ranks=2,
        nodes=1, ppn=2, msg_bytes=1024, run=0, status="ok", timestamp="2026-11-22T01:00:00Z")
    values.update(columns)
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    return f"INSERT INTO measurements ({names}) VALUES ({marks})", tuple(values.values())


def nb_measurement(fingerprint: str, collective: str = "iallreduce", algorithm: str = "default",
                   msg_bytes: int = 1024, **kw: object) -> Measurement:
    """A stored point of today's schema at 2 ranks (MPICH 5.0.2, median 10 us), `kw` overriding any field."""
    values: dict = {"library_fingerprint": fingerprint, "library": "mpich-5.0.2", "collective": collective,
                    "algorithm": algorithm, "ranks": 2, "msg_bytes": msg_bytes, "median_us": 10.0,
                    "min_us": 9.0, "p90_us": 11.0, "timestamp": "2026-11-28T12:00:00Z"}
    values.update(kw)
    return Measurement(**values)
