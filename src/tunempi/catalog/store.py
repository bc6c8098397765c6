"""The site catalog on disk: one library build's measured choices, grown by `catalog add`, never lost.

A catalog directory holds `catalog.json`: the library build (fingerprint) it is for and one entry per measured
cell (collective, ranks, nodes, ppn, size) with the algorithm the tuning chose there and where it came from (the
tuning directory, its date, verify's held-out figure for the cell). `add` reads a tuning directory's manifest
(tune/manifest.py), refuses a tuning of another build, a manifest it cannot read, and a cell of a layout already
measured with another winner (communicator size and ppn alike; `replace` lets the newer one win), and writes the
whole catalog atomically (a temporary file renamed over it): a refusal or a crash leaves the catalog as it was.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tunempi.config import data_dir, directory_setting, resolve
from tunempi.errors import UsageError
from tunempi.space import Cell
from tunempi.tune.manifest import LibraryRecord, Manifest

CATALOG_NAME = "catalog.json"
KIND = "tunempi-catalog"
VERSION = 1


def catalog_dir(flag: str | Path | None) -> Path:
    """--catalog, else TUNEMPI_CATALOG, else the per-user data directory's catalog."""
    default = str(data_dir() / "catalog")
    return directory_setting(resolve(None if flag is None else str(flag), "CATALOG", default) or default,
                             "--catalog")


@dataclass(frozen=True)
class Entry:
    """One measured cell's choice and its provenance."""

    cell: Cell
    algorithm: str
    source: str  # the tuning directory it was added from
    created: str  # when that tuning was made
    median_us: float | None = None
    default_us: float | None = None
    #: verify's held-out figure for the cell: speedup over the default, its interval and verdict ({} unverified)
    held_out: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int, int, int]:
        """What two tunings may not measure with different winners: communicator size and ppn, not node count
        alone (2x2 and 1x4 are different layouts with the same ranks)."""
        return (self.cell.collective, self.cell.ranks, self.cell.ppn, self.cell.msg_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {**self.cell.to_dict(), "algorithm": self.algorithm, "source": self.source, "created": self.created,
                "median_us": self.median_us, "default_us": self.default_us, "held_out": dict(self.held_out)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        return cls(Cell.from_dict(data), str(data["algorithm"]), str(data.get("source", "")),
                   str(data.get("created", "")), data.get("median_us"), data.get("default_us"),
                   dict(data.get("held_out") or {}))


@dataclass(frozen=True)
class Catalog:
    directory: Path
    library: LibraryRecord | None = None  # None: empty, the first tuning added names the build
    entries: tuple[Entry, ...] = ()

    @classmethod
    def load(cls, directory: str | Path) -> Catalog:
        directory = Path(directory)
        path = directory / CATALOG_NAME
        if not path.exists():
            return cls(directory)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("kind") != KIND:
                raise ValueError(f"kind {data.get('kind') if isinstance(data, dict) else None!r}")
            library = LibraryRecord.from_dict(data["library"]) if data.get("library") else None
            return cls(directory, library, tuple(Entry.from_dict(e) for e in data.get("entries", ())))
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{path} is not a readable tunempi catalog ({exc}); it was left as it is") from None

    def layouts(self) -> list[tuple[int, int, int]]:
        """(ranks, nodes, ppn) of every measured layout, in order."""
        return sorted({e.cell.scale for e in self.entries})

    def to_dict(self) -> dict[str, Any]:
        return {"kind": KIND, "version": VERSION,
                "library": self.library.to_dict() if self.library is not None else None,
                "entries": [e.to_dict() for e in sorted(self.entries, key=lambda e: (e.key, e.cell.nodes))]}

    def save(self) -> Path:
        return write_atomically(self.directory / CATALOG_NAME, json.dumps(self.to_dict(), indent=1) + "\n")


def write_atomically(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write `text` to a temporary file beside `path`, flushed to disk, then renamed over it: a reader (or a
    crash) sees the old file or the new one, never half of one; on failure the temporary file is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)  # mkstemp's 0600 would hide a site's modulefile from its users
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


@dataclass(frozen=True)
class Added:
    catalog: Catalog
    added: int  # entries new to the catalog
    replaced: tuple[tuple[Entry, Entry], ...] = ()  # (old, new) where the winner changed (--replace)
    refreshed: int = 0  # entries measured again with the same winner (provenance now the newer tuning)


def entries_of(manifest: Manifest) -> list[Entry]:
    """The manifest's selection rows as catalog entries, each with its held-out figure where verify has one."""
    held = {}
    if manifest.verify is not None:
        held = {v.cell: {"speedup": v.speedup, "ci_low": v.ci_low, "ci_high": v.ci_high, "verdict": v.verdict,
                         "verified_at": manifest.verify.verified_at}
                for v in manifest.verify.held_out}
    source = str(manifest.directory.resolve())
    return [Entry(row.cell, row.algorithm, source, manifest.created, row.median_us, row.default_us,
                  held.get(row.cell, {})) for row in manifest.selection]


def merge(catalog: Catalog, library: LibraryRecord, new: Iterable[Entry], *, replace_conflicts: bool = False
          ) -> Added:
    """The catalog with `new` entries in it. UsageError (nothing changed) for another library build, or a
    layout measured again with another winner unless `replace_conflicts`."""
    if catalog.library is not None and catalog.library.fingerprint != library.fingerprint:
        raise UsageError(
            f"{catalog.directory} is the catalog of {catalog.library.name} ({catalog.library.fingerprint}); this "
            f"tuning is of {library.name} ({library.fingerprint}), another library build: add it to that build's "
            "catalog (--catalog DIR)")
    new = list(new)
    if not new:
        raise UsageError("the tuning has no selection rows: nothing to add")
    by_key = {e.key: e for e in catalog.entries}
    conflicts = [(by_key[e.key], e) for e in new if e.key in by_key and by_key[e.key].algorithm != e.algorithm]
    if conflicts and not replace_conflicts:
        shown = "; ".join(f"{o.cell.collective} {o.cell.msg_bytes} B at {o.cell.ranks} ranks, ppn {o.cell.ppn}: "
                          f"{o.algorithm} ({o.source}, {o.created}) against {n.algorithm}"
                          for o, n in conflicts[:5])
        more = f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
        raise UsageError(f"{len(conflicts)} cells already measured with another winner: {shown}{more}. "
                         "Nothing was added; give --replace to let this tuning's winners replace them")
    refreshed = sum(e.key in by_key and by_key[e.key].algorithm == e.algorithm for e in new)
    added = sum(e.key not in by_key for e in new)
    merged = dict(by_key)
    merged.update({e.key: e for e in new})
    return Added(replace(catalog, library=catalog.library or library, entries=tuple(merged.values())),
                 added, tuple(conflicts), refreshed)


def add_tuning(catalog_directory: Path, tuning: Path, *, replace_conflicts: bool = False) -> Added:
    """`catalog add`: a tuning directory's measured cells into the catalog, saved atomically."""
    manifest = Manifest.load(tuning)  # a corrupt manifest is a UsageError, before the catalog is touched
    if not manifest.library.fingerprint:
        raise UsageError(f"{tuning}: its manifest names no library fingerprint; tune it again")
    catalog = Catalog.load(catalog_directory)
    result = merge(catalog, manifest.library, entries_of(manifest), replace_conflicts=replace_conflicts)
    result.catalog.save()
    return result
