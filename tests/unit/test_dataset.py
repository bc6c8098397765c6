from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.store.dataset import DatasetRow, read_dataset, write_dataset


def _row(**over: object) -> DatasetRow:
    base = dict(system="s", library="l", collective="allreduce", algorithm="ring", ranks=4, nodes=1, ppn=4,
                msg_bytes=1024, run=0, latency_us=12.5)
    base.update(over)
    return DatasetRow(**base)  # type: ignore[arg-type]


def test_round_trip_plain_and_gzip(tmp_path: Path) -> None:
    rows = [_row(), _row(run=1, latency_us=13.0, median_us=12.9, iterations=100)]
    for name in ("d.csv", "d.csv.gz"):
        assert write_dataset(rows, tmp_path / name) == 2
        assert read_dataset(tmp_path / name) == rows
    with gzip.open(tmp_path / "d.csv.gz", "rt") as handle:
        assert handle.readline().startswith("system,library,collective")


def test_extra_columns_ignored_and_order_free(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("latency_us,run,msg_bytes,ppn,nodes,ranks,algorithm,collective,library,system,note\n"
                    "3.5,0,8,2,1,2,default,bcast,lib,sys,hello\n")
    assert read_dataset(path) == [_row(collective="bcast", algorithm="default", ranks=2, ppn=2, msg_bytes=8,
                                       latency_us=3.5, library="lib", system="sys")]


def test_bad_input_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("system,library,collective,algorithm,ranks,nodes,ppn,msg_bytes,run,latency_us\n"
                    "s,l,allreduce,ring,four,1,4,8,0,1.0\n")
    with pytest.raises(UsageError, match=r"bad.csv:2: column 'ranks'"):
        read_dataset(path)
    (tmp_path / "short.csv").write_text("system,library\ns,l\n")
    with pytest.raises(UsageError, match="missing column"):
        read_dataset(tmp_path / "short.csv")


def test_shared_peak_dataset_reads(peak_dataset: Path) -> None:
    rows = read_dataset(peak_dataset)
    assert len(rows) == 30861
    assert {r.collective for r in rows} >= {"allreduce", "bcast", "allgather", "alltoall"}
    assert all(r.latency_us > 0 for r in rows)
