"""Results store: SQLite database of measurements (results.py, schema.py) and the dataset CSV format
(dataset.py), with import/export between the two (exchange.py)."""

from __future__ import annotations

from tunempi.store.exchange import export_dataset, import_dataset
from tunempi.store.results import STATUSES, Measurement, PointKey, ResultStore, utc_timestamp
from tunempi.store.schema import NATURAL_KEY, SCHEMA_VERSION

__all__ = [
    "NATURAL_KEY", "SCHEMA_VERSION", "STATUSES", "Measurement", "PointKey", "ResultStore",
    "export_dataset", "import_dataset", "utc_timestamp",
]
