"""The trial journal: a JSON-lines file that makes an interrupted search resumable, losing no trial.

Line 1 is a header (schema version, space, strategy, seed, command, metric); each finished trial and
each verification run is appended as one line and flushed to disk (fsync) before the next run starts.
Resuming replays the trials through a fresh strategy with the same seed (`SearchStrategy.replay`),
which reproduces its state exactly, then continues. A line cut short by a crash is dropped (the run
it described had not been recorded) and the file truncated back to the last complete line.

The journal is the search's own record until the shared store (store/, SQLite) takes trial records;
its lines are the `Trial.to_dict()` records, so moving them is a copy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunempi.errors import UsageError
from tunempi.search.base import Trial
from tunempi.search.verify import VerificationRun

SCHEMA = 1
# Header fields that must match for a journal to be resumed.
RESUME_KEYS = ("space", "strategy", "seed", "command", "metric")


class TrialJournal:
    def __init__(self, path: Path, header: dict[str, Any], trials: list[Trial],
                 verification: list[tuple[dict[str, Any], VerificationRun]]) -> None:
        self.path = path
        self.header = header
        self.trials = trials
        self.verification = verification

    @classmethod
    def open(cls, path: str | Path, header: Mapping[str, Any]) -> TrialJournal:
        """Open (resume) or create the journal; a journal of another search raises UsageError."""
        p = Path(path)
        wanted = {"kind": "header", "schema": SCHEMA, **header}
        if not p.exists() or p.stat().st_size == 0:
            p.parent.mkdir(parents=True, exist_ok=True)
            with p.open("w") as fh:
                fh.write(json.dumps(wanted, sort_keys=True) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            return cls(p, wanted, [], [])
        raw = p.read_bytes()
        complete = raw[: raw.rfind(b"\n") + 1]
        if len(complete) != len(raw):
            with p.open("r+b") as fh:  # drop a line cut short by a crash
                fh.truncate(len(complete))
        lines = complete.decode().splitlines()
        try:
            found = json.loads(lines[0])
        except (json.JSONDecodeError, IndexError):
            raise UsageError(f"{p}:1: not a tunempi search journal (bad header)") from None
        if found.get("kind") != "header" or found.get("schema") != SCHEMA:
            raise UsageError(f"{p}:1: not a tunempi search journal of schema {SCHEMA}")
        for key in RESUME_KEYS:
            if found.get(key) != wanted.get(key):
                raise UsageError(
                    f"{p} records another search ({key}: {found.get(key)!r}, now {wanted.get(key)!r}); "
                    "rerun with the same settings to resume, or choose another --out directory"
                )
        trials: list[Trial] = []
        verification: list[tuple[dict[str, Any], VerificationRun]] = []
        for lineno, line in enumerate(lines[1:], start=2):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{p}:{lineno}: corrupt journal line: {exc.msg}") from None
            if record.get("kind") == "trial":
                trials.append(Trial.from_dict(record))
            elif record.get("kind") == "verify":
                trial = Trial.from_dict({**record, "number": record["pair"]})
                verification.append((dict(record["params"]),
                                     VerificationRun(record["role"], int(record["pair"]), trial.result)))
            else:
                raise UsageError(f"{p}:{lineno}: unknown record kind {record.get('kind')!r}")
        return cls(p, found, trials, verification)

    def _append(self, record: Mapping[str, Any]) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def append_trial(self, trial: Trial) -> None:
        self._append({"kind": "trial", **trial.to_dict()})
        self.trials.append(trial)

    def append_verification(self, params: Mapping[str, Any], run: VerificationRun) -> None:
        record = {"kind": "verify", "role": run.role, "pair": run.pair,
                  **{k: v for k, v in Trial(run.pair, dict(params), run.result).to_dict().items() if k != "number"}}
        self._append(record)
        self.verification.append((dict(params), run))
