"""Run-time parameter searches in the results database (tables `searches` and `search_runs`).

A search is identified by `search_id`, a hash of its header: everything that must be the same for a
rerun to continue it (the space, strategy, seed, command, metric, library). Rerunning the same search
finds its runs and continues; a search with any other setting gets its own id, so many searches share
one database. Each run (a trial, or a verification run against the defaults) is one row written in its
own transaction before the next run starts: an interrupted search loses nothing that finished.

Rows: kind ('trial' | 'verify'), number (trial number, or verification pair), role ('' for trials,
'best' | 'default' for verification), params/metrics/env/launch_argv as JSON, status ok/failed/timeout
with a reason, value (the objective, None unless ok), duration_s, UTC timestamp.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tunempi.errors import UsageError
from tunempi.store.results import STATUSES, ResultStore, utc_timestamp

RUN_KINDS: tuple[str, ...] = ("trial", "verify")


def search_id_of(header: Mapping[str, Any]) -> str:
    """The identity of a search: a hash of its canonical JSON header."""
    return hashlib.sha256(json.dumps(header, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SearchRun:
    """One recorded run of a search."""

    kind: str
    number: int
    params: Mapping[str, Any]
    status: str
    value: float | None = None
    reason: str = ""
    role: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    duration_s: float | None = None
    launch_argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    timestamp: str = field(default_factory=utc_timestamp)

    def __post_init__(self) -> None:
        if self.kind not in RUN_KINDS:
            raise UsageError(f"unknown search run kind {self.kind!r}; valid: {', '.join(RUN_KINDS)}")
        if self.status not in STATUSES:
            raise UsageError(f"unknown status {self.status!r}; valid: {', '.join(STATUSES)}")
        for name in ("params", "metrics", "env"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "launch_argv", tuple(self.launch_argv))


class SearchLog:
    """The runs of one search in a ResultStore; created on first use, continued when it exists."""

    def __init__(self, store: ResultStore, header: Mapping[str, Any], library_fingerprint: str = "") -> None:
        self.store = store
        self.header = dict(header)
        self.search_id = search_id_of(self.header)
        with store.transaction() as conn:
            conn.execute(
                "INSERT INTO searches (search_id, header, library_fingerprint, created) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (search_id) DO NOTHING",
                (self.search_id, json.dumps(self.header, sort_keys=True, default=str), library_fingerprint,
                 utc_timestamp()),
            )

    def runs(self, kind: str | None = None) -> list[SearchRun]:
        """Recorded runs in the order they were written."""
        sql = "SELECT * FROM search_runs WHERE search_id = ?"
        params: list[Any] = [self.search_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        rows = self.store.fetch_all(sql + " ORDER BY id", params)
        return [
            SearchRun(
                kind=row["kind"], number=row["number"], params=json.loads(row["params"]), status=row["status"],
                value=row["value"], reason=row["reason"], role=row["role"], metrics=json.loads(row["metrics"]),
                duration_s=row["duration_s"], launch_argv=tuple(json.loads(row["launch_argv"])),
                env=json.loads(row["env"]), timestamp=row["timestamp"],
            )
            for row in rows
        ]

    def add(self, run: SearchRun) -> None:
        """Record one run (one transaction, durable before it returns)."""
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO search_runs (search_id, kind, number, role, params, status, value, reason, metrics, "
                "duration_s, launch_argv, env, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.search_id, run.kind, run.number, run.role, json.dumps(dict(run.params), sort_keys=True),
                 run.status, run.value, run.reason, json.dumps(dict(run.metrics), sort_keys=True), run.duration_s,
                 json.dumps(list(run.launch_argv)), json.dumps(dict(run.env), sort_keys=True), run.timestamp),
            )


def list_searches(store: ResultStore) -> list[tuple[str, dict[str, Any], int]]:
    """(search_id, header, number of runs) of every search in the store, oldest first."""
    rows = store.fetch_all(
        "SELECT s.search_id, s.header, COUNT(r.id) FROM searches s LEFT JOIN search_runs r "
        "ON r.search_id = s.search_id GROUP BY s.search_id ORDER BY s.rowid"
    )
    return [(str(r[0]), json.loads(r[1]), int(r[2])) for r in rows]
