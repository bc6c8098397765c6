"""Advice from a profile: savings, what is worth tuning, the eager verdict, the dataset source (no MPI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tunempi.cli.main import app
from tunempi.profile.advise import (
    Cell,
    CellPerformance,
    DatasetSource,
    advise,
    eager_verdict,
    tune_command,
)
from tunempi.profile.reader import P2PBucket, parse_profile
from tunempi.store.dataset import DatasetRow, write_dataset

BOUNDS = [2048, 4096, 8192, 16384, 32768, 65536, None]


def buckets(nbytes: list[int]) -> list[P2PBucket]:
    out, lo = [], 0
    for hi, b in zip(BOUNDS, nbytes, strict=True):
        out.append(P2PBucket(lo, hi, 1 if b else 0, b))
        lo = hi if hi is not None else lo
    return out


def test_eager_verdict_searches_around_the_busiest_bucket() -> None:
    verdict = eager_verdict(buckets([100, 0, 700, 100, 0, 0, 100]))  # 80% of bytes in (4, 8] KiB and (8, 16]
    assert verdict.search and verdict.fraction == pytest.approx(0.8)
    assert (verdict.busiest.lo, verdict.busiest.hi) == (4096, 8192)
    assert (verdict.low, verdict.high) == (2048, 16384)


def test_eager_verdict_threshold_is_thirty_percent_of_bytes() -> None:
    assert not eager_verdict(buckets([700, 290, 0, 0, 0, 0, 10])).search  # 29 %
    assert eager_verdict(buckets([690, 300, 0, 0, 0, 0, 10])).search  # 30 %
    assert not eager_verdict(buckets([0] * 7)).search


def profile_data(wall_ns: int = 10_000_000) -> dict:
    def coll(name: str, size: int, calls: int, time_ns: int, exact: dict | None) -> dict:
        return {"collective": name, "blocking": True, "comm_size": 4, "nodes": 2, "ppn": 2,
                "size_lo": size // 2 + 1, "size_hi": size, "ranks": 4, "calls": calls, "bytes": calls * size,
                "time_ns": time_ns, "time_min_ns": 1, "time_max_ns": 2, "exact_sizes": exact}

    return {
        "schema": "tunempi-profile", "schema_version": 1, "header": {"ranks": 4},
        "ranks": [{"rank": r, "host": "h", "wall_ns": wall_ns, "mpi_ns": 0, "collective_ns": 0, "p2p_ns": 0,
                   "collective_calls": 0, "send_calls": 0} for r in range(4)],
        "collectives": [coll("allreduce", 8, 4000, 8_000_000, {"8": 4000}),
                        coll("bcast", 1024, 40, 400_000, {"1000": 40})],
        "p2p_histogram": {"upper_bounds": BOUNDS, "calls": [0] * 7, "bytes": [0] * 7},
    }


class FakeSource:
    """allreduce 8 B: default 10 us, best 4 us; bcast: the default is already best."""

    def __init__(self) -> None:
        self.asked: list[Cell] = []

    def performance(self, cell: Cell) -> CellPerformance | None:
        self.asked.append(cell)
        if cell.collective == "allreduce":
            return CellPerformance(10.0, "ring", 4.0, "measured")
        return CellPerformance(5.0, "binomial", 5.0, "model")


def test_advise_predicts_savings_per_run_and_picks_what_is_worth_tuning() -> None:
    source = FakeSource()
    advice = advise(parse_profile(profile_data()), source)
    assert Cell("allreduce", 4, 2, 2, 8) in source.asked and Cell("bcast", 4, 2, 2, 1000) in source.asked
    top = advice.cells[0]
    assert top.usage.collective == "allreduce"
    assert top.calls_per_rank == 1000
    assert top.saving_s == pytest.approx(1000 * 6e-6)  # 1000 calls per rank x 6 us
    assert top.share_of_run == pytest.approx(8e-3 / 40e-3)
    assert advice.worth_tuning == ("allreduce",)  # 6 ms of a 10 ms run; bcast saves nothing
    assert tune_command(advice, "mpich") == (
        "tunempi tune --mpi mpich --collectives allreduce --nodes 2 --ppn 2 --max-msg 8 --out tuned")


def test_small_savings_are_not_worth_tuning() -> None:
    advice = advise(parse_profile(profile_data(wall_ns=10_000_000_000)), FakeSource())  # 6 ms of 10 s
    assert advice.worth_tuning == ()
    assert tune_command(advice, "mpich") is None


def row(algorithm: str, size: int, latency: float, run: int = 0) -> DatasetRow:
    return DatasetRow("sys", "lib", "allreduce", algorithm, 4, 2, 2, size, run, latency)


def test_dataset_source_exact_nearest_and_unknown() -> None:
    source = DatasetSource([row("default", 8, 10.0), row("default", 8, 12.0, 1), row("ring", 8, 4.0),
                            row("recursive_doubling", 8, 5.0), row("default", 64, 20.0), row("ring", 64, 30.0)])
    exact = source.performance(Cell("allreduce", 4, 2, 2, 8))
    assert exact == CellPerformance(11.0, "ring", 4.0, "measured")
    near = source.performance(Cell("allreduce", 4, 2, 2, 12))  # within a factor of two of 8
    assert near is not None and near.source == "nearest measured size 8B"
    assert source.performance(Cell("allreduce", 4, 2, 2, 24)) is None  # 3x from 8, 2.7x from 64
    assert source.performance(Cell("allreduce", 8, 2, 4, 8)) is None  # another scale


def test_advise_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tunempi.cli.advise as cli_advise
    import tunempi.profile.stopgap as stopgap

    monkeypatch.setattr(cli_advise, "_out", Console(width=250))
    monkeypatch.setattr(stopgap, "resolve_library", lambda spec: type("L", (), {"name": "mpich-5.0.2"})())
    monkeypatch.setattr(stopgap, "eager_threshold_knobs", lambda library: ["UCX_RNDV_THRESH"])
    data = profile_data()
    data["p2p_histogram"]["bytes"] = [0, 0, 9000, 0, 0, 0, 1000]
    (tmp_path / "p.json").write_text(json.dumps(data))
    write_dataset([row("default", 8, 10.0), row("ring", 8, 4.0)], tmp_path / "d.csv")
    result = CliRunner().invoke(app, ["advise", "--profile", str(tmp_path / "p.json"), "--dataset",
                                      str(tmp_path / "d.csv"), "--mpi", "mpich"])
    assert result.exit_code == 0, result.output
    assert "tunempi tune --mpi mpich --collectives allreduce --nodes 2 --ppn 2 --max-msg 8" in result.output
    assert "eager limit: worth searching (90% of point-to-point bytes" in result.output
    assert 'name = "UCX_RNDV_THRESH"' in result.output and "low = 2048  high = 16384" in result.output
