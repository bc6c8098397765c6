"""`tunempi export` and `tunempi import`: move measurements between the results store and dataset CSV files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tunempi.collectives import parse_collectives
from tunempi.config import resolve_db
from tunempi.errors import UsageError
from tunempi.report.console import output_console
from tunempi.store.exchange import export_dataset, import_dataset
from tunempi.store.results import ResultStore
from tunempi.units import parse_sizes

EXPORT_FORMATS: tuple[str, ...] = ("csv",)

_err = output_console(stderr=True)

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Results database (default: $TUNEMPI_DB, else a per-user file).", show_default=False),
]


def _int_list(text: str | None, name: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--{name} takes whole numbers separated by commas, got {text!r}") from None
    if not values:
        raise UsageError(f"--{name} is empty")
    return values


def _str_list(text: str | None) -> list[str] | None:
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def export_command(
    db: DbOption = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Output format.")] = "csv",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Output file (.gz compresses); default: stdout.")
    ] = None,
    collective: Annotated[str | None, typer.Option(help="Only these collectives (comma list).")] = None,
    algorithm: Annotated[str | None, typer.Option(help="Only these algorithms (comma list).")] = None,
    library: Annotated[
        str | None, typer.Option(help="Only these libraries, by name or fingerprint (comma list).")
    ] = None,
    system: Annotated[str | None, typer.Option(help="Only these systems (comma list).")] = None,
    ranks: Annotated[str | None, typer.Option(help="Only these rank counts (comma list).")] = None,
    sizes: Annotated[
        str | None, typer.Option(help="Only these message sizes: 8,1KiB or a range 1:1MiB.")
    ] = None,
) -> None:
    """Write measurements from the results store in the dataset CSV format (successful points only)."""
    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    filters: dict[str, Any] = {
        "collective": parse_collectives(collective, nonblocking=True) if collective is not None else None,
        "algorithm": _str_list(algorithm),
        "system": _str_list(system),
        "ranks": _int_list(ranks, "ranks"),
        "msg_bytes": parse_sizes(sizes) if sizes is not None else None,
    }
    path = resolve_db(db)
    if not path.exists():
        raise UsageError(f"results database not found: {path} (give --db or set TUNEMPI_DB)")
    with ResultStore(path) as store:
        names = _str_list(library)
        if names is not None:
            known = store.libraries()
            fingerprints = [fp for fp, name in known if fp in names or name in names]
            unknown = [n for n in names if not any(n in pair for pair in known)]
            if unknown:
                choices = ", ".join(sorted({name for _, name in known})) or "(store is empty)"
                raise UsageError(f"no measurements of library {', '.join(unknown)}; libraries in {path}: {choices}")
            filters["library_fingerprint"] = fingerprints
        count = export_dataset(store, output if output is not None else sys.stdout, **filters)
    _err.print(f"exported {count} measurement(s) from {path}" + (f" to {output}" if output else ""))


def import_command(
    file: Annotated[Path, typer.Argument(help="Dataset CSV file (plain or .gz).", show_default=False)],
    db: DbOption = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Overwrite measurements already in the store (same natural key).")
    ] = False,
) -> None:
    """Read a dataset CSV file (plain or .gz) into the results store; rows already there are skipped."""
    if not file.is_file():
        raise UsageError(f"dataset file not found: {file}")
    path = resolve_db(db)
    with ResultStore(path) as store:
        with _err.status(f"importing {file} ..."):
            read, written = import_dataset(store, file, replace=replace)
    kept = read - written
    _err.print(
        f"imported {written} of {read} row(s) from {file} into {path}"
        + (f" ({kept} already present{' and unchanged' if replace else ', kept'})" if kept else "")
    )


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
    app.command("import")(import_command)
