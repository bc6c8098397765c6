"""The site catalog on disk: one library build's measured choices, grown by `catalog add`, never lost.

A catalog directory holds `catalog.json`: the library build (fingerprint) it is for and one entry per measured
cell (collective, ranks, nodes, ppn, size) with the algorithm the tuning chose there and where it came from (the
tuning directory, its date, verify's held-out figure for the cell). `add` reads a tuning directory's manifest
(tune/manifest.py), refuses a tuning of another build, a manifest it cannot read, and a cell of a layout already
measured with another winner (communicator size and ppn alike; `replace` lets the newer one win), and writes the
whole catalog atomically (a temporary file renamed over it): a refusal or a crash leaves the catalog as it was.
`add_store` takes a results store instead: tune's selection from its runs of one build (tune/job.py
`selection_from_store`). Every add reads, merges and writes under an exclusive lock on `.catalog.lock` in the
catalog directory, so concurrent adds (a campaign's batch jobs) each see the others' entries and lose none.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.config import data_dir, directory_setting, resolve
from tunempi.errors import TunempiError, UsageError
from tunempi.mpi.vendor import VendorAdapter
from tunempi.space import Cell
from tunempi.store.results import ResultStore
from tunempi.tune.manifest import LibraryRecord, Manifest

CATALOG_NAME = "catalog.json"
LOCK_NAME = ".catalog.lock"
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
    source: str  # the tuning directory (or results store) it was added from
    created: str  # when that tuning was made
    median_us: float | None = None
    default_us: float | None = None
    #: verify's held-out figure for the cell: speedup over the default, its interval and verdict ({} unverified)
    held_out: Mapping[str, Any] = field(default_factory=dict)
    #: the medians of the other algorithms the tuning measured here (the manifest row's `others`): the extension
    #: policy reads a winner's gain where another layout's tuning did not select it
    others: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int, int, int]:
        """What two tunings may not measure with different winners: communicator size and ppn, not node count
        alone (2x2 and 1x4 are different layouts with the same ranks)."""
        return (self.cell.collective, self.cell.ranks, self.cell.ppn, self.cell.msg_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {**self.cell.to_dict(), "algorithm": self.algorithm, "source": self.source, "created": self.created,
                "median_us": self.median_us, "default_us": self.default_us, "held_out": dict(self.held_out),
                **({"others": dict(sorted(self.others.items()))} if self.others else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        return cls(Cell.from_dict(data), str(data["algorithm"]), str(data.get("source", "")),
                   str(data.get("created", "")), data.get("median_us"), data.get("default_us"),
                   dict(data.get("held_out") or {}),
                   {str(a): float(us) for a, us in (data.get("others") or {}).items()})


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


def make_directory(directory: Path) -> Path:
    """`directory` made with its parents; UsageError saying why where it cannot be (a file in the way, no
    permission): a path given on the command line is bad input, not a crash."""
    blocking = next((p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise UsageError(f"cannot create {directory}: {blocking} is a file, not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {directory}: {exc.strerror or exc}") from None
    return directory


def write_atomically(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write `text` to a temporary file beside `path`, flushed to disk, then renamed over it: a reader (or a
    crash) sees the old file or the new one, never half of one; on failure the temporary file is removed."""
    make_directory(path.parent)
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
                  held.get(row.cell, {}), row.others) for row in manifest.selection]


def merge(catalog: Catalog, library: LibraryRecord, new: Iterable[Entry], *, replace_conflicts: bool = False,
          what: str = "tuning") -> Added:
    """The catalog with `new` entries in it. UsageError (nothing changed) for another library build, or a
    layout measured again with another winner unless `replace_conflicts`."""
    if catalog.library is not None and catalog.library.fingerprint != library.fingerprint:
        raise UsageError(
            f"{catalog.directory} is the catalog of {catalog.library.name} ({catalog.library.fingerprint}); this "
            f"{what} is of {library.name} ({library.fingerprint}), another library build: add it to that build's "
            "catalog (--catalog DIR)")
    new = list(new)
    if not new:
        raise UsageError(f"the {what} has no measured cells to add: nothing added")
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


