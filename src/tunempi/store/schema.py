"""The results database's schema: a version number and the ordered migrations that reach it.

A database records the version it is at in `schema_version` (one row). Opening a database applies the
migrations it is missing, in order, inside one `BEGIN IMMEDIATE` transaction, so two processes that open
a fresh file at the same moment do not both migrate it. A database newer than this code is refused
rather than guessed at.

Rules for adding a migration: append a new (version, statements) entry, never edit a released one; each
migration must take the previous schema to the next one with no data loss.
"""

from __future__ import annotations

import sqlite3

from tunempi.errors import TunempiError
from tunempi.store.transaction import write_transaction

#: The natural key of a measurement (see docs/store.md): one row per repetition of one point of one
#: library on one system. Re-importing a dataset or re-measuring a point updates that row, never adds one.
NATURAL_KEY: tuple[str, ...] = (
    "library_fingerprint", "system", "collective", "algorithm", "ranks", "nodes", "ppn", "msg_bytes", "run",
    "distribution", "objective",
)

_V1 = (
    """
    CREATE TABLE measurements (
        id                  INTEGER PRIMARY KEY,
        library_fingerprint TEXT    NOT NULL,
        library             TEXT    NOT NULL,
        system              TEXT    NOT NULL DEFAULT '',
        collective          TEXT    NOT NULL,
        algorithm           TEXT    NOT NULL,
        ranks               INTEGER NOT NULL CHECK (ranks > 0),
        nodes               INTEGER NOT NULL CHECK (nodes > 0),
        ppn                 INTEGER NOT NULL CHECK (ppn > 0),
        msg_bytes           INTEGER NOT NULL CHECK (msg_bytes >= 0),
        run                 INTEGER NOT NULL CHECK (run >= 0),
        status              TEXT    NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
        reason              TEXT    NOT NULL DEFAULT '',
        median_us           REAL,
        min_us              REAL,
        p90_us              REAL,
        mean_us             REAL,
        ci_low_us           REAL,
        ci_high_us          REAL,
        iterations          INTEGER,
        errors              INTEGER NOT NULL DEFAULT 0,
        hosts               TEXT    NOT NULL DEFAULT '[]',
        launch_argv         TEXT    NOT NULL DEFAULT '[]',
        env                 TEXT    NOT NULL DEFAULT '{}',
        timestamp           TEXT    NOT NULL,
        job_id              TEXT    NOT NULL DEFAULT ''
    )
    """,
    "CREATE UNIQUE INDEX measurements_natural_key ON measurements (library_fingerprint, system, collective, "
    "algorithm, ranks, nodes, ppn, msg_bytes, run)",
    # Queries that do not start from a library (e.g. "every allreduce at 64 ranks") use this one.
    "CREATE INDEX measurements_point ON measurements (collective, ranks, msg_bytes)",
)

# Version 2: run-time parameter searches (tunempi search). One row per search (its identity is a hash of
# what must match to resume it), one row per run: a trial of the search or a verification run.
_V2 = (
    """
    CREATE TABLE searches (
        search_id           TEXT    PRIMARY KEY,
        header              TEXT    NOT NULL,
        library_fingerprint TEXT    NOT NULL DEFAULT '',
        created             TEXT    NOT NULL
    )
    """,
    """
    CREATE TABLE search_runs (
        id          INTEGER PRIMARY KEY,
        search_id   TEXT    NOT NULL REFERENCES searches (search_id),
        kind        TEXT    NOT NULL CHECK (kind IN ('trial', 'verify')),
        number      INTEGER NOT NULL CHECK (number >= 0),
        role        TEXT    NOT NULL DEFAULT '',
        params      TEXT    NOT NULL,
        status      TEXT    NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
        value       REAL,
        reason      TEXT    NOT NULL DEFAULT '',
        metrics     TEXT    NOT NULL DEFAULT '{}',
        duration_s  REAL,
        launch_argv TEXT    NOT NULL DEFAULT '[]',
        env         TEXT    NOT NULL DEFAULT '{}',
        timestamp   TEXT    NOT NULL
    )
    """,
    "CREATE UNIQUE INDEX search_runs_key ON search_runs (search_id, kind, number, role)",
)

# Version 3: A/B comparisons of an application (tunempi compare). One row per comparison (its identity is
# a hash of what must match to resume it), one row per launch of one variant in one block.
_V3 = (
    """
    CREATE TABLE comparisons (
        comparison_id TEXT PRIMARY KEY,
        header        TEXT NOT NULL,
        created       TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE comparison_runs (
        id            INTEGER PRIMARY KEY,
        comparison_id TEXT    NOT NULL REFERENCES comparisons (comparison_id),
        block         INTEGER NOT NULL CHECK (block >= 0),
        variant       TEXT    NOT NULL,
        position      INTEGER NOT NULL CHECK (position >= 0),
        status        TEXT    NOT NULL CHECK (status IN ('ok', 'failed', 'timeout')),
        value         REAL,
        wall_s        REAL,
        result        TEXT    NOT NULL DEFAULT '',
        reason        TEXT    NOT NULL DEFAULT '',
        launch_argv   TEXT    NOT NULL DEFAULT '[]',
        env           TEXT    NOT NULL DEFAULT '{}',
        timestamp     TEXT    NOT NULL
    )
    """,
    "CREATE UNIQUE INDEX comparison_runs_key ON comparison_runs (comparison_id, block, variant)",
)

