"""The store's one way to write: a transaction that takes SQLite's write lock up front.

`BEGIN IMMEDIATE` instead of SQLite's deferred default: a deferred transaction that reads first and then
writes can fail with SQLITE_BUSY when another process wrote in between; taking the lock at the start
makes concurrent writers wait (up to the connection's busy timeout) instead. The connection must be in
autocommit mode (isolation_level=None) so that Python's sqlite3 does not open transactions of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """`with write_transaction(conn):` commits when the block ends, rolls back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
