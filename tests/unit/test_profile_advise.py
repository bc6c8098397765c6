"""Advice from a profile: savings, what is worth tuning, the tune command, the eager search space; the
dataset source, and the results store with measured and model-predicted cells (no MPI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tunempi.cli.main import app
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.mpich import MpichAdapter
from tunempi.mpi.vendor import ThresholdKnob
from tunempi.profile.advise import (
    Cell,
    CellPerformance,
    DatasetSource,
    advise,
    eager_search_space,
    eager_verdict,
    tune_command,
)
from tunempi.profile.reader import P2PBucket, parse_profile
from tunempi.search.space import load_space, parse_toml
from tunempi.store.dataset import DatasetRow
from tunempi.store.results import Measurement, ResultStore

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
    command = tune_command(advice, "mpich", db="r.sqlite")
    assert command is not None and command.text == (
        "tunempi tune --mpi mpich --collectives allreduce --nodes 2 --ppn 2 --min-msg 8 --max-msg 8 "
        "--db r.sqlite --out tuned")
    # with the profile's path, tune takes from it what the flags do not say (objective, shapes, ops)
    with_profile = tune_command(advice, "mpich", profile="app.json")
    assert with_profile is not None and with_profile.argv[-4:] == ("--from-profile", "app.json", "--out", "tuned")


def test_no_saving_where_the_best_algorithm_is_what_the_default_runs() -> None:
    """MPICH's default picks recursive_doubling at this cell; the same algorithm forced measured 10 % faster
    than the default run: noise, nothing a tuning file could gain."""

    class DefaultsOwn:
        def performance(self, cell: Cell) -> CellPerformance | None:
            if cell.collective == "allreduce":
                return CellPerformance(10.0, "recursive_doubling", 9.0, "measured", "recursive_doubling")
            return None

    advice = advise(parse_profile(profile_data()), DefaultsOwn())
    assert [c.saving_s for c in advice.cells] == [0.0, 0.0]
    assert advice.worth_tuning == ()


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


# --- against a real results database ------------------------------------------------------------------
FP = "mpich-5.0.2-abcdef"


def measurement(algorithm: str, size: int, median_us: float, run: int = 0, ranks: int = 4, nodes: int = 2,
                fingerprint: str = FP) -> Measurement:
    return Measurement(fingerprint, "mpich-5.0.2", "allreduce", algorithm, ranks, size, nodes=nodes,
                       ppn=ranks // nodes, run=run, median_us=median_us, mean_us=median_us * 1.5)


def fake_library() -> MPILibrary:
    prefix = Path("/nonexistent/mpich")
    return MPILibrary("mpich", "5.0.2", "MPICH Version: 5.0.2", "ch4:ucx", prefix, prefix / "bin/mpicc",
                      prefix / "bin/mpiexec")


class KnownLibrary:
    """Stands in for discovery: the library's fingerprint is FP; its adapter an MpichAdapter built from
    known MPI_T values (no MPI needed); the library's default tree says 'ring' where asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, default_choice: str | None = None) -> None:
        import tunempi.mpi.discovery as discovery

        library = fake_library()
        monkeypatch.setattr(type(library), "fingerprint", property(lambda self: FP))
        adapter = MpichAdapter(library, {}, cvar_values={"MPIR_CVAR_CH4_CMA_ENABLE": 1,
                                                         "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD": 8192,
                                                         "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE": 8192})
        monkeypatch.setattr(adapter, "default_choice", lambda *args: default_choice)
        monkeypatch.setattr(discovery, "resolve_library", lambda spec: library)
        monkeypatch.setattr(discovery, "adapter_for", lambda lib: adapter)


