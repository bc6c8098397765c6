"""`catalog build`: the catalog as one tuning directory, written as `tune` writes its own.

Every measured cell's choice goes through tune's path (tune/files.py: the adapter's constraints on what a file
can hold, the rule sets, proven equal to the selection, written and smoke-checked in the real library, then moved
into place) and a manifest like tune's (tune/manifest.py), so `run`, `report`, `verify` and `compare` take it. The
rules act only where they have evidence (RuleSet.coverage): each measured communicator size its own block.

Layouts of one size: where two layouts of one communicator size (2 ranks as 1 node x 2 and as 2 nodes x 1)
measured different winners, a library whose files key on processes per node (adapter.selects_by_ppn: MPICH's
`comm_avg_ppn<=N`) gets each layout's own rules, and a ppn nobody measured at that size keeps the library's choice.
Open MPI's and Intel MPI's files key on communicator size only (docs/tuning-files.md "Layouts"): there one acts
(SelectionTable.from_scaled: the fullest nodes) and the manifest names the others as `shadowed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tunempi.catalog.store import Catalog, Entry
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.errors import UsageError
from tunempi.rules import RuleSet
from tunempi.space import Cell
from tunempi.store.results import utc_timestamp
from tunempi.tune.manifest import Manifest, RunRecord, SelectionRow

if TYPE_CHECKING:
    from tunempi.mpi.library import MPILibrary
    from tunempi.mpi.vendor import VendorAdapter

CATALOG_STRATEGY = "catalog"


@dataclass(frozen=True)
class Built:
    manifest: Manifest
    shadowed: tuple[Entry, ...]  # measured at a ppn whose size another layout's winner decides in the files


def acting_entries(entries: tuple[Entry, ...], *, by_ppn: bool = False) -> tuple[list[Entry], list[Entry]]:
    """(the entries the files can hold, the ones shadowed): per collective, size and message size, the fullest
    nodes' entry acts (from_scaled's rule without an allocation's ppn); another layout of that size with the same
    winner is not shadowed (the files do what it measured). With `by_ppn` (files keyed on processes per node)
    every entry acts: layouts of one size with different winners keep their own rules."""
    if by_ppn:
        return list(entries), []
    best: dict[tuple[str, int, int], Entry] = {}
    for entry in entries:
        key = (entry.cell.collective, entry.cell.ranks, entry.cell.msg_bytes)
        if key not in best or entry.cell.ppn > best[key].cell.ppn:
            best[key] = entry
    acting = list(best.values())
    shadowed = [e for e in entries if e not in acting
                and best[(e.cell.collective, e.cell.ranks, e.cell.msg_bytes)].algorithm != e.algorithm]
    return acting, shadowed


def provenance(entry: Entry) -> dict:
    """One rule cell's provenance: layout, the tuning it came from, its date, verify's held-out figure."""
    return {**entry.cell.to_dict(), "algorithm": entry.algorithm, "source": entry.source,
            "created": entry.created, "held_out": dict(entry.held_out)}


@dataclass(frozen=True)
class CatalogRules:
    """What the files `catalog build` writes hold, before anything is written: `coverage` classifies the site's
    jobs by these very rule sets (one path, so it cannot call a layout covered that the files leave to the
    library, nor the reverse)."""

    selection: dict[Cell, str]
    medians: dict[tuple[Cell, str], float | None]
    rule_sets: dict[str, RuleSet]
    acting: tuple[Entry, ...]
    shadowed: tuple[Entry, ...]  # measured at a ppn whose size another layout's winner decides in the files

    def measured_layouts(self) -> list[tuple[int, int, int]]:
        """(ranks, nodes, ppn) of the layouts whose measured winners the files hold: not one with a shadowed
        cell (the files act there with another layout's winner)."""
        shadowed = {e.cell.scale for e in self.shadowed}
        return sorted({e.cell.scale for e in self.acting} - shadowed)


def catalog_rules(entries: tuple[Entry, ...], adapter: VendorAdapter) -> CatalogRules:
    """The catalog's entries as the library's files can hold them, through tune's path (tune/files.py): the
    acting entries (each layout's own where the files key on ppn), what a file can select
    (`one_choice_per_scale`, `whole_collectives`), and the rule sets (`files_rule_sets`: ppn levels where the
    library has them, the extension policy above the largest measured size)."""
    from tunempi.tune.files import files_rule_sets, one_choice_per_scale, whole_collectives

    acting, shadowed = acting_entries(entries, by_ppn=adapter.selects_by_ppn())
    medians: dict[tuple[Cell, str], float | None] = {}
    for e in acting:
        for algorithm, us in e.others.items():
            medians.setdefault((e.cell, algorithm), us)
        medians[(e.cell, e.algorithm)] = e.median_us
        medians.setdefault((e.cell, DEFAULT_ALGORITHM), e.default_us)
    chosen = {e.cell: e.algorithm for e in acting}
    selection = whole_collectives(one_choice_per_scale(chosen, adapter, medians), adapter, medians)
    return CatalogRules(selection, medians, files_rule_sets(selection, adapter, medians), tuple(acting),
                        tuple(shadowed))


def catalog_library(catalog: Catalog, mpi: str | None = None) -> tuple[MPILibrary, VendorAdapter]:
    """The library of the catalog's fingerprint (`mpi` if given, which must be that build), as `run` checks a
    tuning directory's, and its adapter."""
    from tunempi.mpi.discovery import adapter_for
    from tunempi.tune.apply import tuning_library

    if catalog.library is None:
        raise UsageError(f"{catalog.directory} holds no tuning yet: add one with `tunempi catalog add DIR`")
    library = tuning_library(Manifest(directory=catalog.directory, library=catalog.library), mpi)
    return library, adapter_for(library)


def build_tuning(catalog: Catalog, out: Path, *, mpi: str | None = None, smoke: bool = True,
                 on_writing: Callable[[tuple[int, ...]], None] | None = None) -> Built:
    """Write the catalog's tuning into `out` (TuningFileError if the library rejects the files; `out` then keeps
    what it held)."""
    from tunempi.tune.files import write_tuning_files
    from tunempi.tune.job import files_fields, one_choice, other_medians

    if catalog.library is None or not catalog.entries:
        raise UsageError(f"{catalog.directory} holds no tuning yet: add one with `tunempi catalog add DIR`")
    out = out.resolve()
    library, adapter = catalog_library(catalog, mpi)
    rules = catalog_rules(catalog.entries, adapter)
    selection, medians, rule_sets = rules.selection, rules.medians, rules.rule_sets
    smoke_ranks = tuple(sorted({cell.ranks for cell in selection}))
    if on_writing is not None:
        on_writing(smoke_ranks)
    written = write_tuning_files(out, library, adapter, rule_sets, smoke_ranks=smoke_ranks, smoke=smoke)
    by_cell = {e.cell: e for e in rules.acting}
    others = other_medians(medians, selection)
    manifest = Manifest(
        directory=out, library=catalog.library, created=utc_timestamp(),
        collectives=tuple(sorted({c.collective for c in selection})),
        scales=tuple(sorted({c.scale for c in selection})), sizes=tuple(sorted({c.msg_bytes for c in selection})),
        strategy=CATALOG_STRATEGY,
        strategy_params={"catalog": str(catalog.directory.resolve()),
                         "provenance": [provenance(by_cell[c]) for c in sorted(selection)],
                         "shadowed": [provenance(e) for e in sorted(rules.shadowed, key=lambda e: e.cell)]},
        run=RunRecord(stop_reason="built from the catalog's tunings"),
        one_choice=one_choice(adapter, sorted({c.collective for c in selection})),
        selection=tuple(SelectionRow(cell, algorithm, medians.get((cell, algorithm)),
                                     medians.get((cell, DEFAULT_ALGORITHM)), others=others[cell])
                        for cell, algorithm in sorted(selection.items())),
        **files_fields(written, rule_sets),
    )
    manifest.save()
    return Built(manifest, rules.shadowed)