@contextmanager
def catalog_lock(directory: Path, on_busy: Callable[[Path], None] | None = None) -> Iterator[None]:
    """An exclusive lock on the catalog for one read-merge-write (flock on `.catalog.lock`: released when the
    process ends, however it ends; NFS carries it as a POSIX lock). `on_busy(lock)` is called once if another
    add holds it, before this one waits its turn."""
    make_directory(directory)
    lock = directory / LOCK_NAME
    with open(lock, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_busy is not None:
                on_busy(lock)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def add_entries(catalog_directory: Path, library: LibraryRecord, entries: list[Entry], *,
                replace_conflicts: bool = False, what: str = "tuning",
                on_busy: Callable[[Path], None] | None = None) -> Added:
    """Merge `entries` into the catalog and save it, all under the catalog's lock (no concurrent add lost)."""
    with catalog_lock(catalog_directory, on_busy):
        result = merge(Catalog.load(catalog_directory), library, entries, replace_conflicts=replace_conflicts,
                       what=what)
        result.catalog.save()
    return result


def add_tuning(catalog_directory: Path, tuning: Path, *, replace_conflicts: bool = False,
               on_busy: Callable[[Path], None] | None = None) -> Added:
    """`catalog add`: a tuning directory's measured cells into the catalog, saved atomically."""
    manifest = Manifest.load(tuning)  # a corrupt manifest is a UsageError, before the catalog is touched
    if not manifest.library.fingerprint:
        raise UsageError(f"{tuning}: its manifest names no library fingerprint; tune it again")
    return add_entries(catalog_directory, manifest.library, entries_of(manifest), replace_conflicts=replace_conflicts,
                       on_busy=on_busy)


def store_libraries(db: Path) -> list[tuple[str, str]]:
    """(fingerprint, name) of every library build with runs in the results store at `db`; UsageError for a
    missing, unreadable or empty store (opened through ResultStore, which never creates one here)."""
    if not db.is_file():
        raise UsageError(f"no results store at {db}")
    try:
        with ResultStore(db) as store:
            found = store.libraries()
    except (TunempiError, sqlite3.DatabaseError) as exc:
        raise UsageError(f"{db} is not a readable tunempi results store ({exc}); nothing was added") from None
    if not found:
        raise UsageError(f"{db} holds no measurements: nothing to add")
    return found


def check_store_build(db: Path, fingerprint: str, name: str, found: list[tuple[str, str]]) -> None:
    """UsageError unless the store at `db` (its libraries `found`) has runs of the build `fingerprint`."""
    if fingerprint not in {fp for fp, _ in found}:
        held = ", ".join(f"{n} ({fp})" for fp, n in found)
        raise UsageError(f"{db} holds no runs of {name} ({fingerprint}), only of {held}: another library build; "
                         "add it to that build's catalog (--catalog DIR), or give --mpi with the build it holds")


def add_stored_runs(catalog_directory: Path, db: Path, library: LibraryRecord, adapter: VendorAdapter, *,
                    system: str = "", replace_conflicts: bool = False,
                    on_busy: Callable[[Path], None] | None = None) -> Added:
    """`catalog add STORE` once the build is known: tune's selection from the store's runs of `library`
    (tune/job.py `selection_from_store`) as entries whose source is the store, dated by its newest run."""
    from tunempi.tune.job import other_medians, selection_from_store

    check_store_build(db, library.fingerprint, library.name, store_libraries(db))
    with ResultStore(db) as store:
        stored = selection_from_store(store, library.fingerprint, adapter, system=system)
    source = str(db.resolve())
    others = other_medians(stored.medians, stored.selection)
    entries = [Entry(cell, algorithm, source, stored.newest, stored.medians.get((cell, algorithm)),
                     stored.medians.get((cell, DEFAULT_ALGORITHM)), others=others[cell])
               for cell, algorithm in sorted(stored.selection.items())]
    return add_entries(catalog_directory, library, entries, replace_conflicts=replace_conflicts,
                       what="results store", on_busy=on_busy)


def add_store(catalog_directory: Path, db: Path, *, mpi: str | None = None, system: str = "",
              replace_conflicts: bool = False, on_busy: Callable[[Path], None] | None = None) -> Added:
    """`catalog add STORE`: the build is the catalog's (refused if the store has no runs of it), or for an empty
    catalog `--mpi`'s (default: the default library), which must have runs in the store."""
    from tunempi.mpi.discovery import adapter_for, resolve_library
    from tunempi.tune.apply import tuning_library

    found = store_libraries(db)
    catalog = Catalog.load(catalog_directory)
    if catalog.library is not None:
        check_store_build(db, catalog.library.fingerprint, catalog.library.name, found)
        library = tuning_library(Manifest(directory=catalog.directory, library=catalog.library), mpi)
    else:
        library = resolve_library(mpi)
        check_store_build(db, library.fingerprint, library.name, found)
    return add_stored_runs(catalog_directory, db, LibraryRecord.of(library), adapter_for(library), system=system,
                           replace_conflicts=replace_conflicts, on_busy=on_busy)