def run_advise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict, *extra: str) -> str:
    import tunempi.cli.advise as cli_advise

    monkeypatch.setattr(cli_advise, "_out", Console(width=250))
    (tmp_path / "p.json").write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["advise", "--profile", str(tmp_path / "p.json"), "--db",
                                      str(tmp_path / "r.sqlite"), "--mpi", "mpich", *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_advise_from_the_store_gives_the_measured_best_and_saving(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add_many([
            measurement("default", 8, 9.0), measurement("default", 8, 11.0, run=1),  # median 10 us
            measurement("ring", 8, 4.0), measurement("ring", 8, 40.0, run=1), measurement("ring", 8, 4.0, run=2),
            measurement("recursive_doubling", 8, 5.0),
            measurement("ring", 8, 1.0, fingerprint="mpich-5.0.2-otherbuild"),  # another build: not used
            Measurement(FP, "mpich-5.0.2", "bcast", "auto", 4, 1000, nodes=2, ppn=2, median_us=5.0),
            Measurement(FP, "mpich-5.0.2", "bcast", "binomial", 4, 1000, nodes=2, ppn=2, median_us=6.0),
        ])
    KnownLibrary(monkeypatch)
    output = run_advise(tmp_path, monkeypatch, profile_data())
    assert "measurements from" in output and "8 runs of this build of mpich-5.0.2" in output
    lines = {line.split("│")[1].strip(): line for line in output.splitlines() if line.count("│") > 5}
    # allreduce 8 B: default median 10 us, best ring (median of 4, 40, 4 = 4 us): 1000 calls/rank x 6 us
    assert "ring 4.00us" in lines["allreduce"] and "10.00us" in lines["allreduce"]
    assert "measured" in lines["allreduce"] and "6.00ms" in lines["allreduce"]
    # bcast 1000 B: the library's own choice (stored as "auto") is already the best: no saving
    assert "auto" not in lines["bcast"] and "default 5.00us" in lines["bcast"] and "0.00us" in lines["bcast"]
    assert "worth tuning (predicted saving per run, at least 1% of the run time): allreduce 6.00ms" in output
    assert ("tunempi tune --mpi mpich --collectives allreduce --nodes 2 --ppn 2 --min-msg 8 --max-msg 8 "
            f"--from-profile {tmp_path / 'p.json'} --db {tmp_path / 'r.sqlite'} --out tuned") in output


def test_advise_predicts_unmeasured_sizes_with_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    laws = {"default": (10.0, 0.01), "ring": (20.0, 0.002), "recursive_doubling": (5.0, 0.02)}
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add_many([measurement(name, size, a + b * size)
                        for name, (a, b) in laws.items() for size in (2 ** k for k in range(3, 17))])
    sources = ("measured", "predicted")
    data = profile_data()
    data["collectives"] = [  # 3000 B and 24 B were never measured; 8 B was
        {**data["collectives"][0], "size_lo": 2049, "size_hi": 4096, "bytes": 4000 * 3000, "exact_sizes": {"3000": 4000}},
        {**data["collectives"][0], "size_lo": 17, "size_hi": 32, "calls": 40, "bytes": 40 * 24, "time_ns": 4000,
         "exact_sizes": {"24": 40}},
    ]
    KnownLibrary(monkeypatch, default_choice=None)
    output = run_advise(tmp_path, monkeypatch, data, "--top", "0")
    rows = [line for line in output.splitlines() if line.count("│") > 5 and "allreduce" in line]
    by_size = {line.split("│")[4].strip(): line for line in rows}
    assert set(by_size) == {"3000B", "24B"} and all(any(s in r for s in sources) for r in rows)
    assert "predicted" in by_size["3000B"] and "predicted" in by_size["24B"]
    assert "ring" in by_size["3000B"] and "recursive_doubling" in by_size["24B"]  # the laws' winners there

    from tunempi.profile.sources import PredictedCells
    with ResultStore(tmp_path / "r.sqlite") as store:
        model = PredictedCells(store.query())
    perf = model.performance(Cell("allreduce", 4, 2, 2, 3000))
    assert perf is not None and perf.source == "predicted" and perf.best_algorithm == "ring"
    assert perf.default_us == pytest.approx(40.0, rel=0.1) and perf.best_us == pytest.approx(26.0, rel=0.1)


def test_eager_space_on_both_sides_of_thirty_percent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add(measurement("default", 8, 10.0))
    KnownLibrary(monkeypatch)
    below = profile_data()
    below["header"]["nodes"] = 1
    below["p2p_histogram"]["bytes"] = [710, 290, 0, 0, 0, 0, 0]  # 29 % in 2 - 64 KiB
    space = tmp_path / "eager.toml"
    output = run_advise(tmp_path, monkeypatch, below, "--space-out", str(space))
    assert "eager limit: not worth searching (29% of point-to-point bytes" in output and not space.exists()

    above = profile_data()
    above["header"].update(nodes=1, ranks=4, command=["./app", "-x"])
    above["p2p_histogram"]["bytes"] = [600, 100, 300, 0, 0, 0, 0]  # 40 %, busiest (4, 8] KiB
    output = run_advise(tmp_path, monkeypatch, above, "--space-out", str(space))
    assert "eager limit: worth searching (40% of point-to-point bytes" in output
    assert f"tunempi search --space {space} -- mpiexec -n 4 ./app -x" in output
    loaded = load_space(space)  # the search's own loader accepts it
    assert loaded.library == "mpich-5.0.2"
    cma = loaded["MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD"]
    assert (cma.low, cma.high, cma.log, cma.default) == (2048, 16384, True, 8192)
    cells = loaded["MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"]
    assert cells.grid() == (2048, 4096, 8192, 16384) and cells.default == 8192  # powers of two only
    assert "UCX_RNDV_THRESH" not in loaded.names  # one node: the netmod is not used


def test_eager_space_keeps_within_the_library_limits() -> None:
    """MPICH 5.0.2 aborts MPI_Init with cells larger than its pack buffer (16 KiB): a busy (32, 64] KiB
    bucket searches 16 - 128 KiB, the cell size only up to 16 KiB; the CMA threshold over the whole range."""
    library = fake_library()
    adapter = MpichAdapter(library, {}, cvar_values={"MPIR_CVAR_CH4_CMA_ENABLE": 1,
                                                     "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD": 8192,
                                                     "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE": 8192,
                                                     "MPIR_CVAR_CH4_PACK_BUFFER_SIZE": 16384})
    knobs = adapter.eager_threshold_knobs()
    assert [k.maximum for k in knobs] == [None, 16384]
    verdict = eager_verdict(buckets([100, 0, 0, 0, 0, 900, 0]))
    assert (verdict.low, verdict.high) == (16384, 131072)
    text = eager_search_space(verdict, knobs, library="mpich-5.0.2")
    assert text is not None
    space = parse_toml(text, "eager.toml")
    assert space["MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"].grid() == (16384,)
    cma = space["MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD"]
    assert (cma.low, cma.high, cma.default) == (16384, 131072, None)  # 8 KiB default lies outside
    tight = [k for k in knobs if k.maximum is not None]
    only_cells = eager_search_space(eager_verdict(buckets([0, 0, 0, 0, 0, 0, 0])), tight, library="x")
    assert only_cells is None  # not worth searching
    narrow = [ThresholdKnob("CELLS", "shm", "intra-node", 8192, powers_of_two=True, maximum=4096)]
    assert eager_search_space(verdict, narrow, library="x") is None  # nothing of 16 - 128 KiB fits


def test_eager_knobs_follow_where_the_ranks_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One rank per node on two nodes: only the cross-node knob (MPICH ch4:ucx: UCX's threshold)."""
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add(measurement("default", 8, 10.0))
    KnownLibrary(monkeypatch)
    data = profile_data()
    data["header"].update(nodes=2, hosts={"n1": 1, "n2": 1}, ranks=2)
    data["p2p_histogram"]["bytes"] = [0, 0, 0, 0, 1000, 0, 0]  # all in (16, 32] KiB
    space = tmp_path / "eager.toml"
    run_advise(tmp_path, monkeypatch, data, "--space-out", str(space))
    loaded = load_space(space)
    assert loaded.names == ("UCX_RNDV_THRESH",)
    assert (loaded["UCX_RNDV_THRESH"].low, loaded["UCX_RNDV_THRESH"].high) == (8192, 65536)


def time_profile(times_ns: dict[str, int], mpi_ns: int) -> dict:
    """A profile of 4 ranks on one node spending `times_ns` (summed over ranks) in each collective."""
    data = profile_data()
    data["ranks"] = [{**r, "mpi_ns": mpi_ns // 4, "collective_ns": mpi_ns // 4} for r in data["ranks"]]
    data["collectives"] = [
        {"collective": name, "blocking": not name.startswith("i"), "comm_size": 4, "nodes": 1, "ppn": 4,
         "size_lo": 513, "size_hi": 1024, "ranks": 4, "calls": 40, "bytes": 40 * 1024, "time_ns": t,
         "time_min_ns": 1, "time_max_ns": 2, "exact_sizes": {"1024": 40}}
        for name, t in times_ns.items()]
    return data


def test_every_collective_with_five_percent_of_mpi_time_is_tuned_or_named_with_its_reason() -> None:
    """Issue 40: what tune --from-profile leaves is named, with why, from 5 % of the MPI time."""
    from tunempi.profile.advise import application_plan, not_tunable, profile_scope, unselectable_by_library

    profile = parse_profile(time_profile({"scatterv": 8_200_000, "ireduce": 1_000_000, "barrier": 600_000,
                                          "gatherv": 40_000, "allreduce": 100_000, "reduce": 60_000}, 10_000_000))
    reasons = unselectable_by_library(["reduce", "allreduce", "scatterv"],
                                      lambda name: [] if name in ("reduce", "scatterv") else ["a", "b"],
                                      lambda name: ["a"], "lib-1.0")  # scatterv: as Open MPI's coll/tuned
    assert reasons == {"reduce": "lib-1.0 offers no algorithms to choose from for it",
                       "scatterv": "lib-1.0 offers no algorithms to choose from for it"}
    left = not_tunable(profile, reasons)
    assert [n.text for n in left] == [
        "scatterv: 82% of MPI time; lib-1.0 offers no algorithms to choose from for it",
        "ireduce: 10% of MPI time; non-blocking: the bench engine measures only the blocking reduce",
        "barrier: 6% of MPI time; barrier moves no data: tune has no message size to select its algorithm by",
    ]  # gatherv (0.4 %) and reduce (0.6 %) are below 5 %; allreduce is tuned
    assert "allreduce" in profile_scope(profile).collectives
    tune_step = application_plan(profile, "p.json", "mpich", library_reasons=reasons)[0]
    assert tune_step.kind == "tune" and "not tuned: scatterv: 82% of MPI time; lib-1.0 offers" in tune_step.why
    assert "scatterv" in profile_scope(profile).collectives  # the engine measures it since issue 40
    no_files = unselectable_by_library(["allreduce"], lambda name: ["a"], lambda name: [], "lib-1.0")
    assert no_files == {"allreduce": "lib-1.0's tuning files cannot select an algorithm for it"}


def test_a_non_blocking_collective_s_time_is_start_plus_wait_and_tune_from_profile_takes_it() -> None:
    """Issue 41 step 4: a non-blocking record's time in the application is its start plus the waits that
    named it, so a solver whose iallreduce is cheap to start but waited for is planned, and tune's scope
    takes it with its sizes; online says why it does not switch it."""
    from tunempi.profile.advise import application_plan, not_tunable, profile_scope

    data = time_profile({"iallreduce": 100_000, "allreduce": 500_000}, 10_000_000)
    started = data["collectives"][0]
    started.update(size_lo=17, size_hi=32, exact_sizes={"32": 40}, completed=40, completion_ns=9_000_000,
                   wait_ns=3_900_000)
    profile = parse_profile(data)
    record = next(r for r in profile.collectives if r.collective == "iallreduce")
    assert not record.blocking and record.completed == 40 and record.mean_completion_s == pytest.approx(225e-6)
    assert record.time_s == pytest.approx(4.0e-3)  # 0.1 ms starting + 3.9 ms waiting
    assert [name for name, _, _ in profile.time_by_collective()] == ["iallreduce", "allreduce"]
    scope = profile_scope(profile)
    assert scope.collectives == ("iallreduce", "allreduce") and (scope.min_msg, scope.max_msg) == (32, 1024)
    assert not_tunable(profile) == ()
    online = application_plan(profile, "p.json", "mpich")[1]
    assert online.worth and "it switches iallreduce, allreduce" in online.why  # at their start
    old = parse_profile(time_profile({"iallreduce": 100_000}, 10_000_000))  # written before issue 41 step 4
    assert old.collectives[0].wait_ns == 0 and old.collectives[0].time_s == pytest.approx(1e-4)


def test_advise_names_what_it_cannot_tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    KnownLibrary(monkeypatch)
    output = run_advise(tmp_path, monkeypatch, time_profile({"neighbor_alltoall": 8_000_000, "allreduce": 2_000_000},
                                                            10_000_000))
    assert "not tunable: neighbor_alltoall: 80% of MPI time; the bench engine cannot measure it yet" in output


def test_alltoallw_is_tuned_where_the_library_selects_for_it_and_named_where_it_cannot() -> None:
    """Issue 40: the engine measures alltoallw; MPICH and Intel MPI choose its algorithm, Open MPI's coll/tuned
    has none: advise names it there with the reason, never as something the engine cannot measure."""
    from tunempi.profile.advise import engine_reason, not_tunable, profile_scope, unselectable_by_library

    assert engine_reason("alltoallw") is None
    profile = parse_profile(time_profile({"alltoallw": 9_000_000, "allreduce": 1_000_000}, 10_000_000))
    assert profile_scope(profile).collectives == ("alltoallw", "allreduce")
    offers = {"alltoallw": ["nb", "pairwise_sendrecv_replace", "scattered"], "allreduce": ["ring"]}
    assert not_tunable(profile, unselectable_by_library(["alltoallw", "allreduce"], offers.__getitem__,
                                                        offers.__getitem__, "mpich-5.0.2")) == ()
    reasons = unselectable_by_library(["alltoallw", "allreduce"], lambda name: [] if name == "alltoallw" else ["a"],
                                      lambda name: ["a"], "openmpi-5.0.11")
    assert [n.text for n in not_tunable(profile, reasons)] == [
        "alltoallw: 90% of MPI time; openmpi-5.0.11 offers no algorithms to choose from for it"]


def test_tune_scope_takes_the_dominant_count_shape_of_each_vector_collective_it_tunes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: tune --from-profile measures a vector collective with the shape most of its calls' counts had;
    advise prints it."""
    from types import SimpleNamespace

    from tunempi.profile.advise import count_shape_text, tune_scope

    data = time_profile({"alltoallv": 5_000_000, "allgatherv": 2_000_000, "reduce_scatter": 1_000_000,
                         "allreduce": 1_000_000}, 10_000_000)
    data["schema_version"] = 2
    shapes = {"alltoallv": {"uniform": 10, "skewed": 0, "sparse": 30},
              "allgatherv": {"uniform": 40, "skewed": 0, "sparse": 0},
              "reduce_scatter": {"uniform": 0, "skewed": 40, "sparse": 0}}
    for row in data["collectives"]:
        if row["collective"] in shapes:
            row["count_shapes"] = shapes[row["collective"]]
    profile = parse_profile(data)
    adapter = SimpleNamespace(  # every collective with two algorithms a file can select
        collectives=lambda: ["alltoallv", "allgatherv", "reduce_scatter", "allreduce"],
        algorithms=lambda name: [SimpleNamespace(name="a"), SimpleNamespace(name="b")],
        tuning_file_algorithms=lambda name: SimpleNamespace(selectable=("a", "b")))
    scope = tune_scope(profile, adapter, "lib-1.0")  # type: ignore[arg-type]
    assert set(scope.collectives) == {"alltoallv", "allgatherv", "reduce_scatter", "allreduce"}
    # reduce_scatter is classified, but the engine measures it with equal counts only: no distribution of it
    assert dict(scope.count_shapes) == {"alltoallv": "sparse", "allgatherv": "uniform"}
    assert count_shape_text("alltoallv", shapes["alltoallv"]) == "alltoallv: sparse (30 of 40 calls classified; uniform 10)"
    KnownLibrary(monkeypatch)
    output = run_advise(tmp_path, monkeypatch, data)
    assert "count shape: alltoallv: sparse (30 of 40 calls classified; uniform 10); tune --from-profile measures it so" \
        in output
    assert "count shape: reduce_scatter: skewed (40 of 40 calls classified); tune measures it with equal counts only" \
        in output


def test_tune_from_profile_takes_the_profile_s_shapes_unless_distribution_names_the_collective(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tunempi.cli.tune as cli_tune

    console = Console(width=250, record=True)
    monkeypatch.setattr(cli_tune, "output_console", lambda: console)
    shapes = {"alltoallv": "sparse", "allgatherv": "skewed", "gatherv": "uniform"}
    taken = cli_tune._profile_distributions(shapes, ["alltoallv", "allgatherv", "gatherv", "scatterv", "allreduce"],
                                            ["allgatherv=uniform"])
    assert taken == {"alltoallv": "sparse"}  # uniform is the engine's default: not a distribution to pass
    text = console.export_text()
    assert "count distributions from the profile (the shape most calls' counts had): alltoallv sparse, gatherv uniform" \
        in text
    assert "--distribution given for allgatherv (the profile's: skewed)" in text
    assert "scatterv: measured with equal counts on every rank (the profile records no count shapes for them)" in text
    assert cli_tune._profile_distributions(shapes, ["allreduce"], None) == {}
