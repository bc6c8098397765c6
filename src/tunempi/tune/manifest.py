"""The manifest of a tuning directory (`manifest.json`): what was tuned, the files, how to apply them.

Versioned JSON, one document per tuning directory, written by `tune`, updated by `verify`, read by
`run` and `report`. File variables are stored by file name and resolved against the directory when
read, so a tuning directory can be moved or copied to another machine with the same library.

Keys (version 1):
    kind, version, created, library{name, vendor, version, fingerprint, prefix}, system,
    collectives, scales[[ranks, nodes, ppn]], sizes, strategy, seed,
    run{stop_reason, wall_s, bench_s, measured, resumed, failed, launches},
    files{role: name}, env_files{VAR: name}, env{VAR: value}, env_file, needs_file,
    selection[{collective, ranks, nodes, ppn, msg_bytes, algorithm, median_us, default_us}],
    rule_sets{collective: RuleSet.to_dict()}, training_curve[{wall_s, bench_s, points, convergence,
    per_collective}], smoke[{ranks, ok, argv, points, message}], verify (null until `tunempi verify`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunempi.errors import UsageError
from tunempi.rules import RuleSet
from tunempi.space import Cell

MANIFEST_NAME = "manifest.json"
KIND = "tunempi-tuning"
VERSION = 1


@dataclass(frozen=True)
class SelectionRow:
    """One cell of the selection with what tuning measured there (None: not measured)."""

    cell: Cell
    algorithm: str
    median_us: float | None = None
    default_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.cell.to_dict(), "algorithm": self.algorithm, "median_us": self.median_us,
                "default_us": self.default_us}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelectionRow:
        return cls(Cell.from_dict(data), str(data["algorithm"]), data.get("median_us"), data.get("default_us"))


class Manifest:
    """A tuning directory's manifest (a thin wrapper over the JSON document)."""

    def __init__(self, directory: Path, data: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.data = data

    # -- reading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | Path) -> Manifest:
        directory = Path(directory)
        path = directory / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"{directory} is not a tuning directory (no {MANIFEST_NAME}); "
                             "create one with `tunempi tune --out DIR`") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} is not valid JSON: {exc}") from None
        if data.get("kind") != KIND:
            raise UsageError(f"{path} is not a tunempi tuning manifest (kind {data.get('kind')!r})")
        if int(data.get("version", 0)) > VERSION:
            raise UsageError(f"{path} has manifest version {data['version']}; this tunempi reads up to {VERSION}")
        return cls(directory, data)

    @property
    def library(self) -> dict[str, Any]:
        return dict(self.data["library"])

    def env(self) -> dict[str, str]:
        """Every variable that activates the tuning, file variables resolved against the directory."""
        env = {str(k): str(v) for k, v in self.data.get("env", {}).items()}
        for name, file in self.data.get("env_files", {}).items():
            env[str(name)] = str((self.directory / file).resolve())
        return env

    def selection(self) -> list[SelectionRow]:
        return [SelectionRow.from_dict(row) for row in self.data.get("selection", [])]

    def rule_sets(self) -> dict[str, RuleSet]:
        return {c: RuleSet.from_dict(d) for c, d in self.data.get("rule_sets", {}).items()}

    def missing_files(self) -> list[str]:
        return [name for name in self.data.get("files", {}).values() if not (self.directory / name).is_file()]

    # -- writing ------------------------------------------------------------------------------
    def save(self) -> Path:
        """Write atomically (a reader never sees half a manifest)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / MANIFEST_NAME
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(self.data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        os.replace(temporary, path)
        return path