# Version 4: how a vector collective's blocks differ between ranks (bench/c/engine.h, tm_distribution: uniform,
# skewed, sparse), part of a point's natural key: the same alltoallv size measured with equal and with skewed
# counts is two points. Rows from before were all uniform (the engine measured no vector collective).
_V4 = (
    "ALTER TABLE measurements ADD COLUMN distribution TEXT NOT NULL DEFAULT 'uniform'",
    "DROP INDEX measurements_natural_key",
    f"CREATE UNIQUE INDEX measurements_natural_key ON measurements ({', '.join(NATURAL_KEY[:-1])})",
)

# Version 5: what a non-blocking collective's point measured (collectives.OBJECTIVES: latency, start + wait;
# time, start + a computation of `compute_us` + wait; overlap, the time not hidden behind a computation as long
# as its latency), part of the natural key: the same iallreduce size measured for latency and for time is two
# points, and a query for one never returns the other's figures. Rows from before were all latency (the pure
# time, the only figure stored), as every blocking collective's are. `compute_us`: the computation's median
# (time only; NULL otherwise).
_V5 = (
    "ALTER TABLE measurements ADD COLUMN objective TEXT NOT NULL DEFAULT 'latency'",
    "ALTER TABLE measurements ADD COLUMN compute_us REAL",
    "DROP INDEX measurements_natural_key",
    f"CREATE UNIQUE INDEX measurements_natural_key ON measurements ({', '.join(NATURAL_KEY)})",
)

# Version 6: what a run took on the tuner's side, `run_s`: from the request sent to the engine to its reply, the
# re-measurements of a disturbed point included, an engine start not (tune/plan.py prices a layout's runs by
# it: where ranks take turns on the cores, the engine's own synchronisation costs more than the timed calls
# say); and the tune's launch block that measured it, `launch_block` (1: the exploring launch, 2...: deciding
# blocks, tune/launch_blocks.py; tune/plan.py replays the exploration on the exploring launch's runs only).
# NULL where not recorded: rows from before, bench, datasets, imports.
_V6 = (
    "ALTER TABLE measurements ADD COLUMN run_s REAL",
    "ALTER TABLE measurements ADD COLUMN launch_block INTEGER",
)

# Version 7: what each engine launch of a tune took (store/launches.py): from mpiexec to the engine's ready line,
# `start_s`, and from the quit request to the launch's end, `close_s`, per library and layout (tune/plan.py prices
# a launch of the library by them: Open MPI's took 0.17-0.22 s here where MPICH's took 0.08).
_V7 = (
    """
    CREATE TABLE engine_launches (
        id                  INTEGER PRIMARY KEY,
        library_fingerprint TEXT    NOT NULL,
        system              TEXT    NOT NULL DEFAULT '',
        ranks               INTEGER NOT NULL CHECK (ranks > 0),
        nodes               INTEGER NOT NULL CHECK (nodes > 0),
        ppn                 INTEGER NOT NULL CHECK (ppn > 0),
        start_s             REAL    NOT NULL CHECK (start_s >= 0),
        close_s             REAL    NOT NULL CHECK (close_s >= 0),
        timestamp           TEXT    NOT NULL
    )
    """,
    "CREATE INDEX engine_launches_library ON engine_launches (library_fingerprint, system)",
)

# Version 8: what each model fit of a tune's strategy took (store/fits.py): the strategy, its space's points
# (cells x candidate algorithms) and the records it fitted on, per system (tune/plan.py replays tune's guard with
# them instead of timing its own fits, so a store gives the same plan on any machine and at any moment).
_V8 = (
    """
    CREATE TABLE model_fits (
        id        INTEGER PRIMARY KEY,
        strategy  TEXT    NOT NULL,
        system    TEXT    NOT NULL DEFAULT '',
        points    INTEGER NOT NULL CHECK (points > 0),
        records   INTEGER NOT NULL CHECK (records >= 0),
        fit_s     REAL    NOT NULL CHECK (fit_s >= 0),
        timestamp TEXT    NOT NULL
    )
    """,
    "CREATE INDEX model_fits_strategy ON model_fits (strategy, system)",
)

#: Ordered migrations: MIGRATIONS[i] takes the schema from version i to version i + 1.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8)
SCHEMA_VERSION: int = len(MIGRATIONS)


def current_version(conn: sqlite3.Connection) -> int:
    """The version a database is at; 0 for an empty file."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not exists:
        return 0
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, *, path: str = "") -> int:
    """Bring the database up to SCHEMA_VERSION; returns the version it was at.

    `conn` must be in autocommit mode (isolation_level=None): the migrations run in one explicit
    transaction that takes the write lock first, so a concurrent opener waits and then sees the result.
    """
    if current_version(conn) == SCHEMA_VERSION:  # the common case: no write lock needed
        return SCHEMA_VERSION
    with write_transaction(conn):
        found = current_version(conn)
        if found > SCHEMA_VERSION:
            raise TunempiError(
                f"results database {path or '?'} has schema version {found}, newer than this tunempi "
                f"understands ({SCHEMA_VERSION}); upgrade tunempi or use another --db"
            )
        if found == 0:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        for statements in MIGRATIONS[found:]:
            for statement in statements:
                conn.execute(statement)
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
    return found
