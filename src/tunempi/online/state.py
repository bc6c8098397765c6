"""The online-tuning state directory: configuration, probabilities, their history, and the runs' records.

```
DIR/state.json                   configuration, the library it belongs to, the algorithms and how each
                                 is selected (MPI_T writes), batch and run counters
DIR/probabilities.json           the probabilities runs draw from (with the estimates behind them)
DIR/history/batch-NNNN.json      the probabilities batch NNNN ran with (batch 0: uniform)
DIR/runs/batch-NNNN/run-NNNNNN.csv   records written by the interposer at MPI_Finalize
DIR/runs/batch-NNNN/run-NNNNNN.json  what ran: command, exit status, duration, fingerprint
DIR/runs/batch-NNNN/run-NNNNNN.table the table that run's interposer read
```

A state directory belongs to ONE library (its fingerprint): runs with another library are refused, and
records carrying another fingerprint are never mixed in (skipped with a warning). A missing or corrupt
probability file means uniform probabilities, with a warning.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tunempi.errors import UsageError
from tunempi.online.cells import DEFAULT_BOUNDS, SizeRangeCell, SizeRanges

_log = logging.getLogger(__name__)

STATE_SCHEMA = "tunempi-online-state"
PROBABILITIES_SCHEMA = "tunempi-online-probabilities"
TABLE_HEADER = "tunempi-online-table 2"
RECORDS_HEADER = "# tunempi-online-records 1"
DEFAULT_STATE_DIR = "tunempi-online"

DEFAULT_COLLECTIVES: tuple[str, ...] = ("allreduce", "bcast", "allgather", "alltoall", "reduce", "barrier")


@dataclass(frozen=True)
class AlgorithmSwitch:
    """One algorithm of a collective and the MPI_T writes that select it ("orig": the value at start)."""

    name: str
    writes: tuple[tuple[str, int | str], ...]
    ranks_only: int = 0  # > 0: only usable on communicators of exactly this size
    #: what a call must be like for this algorithm (mpi.restrictions.online_mask): the interposer draws
    #: it only for calls that meet every bit
    requires: int = 0


@dataclass(frozen=True)
class CollectiveSwitch:
    collective: str
    needs_new_communicator: bool
    algorithms: tuple[AlgorithmSwitch, ...]  # algorithms[0] is the library's default

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.algorithms]


@dataclass
class OnlineConfig:
    """What the user configures (flags of `tunempi online run` / `update` on first use)."""

    collectives: list[str] = field(default_factory=lambda: list(DEFAULT_COLLECTIVES))
    bounds: list[int] = field(default_factory=lambda: list(DEFAULT_BOUNDS))
    layouts: list[tuple[int, int, int]] = field(default_factory=list)  # cells to predict besides observed
    min_probability: float = 0.03  # the paper's floor for losers
    # Floor of a SETTLED loser: significantly slower than the cell's leader in the runs that drew both
    # (update.settled_losers). Lower than the paper's, so exploring costs less once the runs have decided;
    # still drawn, so a changed situation is noticed. Never above min_probability (the lower one holds);
    # equal to it: the paper's behaviour.
    settled_probability: float = 0.01
    max_probability: float = 0.94
    sharpness: float = 8.0  # weight of an algorithm = (best time / its time) ** sharpness
    batch_runs: int = 10
    max_records: int = 10000
    record_ranks: str = "0"  # "all" or a comma list of world ranks
    min_samples: int = 5  # a cell's measured mean is trusted from this many records on
    trim: float = 0.0  # estimates may leave out this fraction of the slowest calls (see update.py: 0 by default)
    estimator: str = "run_median"  # expected time per call: "run_median" (of per-run means) or "mean" (update.py)
    seed: int = 1
    #: What the application does with its non-blocking collectives, from its profile (`online run
    #: --from-profile`; profile/nonblocking.py): the objective that fits ("time", "latency"; "": no profile or not
    #: known) and each profile row's computation between start and wait (tune.objective.ApplicationComputation's
    #: fields). A record runs from the start to the completing wait, i.e. start + that computation + wait: the
    #: same objective measured in the application itself; `online best` records it in its manifest for verify.
    objective: str = ""
    objective_from: str = ""
    computations: list[dict] = field(default_factory=list)

    def check(self) -> None:
        if not 0 <= self.min_probability < 1 or not 0 < self.max_probability <= 1:
            raise UsageError("probability bounds must satisfy 0 <= min < 1 and 0 < max <= 1")
        if self.min_probability > self.max_probability:
            raise UsageError(f"min probability {self.min_probability} is above max {self.max_probability}")
        if not 0 <= self.settled_probability < 1:
            raise UsageError(f"settled probability {self.settled_probability} must be in [0, 1)")
        if self.estimator not in ("run_median", "mean"):
            raise UsageError(f"estimator {self.estimator!r}; valid: run_median, mean")
        if not 0 <= self.trim < 0.5:
            raise UsageError(f"trim {self.trim} must be in [0, 0.5)")
        if self.batch_runs < 1 or self.max_records < 0 or self.min_samples < 1:
            raise UsageError("batch runs and min samples must be >= 1, max records >= 0")
        if self.record_ranks != "all":
            try:
                [int(r) for r in self.record_ranks.split(",")]
            except ValueError as exc:
                raise UsageError(f"record ranks {self.record_ranks!r}: valid: all, or a list like 0,4") from exc
        SizeRanges(tuple(self.bounds))

    @property
    def sizes(self) -> SizeRanges:
        return SizeRanges(tuple(self.bounds))


def uniform(names: Sequence[str]) -> dict[str, float]:
    return {name: 1.0 / len(names) for name in names}


@dataclass
class Probabilities:
    """Per-cell probabilities (cells not listed draw uniformly) and the estimates (ns) behind them."""

    batch: int = 0
    cells: dict[str, dict[str, float]] = field(default_factory=dict)
    estimates: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: dict[str, dict[str, int]] = field(default_factory=dict)
    # Measured cells: each algorithm against `default` in the runs that drew both (update.paired_evidence):
    # {"runs": n, "ratio": median of the per-run ratios, "p": one-sided p-value of "faster"}.
    versus_default: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"schema": PROBABILITIES_SCHEMA, "batch": self.batch, "cells": self.cells,
                "estimates": self.estimates, "samples": self.samples, "versus_default": self.versus_default}

    @classmethod
    def from_json(cls, data: Mapping) -> Probabilities:
        if data.get("schema") != PROBABILITIES_SCHEMA:
            raise ValueError(f"schema is {data.get('schema')!r}, not {PROBABILITIES_SCHEMA}")
        cells = {str(k): {str(a): float(p) for a, p in v.items()} for k, v in data["cells"].items()}
        for key, probs in cells.items():
            SizeRangeCell.from_key(key)
            total = sum(probs.values())
            if not probs or any(not p >= 0 for p in probs.values()) or abs(total - 1) > 1e-6:
                raise ValueError(f"cell {key}: probabilities do not sum to 1 ({total})")
        return cls(int(data["batch"]), cells,
                   {str(k): {str(a): float(t) for a, t in v.items()} for k, v in data.get("estimates", {}).items()},
                   {str(k): {str(a): int(n) for a, n in v.items()} for k, v in data.get("samples", {}).items()},
                   {str(k): {str(a): {str(f): float(x) for f, x in e.items()} for a, e in v.items()}
                    for k, v in data.get("versus_default", {}).items()})


@dataclass(frozen=True)
class Record:
    """One recorded call (one rank's view): what ran where, and how long it took."""

    rank: int
    seq: int
    stream: str
    collective: str
    msg_bytes: int
    ranks: int
    nodes: int
    ppn: int
    algorithm: str
    start_ns: int
    end_ns: int
    #: the (start) call's own time, and for a non-blocking collective the whole time of the waits and tests that
    #: named its request (records written before 2026-11-28: None)
    call_ns: int | None = None
    blocked_ns: int | None = None

    @property
    def time_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def window_ns(self) -> int | None:
        """A non-blocking call's computation between start and wait: start to completion - the start call - the
        waits and tests naming it (>= 0); None where not recorded."""
        if self.call_ns is None or self.blocked_ns is None:
            return None
        return max(0, self.time_ns - self.call_ns - self.blocked_ns)


@dataclass(frozen=True)
class RecordFile:
    path: Path
    header: dict[str, str]
    records: tuple[Record, ...]

    @property
    def fingerprint(self) -> str:
        return self.header.get("fingerprint", "")


def read_records(path: Path | str) -> RecordFile:
    """A records file written by the interposer; ValueError when it is not one."""
    path = Path(path)
    header: dict[str, str] = {}
    rows: list[str] = []
    with path.open() as f:
        first = f.readline().rstrip("\n")
        if first != RECORDS_HEADER:
            raise ValueError(f"{path}: not a tunempi online records file")
        for line in f:
            if line.startswith("# "):
                key, _, value = line[2:].rstrip("\n").partition(" ")
                header[key] = value
            else:
                rows.append(line)
    records = []
    for row in csv.DictReader(rows):
        records.append(Record(int(row["rank"]), int(row["seq"]), row["stream"], row["collective"],
                              int(row["msg_bytes"]), int(row["ranks"]), int(row["nodes"]), int(row["ppn"]),
                              row["algorithm"], int(row["start_ns"]), int(row["end_ns"]),
                              int(row["call_ns"]) if row.get("call_ns") else None,
                              int(row["blocked_ns"]) if row.get("blocked_ns") else None))
    return RecordFile(path, header, tuple(records))


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


class OnlineState:
    """One state directory (see the module docstring)."""

    def __init__(self, directory: Path | str) -> None:
        self.dir = Path(directory)

    # ------------------------------------------------------------------ state.json
    @property
    def state_path(self) -> Path:
        return self.dir / "state.json"

    def exists(self) -> bool:
        return self.state_path.exists()

    def create(self, config: OnlineConfig, fingerprint: str, library_name: str,
               switches: Iterable[CollectiveSwitch]) -> None:
        config.check()
        data = {
            "schema": STATE_SCHEMA, "fingerprint": fingerprint, "library": library_name,
            "config": asdict(config),
            "collectives": {s.collective: {"needs_new_communicator": s.needs_new_communicator,
                                           "algorithms": [asdict(a) for a in s.algorithms]}
                            for s in switches},
            "batch": 0, "runs_in_batch": 0, "next_run": 1,
        }
        _write_json(self.state_path, data)
        _write_json(self.history_path(0), Probabilities(0).to_json())

    def _load(self) -> dict:
        if not self.state_path.exists():
            raise UsageError(f"{self.dir} is not an online state directory (no state.json); "
                             "`tunempi online run --state DIR -- ...` creates one")
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"{self.state_path} is unreadable: {exc}") from exc
        if data.get("schema") != STATE_SCHEMA:
            raise UsageError(f"{self.state_path} is not a {STATE_SCHEMA} file")
        return data

    def _save(self, data: dict) -> None:
        _write_json(self.state_path, data)

    @property
    def fingerprint(self) -> str:
        return self._load()["fingerprint"]

    @property
    def library_name(self) -> str:
        return self._load()["library"]

    @property
    def config(self) -> OnlineConfig:
        raw = dict(self._load()["config"])
        raw["layouts"] = [tuple(layout) for layout in raw.get("layouts", [])]
        return OnlineConfig(**raw)

    def set_config(self, config: OnlineConfig) -> None:
        config.check()
        data = self._load()
        data["config"] = asdict(config)
        self._save(data)

    @property
    def switches(self) -> dict[str, CollectiveSwitch]:
        out = {}
        for collective, entry in self._load()["collectives"].items():
            algorithms = tuple(AlgorithmSwitch(a["name"], tuple((w[0], w[1]) for w in a["writes"]),
                                               int(a.get("ranks_only", 0)), int(a.get("requires", 0)))
                               for a in entry["algorithms"])
            out[collective] = CollectiveSwitch(collective, bool(entry["needs_new_communicator"]), algorithms)
        return out

    @property
    def batch(self) -> int:
        return int(self._load()["batch"])

    @property
    def runs_in_batch(self) -> int:
        return int(self._load()["runs_in_batch"])

    def take_run_number(self) -> tuple[int, int]:
        """(batch, run number) for a new run; counts it in the batch."""
        data = self._load()
        run = int(data["next_run"])
        data["next_run"] = run + 1
        data["runs_in_batch"] = int(data["runs_in_batch"]) + 1
        self._save(data)
        return int(data["batch"]), run

    def start_batch(self, batch: int) -> None:
        data = self._load()
        data["batch"] = batch
        data["runs_in_batch"] = 0
        self._save(data)

    def check_library(self, fingerprint: str, library_name: str) -> None:
        mine = self.fingerprint
        if mine != fingerprint:
            raise UsageError(f"{self.dir} holds online tuning for {self.library_name} ({mine}), not for "
                             f"{library_name} ({fingerprint}); records of different libraries are never "
                             "mixed: use another --state directory")

    # ---------------------------------------------------------------- probabilities
    @property
    def probabilities_path(self) -> Path:
        return self.dir / "probabilities.json"

    def history_path(self, batch: int) -> Path:
        return self.dir / "history" / f"batch-{batch:04d}.json"

    def probabilities(self, *, warn: bool = True) -> Probabilities:
        """The current probabilities; uniform (with a warning) when the file is missing or corrupt."""
        path = self.probabilities_path
        batch = self.batch if self.exists() else 0
        if not path.exists():
            if batch > 0 and warn:
                _log.warning("%s is missing: drawing uniformly", path)
            return Probabilities(batch)
        try:
            probabilities = Probabilities.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            if warn:
                _log.warning("%s is corrupt (%s): drawing uniformly", path, exc)
            return Probabilities(batch)
        switches = self.switches
        for key, probs in list(probabilities.cells.items()):
            cell = SizeRangeCell.from_key(key)
            known = switches.get(cell.collective)
            if known is None or set(probs) != set(known.names):
                if warn:
                    _log.warning("%s: cell %s does not match the state's algorithms: drawing uniformly",
                                 path, key)
                del probabilities.cells[key]
        return probabilities

    def save_probabilities(self, probabilities: Probabilities) -> None:
        _write_json(self.probabilities_path, probabilities.to_json())
        _write_json(self.history_path(probabilities.batch), probabilities.to_json())

    def history(self) -> list[Probabilities]:
        """Every batch's probabilities, oldest first (unreadable ones are skipped with a warning)."""
        out = []
        for path in sorted((self.dir / "history").glob("batch-*.json")):
            try:
                out.append(Probabilities.from_json(json.loads(path.read_text())))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                _log.warning("skipping %s: %s", path, exc)
        return out

    # ---------------------------------------------------------------------- runs
    def run_dir(self, batch: int) -> Path:
        return self.dir / "runs" / f"batch-{batch:04d}"

    def records_path(self, batch: int, run: int) -> Path:
        return self.run_dir(batch) / f"run-{run:06d}.csv"

    def record_files(self, batches: Iterable[int] | None = None) -> list[RecordFile]:
        """Readable record files of this state's library; other libraries' and corrupt files are skipped."""
        fingerprint = self.fingerprint
        paths = sorted((self.dir / "runs").glob("batch-*/run-*.csv"))
        if batches is not None:
            wanted = {f"batch-{b:04d}" for b in batches}
            paths = [p for p in paths if p.parent.name in wanted]
        files, foreign = [], 0
        for path in paths:
            try:
                record_file = read_records(path)
            except (OSError, ValueError, KeyError) as exc:
                _log.warning("skipping unreadable records %s: %s", path, exc)
                continue
            if record_file.fingerprint != fingerprint:
                foreign += 1
                continue
            files.append(record_file)
        if foreign:
            _log.warning("skipped %d record file(s) of another library than %s (%s)", foreign,
                         self.library_name, fingerprint)
        return files

    # ---------------------------------------------------------------------- table
    @property
    def table_path(self) -> Path:
        return self.dir / "table.txt"

    def write_table(self, run: int, batch: int, probabilities: Probabilities | None = None, *,
                    path: Path | None = None, refusals: Sequence[str] = (),
                    strict: tuple[str, int] | None = None) -> Path:
        """Write the interposer's table for one run (format: docs/online.md) to `path` (default table.txt).
        `refusals`: texts of the library's error string that mean a drawn algorithm refused the call's
        arguments (the adapter's `refusal_messages`): only such an error is rerun as the library's choice.
        `strict`: the (cvar, value) write of the library's strict selection among the algorithms' writes,
        which the interposer leaves out on communicators spanning several nodes."""
        config = self.config
        switches = self.switches
        probabilities = probabilities if probabilities is not None else self.probabilities()
        cvars: list[str] = []
        for switch in switches.values():
            for algorithm in switch.algorithms:
                for cvar, _ in algorithm.writes:
                    if cvar not in cvars:
                        cvars.append(cvar)
        lines = [TABLE_HEADER, f"fingerprint {self.fingerprint}", f"seed {config.seed & ((1 << 64) - 1)}",
                 f"run {run}", f"batch {batch}", f"max_records {config.max_records}",
                 f"record_ranks {config.record_ranks}",
                 f"bounds {len(config.bounds)} {' '.join(str(b) for b in config.bounds)}"]
        for text in refusals:
            if not text.strip() or "\n" in text or len(text) >= 96:
                raise ValueError(f"refusal text {text!r}: one line of 1-95 characters")
            lines.append(f"refusal {text.strip()}")
        lines += [f"cvar {name}" for name in cvars]
        if strict is not None and strict[0] in cvars:
            lines.append(f"strict {cvars.index(strict[0])} {int(strict[1])}")
        for switch in switches.values():
            lines.append(f"coll {switch.collective} {int(switch.needs_new_communicator)} {len(switch.algorithms)}")
            for algorithm in switch.algorithms:
                writes = " ".join(f"{cvars.index(cvar)} {value}" for cvar, value in algorithm.writes)
                lines.append(f"alg {algorithm.name} {algorithm.ranks_only} {algorithm.requires} "
                             f"{len(algorithm.writes)} {writes}".rstrip())
        for key, probs in sorted(probabilities.cells.items()):
            cell = SizeRangeCell.from_key(key)
            cell_switch = switches.get(cell.collective)
            if cell_switch is None:
                continue
            values = " ".join(f"{probs[name]:.9g}" for name in cell_switch.names)
            lines.append(f"cell {cell.collective} {cell.ranks} {cell.nodes} {cell.ppn} {cell.size_index} {values}")
        lines.append("end")
        path = path or self.table_path
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, path)
        return path
