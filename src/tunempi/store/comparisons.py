"""A/B comparisons of an application in the results database (tables `comparisons` and `comparison_runs`).

A comparison is identified by `comparison_id`, a hash of its header: everything that must be the same for
a rerun to continue it (the command, the variants and what they set, the figure of merit, the result
check, the seed of the run order). Each launch is one row, written in its own transaction as soon as it
ends: an interrupted comparison loses nothing that finished, and the same command continues it.

Rows: block (the round in which every variant ran once, in a shuffled order), variant (its name),
position (its place in the block's order), status ok/failed/timeout with a reason, value (the figure
of merit, None unless ok), wall_s, result (what the result check extracted, as text), launch_argv and
env as JSON, UTC timestamp.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tunempi.errors import UsageError
from tunempi.store.results import STATUSES, ResultStore, utc_timestamp
from tunempi.store.searches import search_id_of

#: The identity of a comparison: the same canonical-JSON hash of its header as a search's.
comparison_id_of = search_id_of


@dataclass(frozen=True)
class ComparisonRun:
    """One recorded launch of one variant."""

    block: int
    variant: str
    position: int
    status: str
    value: float | None = None
    wall_s: float | None = None
    result: str = ""
    reason: str = ""
    launch_argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    timestamp: str = field(default_factory=utc_timestamp)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise UsageError(f"unknown status {self.status!r}; valid: {', '.join(STATUSES)}")
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "launch_argv", tuple(self.launch_argv))

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class ComparisonLog:
    """The runs of one comparison in a ResultStore; created on first use, continued when it exists."""

    def __init__(self, store: ResultStore, header: Mapping[str, Any]) -> None:
        self.store = store
        self.header = dict(header)
        self.comparison_id = comparison_id_of(self.header)
        with store.transaction() as conn:
            conn.execute(
                "INSERT INTO comparisons (comparison_id, header, created) VALUES (?, ?, ?) "
                "ON CONFLICT (comparison_id) DO NOTHING",
                (self.comparison_id, json.dumps(self.header, sort_keys=True, default=str), utc_timestamp()),
            )

    def runs(self) -> list[ComparisonRun]:
        """Recorded runs in the order they were written."""
        rows = self.store.fetch_all("SELECT * FROM comparison_runs WHERE comparison_id = ? ORDER BY id",
                                    [self.comparison_id])
        return [
            ComparisonRun(block=row["block"], variant=row["variant"], position=row["position"],
                          status=row["status"], value=row["value"], wall_s=row["wall_s"], result=row["result"],
                          reason=row["reason"], launch_argv=tuple(json.loads(row["launch_argv"])),
                          env=json.loads(row["env"]), timestamp=row["timestamp"])
            for row in rows
        ]

    def clear(self) -> int:
        """Forget every recorded run of this comparison (`compare --restart`); returns how many."""
        with self.store.transaction() as conn:
            return conn.execute("DELETE FROM comparison_runs WHERE comparison_id = ?", (self.comparison_id,)).rowcount

    def add(self, run: ComparisonRun) -> None:
        """Record one run (one transaction, durable before it returns)."""
        with self.store.transaction() as conn:
            conn.execute(
                "INSERT INTO comparison_runs (comparison_id, block, variant, position, status, value, wall_s, "
                "result, reason, launch_argv, env, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (comparison_id, block, variant) DO UPDATE SET position = excluded.position, "
                "status = excluded.status, value = excluded.value, wall_s = excluded.wall_s, "
                "result = excluded.result, reason = excluded.reason, launch_argv = excluded.launch_argv, "
                "env = excluded.env, timestamp = excluded.timestamp",
                (self.comparison_id, run.block, run.variant, run.position, run.status, run.value, run.wall_s,
                 run.result, run.reason, json.dumps(list(run.launch_argv)),
                 json.dumps(dict(run.env), sort_keys=True), run.timestamp),
            )


def list_comparisons(store: ResultStore) -> list[tuple[str, dict[str, Any], int]]:
    """(comparison_id, header, number of runs) of every comparison in the store, oldest first."""
    rows = store.fetch_all(
        "SELECT c.comparison_id, c.header, COUNT(r.id) FROM comparisons c LEFT JOIN comparison_runs r "
        "ON r.comparison_id = c.comparison_id GROUP BY c.comparison_id ORDER BY c.rowid"
    )
    return [(str(r[0]), json.loads(r[1]), int(r[2])) for r in rows]
