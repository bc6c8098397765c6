"""Import and export between the results store and the dataset CSV format (store/dataset.py).

Mapping (docs/store.md):
- dataset `latency_us` (OSU: average over iterations) <-> Measurement.mean_us; on export a record
  without a mean exports its median.
- dataset `library` is a name and version, not a fingerprint: imported rows get
  library_fingerprint = library (the only identity the file carries), so re-importing the same file
  hits the same natural keys and adds nothing.
- dataset `launch` <-> Measurement.launch_argv, as a shell-quoted string (shlex.join / shlex.split).
- Only successful measurements are exported: the format has no status column and requires a latency.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import IO

from tunempi.store.dataset import DatasetRow, iter_dataset, write_dataset
from tunempi.store.results import Filter, Measurement, ResultStore, utc_timestamp


def measurement_from_row(row: DatasetRow, *, imported_at: str | None = None) -> Measurement:
    """A dataset row as a Measurement; rows without a timestamp get `imported_at` (default: now)."""
    return Measurement(
        library_fingerprint=row.library,
        library=row.library,
        system=row.system,
        collective=row.collective,
        algorithm=row.algorithm,
        ranks=row.ranks,
        nodes=row.nodes,
        ppn=row.ppn,
        msg_bytes=row.msg_bytes,
        run=row.run,
        mean_us=row.latency_us,
        median_us=row.median_us,
        min_us=row.min_us,
        p90_us=row.p90_us,
        ci_low_us=row.ci_low_us,
        ci_high_us=row.ci_high_us,
        iterations=row.iterations,
        errors=row.errors or 0,
        launch_argv=tuple(shlex.split(row.launch)) if row.launch else (),
        timestamp=row.timestamp or imported_at or utc_timestamp(),
    )


def row_from_measurement(m: Measurement) -> DatasetRow:
    latency = m.latency_us
    if latency is None:
        raise ValueError(f"measurement {m.key} has no latency to export")
    return DatasetRow(
        system=m.system,
        library=m.library,
        collective=m.collective,
        algorithm=m.algorithm,
        ranks=m.ranks,
        nodes=m.nodes,
        ppn=m.ppn,
        msg_bytes=m.msg_bytes,
        run=m.run,
        latency_us=latency,
        iterations=m.iterations,
        median_us=m.median_us,
        min_us=m.min_us,
        p90_us=m.p90_us,
        ci_low_us=m.ci_low_us,
        ci_high_us=m.ci_high_us,
        errors=m.errors,
        timestamp=m.timestamp,
        launch=shlex.join(m.launch_argv) if m.launch_argv else None,
    )


def import_dataset(
    store: ResultStore,
    path: str | Path,
    *,
    replace: bool = False,
) -> tuple[int, int]:
    """Import a dataset file (plain or .gz) into the store; returns (rows read, rows added or changed).

    Rows whose natural key exists are kept as they are unless replace=True. The whole file is read and
    validated before anything is written, and written in one transaction: a bad line or a failure
    leaves the store untouched.
    """
    now = utc_timestamp()
    measurements = [measurement_from_row(row, imported_at=now) for row in iter_dataset(path)]
    written = store.add_many(measurements, on_conflict="update" if replace else "ignore")
    return len(measurements), written


def export_dataset(store: ResultStore, out: str | Path | IO[str], **filters: Filter) -> int:
    """Write the store's successful measurements matching the filters in the dataset format.

    `out` is a path (gzip when it ends in .gz) or an open text stream; returns the number of rows. The
    format has no count distribution and no objective: only uniform latency points (a call's time; a non-blocking
    one's start + wait) are exported unless `distribution=` or `objective=` says otherwise.
    """
    filters = {"distribution": "uniform", "objective": "latency", **filters, "status": "ok"}
    rows = (row_from_measurement(m) for m in store.iter_measurements(**filters) if m.latency_us is not None)
    return write_dataset(rows, out, extra_columns=True)
