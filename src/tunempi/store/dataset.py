"""The shared benchmark dataset format (docs/dataset-format.md): CSV, plain or gzip-compressed.

One row per measured point; header required, column order free, extra columns ignored on read.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

from tunempi.errors import UsageError

REQUIRED_COLUMNS: tuple[str, ...] = (
    "system", "library", "collective", "algorithm", "ranks", "nodes", "ppn", "msg_bytes", "run", "latency_us",
)
#: Optional columns the project's own exports add.
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "iterations", "median_us", "min_us", "p90_us", "ci_low_us", "ci_high_us", "errors", "timestamp", "launch",
)


@dataclass(frozen=True)
class DatasetRow:
    system: str
    library: str
    collective: str
    algorithm: str
    ranks: int
    nodes: int
    ppn: int
    msg_bytes: int
    run: int
    latency_us: float
    iterations: int | None = None
    median_us: float | None = None
    min_us: float | None = None
    p90_us: float | None = None
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    errors: int | None = None
    timestamp: str | None = None
    launch: str | None = None


_INT_FIELDS = {"ranks", "nodes", "ppn", "msg_bytes", "run", "iterations", "errors"}
_FLOAT_FIELDS = {"latency_us", "median_us", "min_us", "p90_us", "ci_low_us", "ci_high_us"}


def _open_text(path: Path) -> IO[str]:
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def _convert(column: str, text: str, line: int, path: Path) -> object:
    if text == "" and column not in REQUIRED_COLUMNS:
        return None
    try:
        if column in _INT_FIELDS:
            return int(float(text)) if "." in text or "e" in text.lower() else int(text)
        if column in _FLOAT_FIELDS:
            return float(text)
    except ValueError:
        raise UsageError(f"{path}:{line}: column {column!r} is not a number: {text!r}") from None
    return text


def iter_dataset(path: str | Path) -> Iterator[DatasetRow]:
    """Rows of a dataset file; UsageError with the line number on bad input."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"dataset file not found: {path}")
    known = {f.name for f in fields(DatasetRow)}
    with _open_text(path) as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise UsageError(f"{path}: missing column(s) {', '.join(missing)}; required: {', '.join(REQUIRED_COLUMNS)}")
        for line, record in enumerate(reader, start=2):
            values: dict[str, Any] = {k: _convert(k, (v or "").strip(), line, path) for k, v in record.items() if k in known}
            yield DatasetRow(**values)


def read_dataset(path: str | Path) -> list[DatasetRow]:
    return list(iter_dataset(path))


def write_dataset(rows: Iterable[DatasetRow], out: str | Path | IO[str], *, extra_columns: bool = True) -> int:
    """Write rows in the dataset format (gzip when the path ends in .gz); returns the row count."""
    columns = list(REQUIRED_COLUMNS) + (list(OPTIONAL_COLUMNS) if extra_columns else [])
    if isinstance(out, (str, Path)):
        path = Path(out)
        raw: IO[str] = (
            io.TextIOWrapper(gzip.open(path, "wb"), encoding="utf-8", newline="")
            if path.suffix == ".gz"
            else open(path, "w", encoding="utf-8", newline="")
        )
        with raw:
            return write_dataset(rows, raw, extra_columns=extra_columns)
    # A plain writer over getattr: dataclasses.asdict deep-copies every value and was 2/3 of export time.
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    count = 0
    for row in rows:
        writer.writerow(["" if (value := getattr(row, column)) is None else value for column in columns])
        count += 1
    return count
