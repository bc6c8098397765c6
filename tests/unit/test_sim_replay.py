from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from tunempi.sim import CostModel, Oracle, ReplayBackend, load_frame, simulate
from tunempi.sim.run import Trace
from tunempi.sim.synthetic import synthetic_frame
from tunempi.space import Cell, FeatureSpace
from tunempi.strategy import Request, make_strategy
from tunempi.strategy.base import MeasurementRecord
from tunempi.strategy.tunempi import COST_STAIRS


def _tiny() -> pd.DataFrame:
    """Two cells, algorithms a and b, plus default; medians chosen for a known answer."""
    rows = []
    data = {
        (2, 8): {"a": [10, 12, 11], "b": [20, 19, 21], "default": [15, 15, 15]},
        (4, 16384): {"a": [40, 44, 42], "b": [21, 20, 22]},  # no default here
    }
    for (ranks, size), algos in data.items():
        for algorithm, values in algos.items():
            for run, value in enumerate(values):
                rows.append(("bcast", algorithm, ranks, 1, ranks, size, run, float(value)))
    return pd.DataFrame(rows, columns=["collective", "algorithm", "ranks", "nodes", "ppn", "msg_bytes", "run",
                                       "latency_us"])


def test_slowdown_metrics_on_a_hand_made_dataset() -> None:
    oracle = Oracle(ReplayBackend(_tiny(), "bcast"))
    small, large = Cell("bcast", 2, 1, 2, 8), Cell("bcast", 4, 1, 4, 16384)
    assert oracle.best_algorithm == ["a", "b"]
    # medians: small a=11 b=20; large a=42 b=21
    assert oracle.slowdowns({small: "b", large: "b"}).tolist() == pytest.approx([20 / 11, 1.0])
    assert oracle.average_slowdown({small: "b", large: "a"}) == pytest.approx((20 / 11 + 2.0) / 2)
    assert oracle.geometric_slowdown({small: "b", large: "a"}) == pytest.approx(np.sqrt(20 / 11 * 2.0))
    assert oracle.default_slowdown() == pytest.approx(15 / 11)  # only where default was measured
    # `default` is never a candidate, and a missing selection is charged the worst algorithm
    assert oracle.average_slowdown({small: "default"}) == pytest.approx((20 / 11 + 2.0) / 2)
    # exhaustive cost: 4 launches + 1200 iterations at 11 and 20 us + 110 iterations at 42 and 21 us
    expected = 4 * 1.0 + 1200 * (11 + 20) * 1e-6 + 110 * (42 + 21) * 1e-6
    assert oracle.exhaustive_cost() == pytest.approx(expected)


def test_cost_model_iterations_follow_osu() -> None:
    model = CostModel()
    assert model.iterations(8192) == 1200 and model.iterations(8193) == 110
    assert model.run_seconds(8, 100.0) == pytest.approx(1.0 + 1200 * 100e-6)
    assert model.run_seconds(8, None) == 1.0  # a failed run still pays its launch


def test_replay_cycles_through_real_runs_and_fails_missing_points() -> None:
    backend = ReplayBackend(_tiny(), "bcast", seed=4)
    small = Cell("bcast", 2, 1, 2, 8)
    values = [r.latency_us for r in backend.measure([Request(small, ("a",), repeats=3)])]
    assert sorted(values) == [10, 11, 12]  # each stored run once before any repeats
    space = backend.space()
    assert space.algorithms == ("a", "b")  # default is not a candidate
    failed = backend.measure([Request(Cell("bcast", 8, 1, 8, 8), ("a",))])[0]
    assert not failed.ok and failed.cost_s == 1.0


def test_simulate_summary_keys_and_exhaustive_reaches_oracle() -> None:
    frame = synthetic_frame(ranks=(2, 4, 8), msg_sizes=(4, 256, 16384), noise=0.0)
    small_forest = {"n_estimators": 10}
    summaries, traces = simulate(frame, "allreduce", ["exhaustive", "random"], seeds=2, budget_fraction=1.0,
                                 params={"exhaustive": small_forest, "random": small_forest})
    keys = {"strategy", "seeds", "avg_slowdown", "geo_slowdown", "default_slowdown", "cost_s",
            "exhaustive_cost_s", "cost_fraction", "cost_to_1_03_s"}
    for summary in summaries:
        assert keys <= set(summary)
        assert summary["seeds"] == 2 and summary["seed_values"] == [0, 1]
        assert summary["avg_slowdown"] == pytest.approx(1.0)  # every cell measured, no noise
        assert summary["cost_fraction"] == pytest.approx(1.0)
        assert summary["cost_to_1_03_s"] is not None and summary["cost_to_1_03_s"] <= summary["cost_s"] + 1e-6
        assert summary["default_slowdown"] > 1.0
    curve = np.array(traces["exhaustive"][0].avg_slowdown)
    assert curve[-1] == pytest.approx(1.0)


def test_train_max_ranks_reports_extrapolated_cells() -> None:
    summaries, _ = simulate(synthetic_frame(), "allreduce", ["tunempi"], seeds=1, max_ranks=8)
    summary = summaries[0]
    assert summary["train_max_ranks"] == 8
    assert summary["avg_slowdown_extrapolated"] is not None and summary["avg_slowdown_measurable"] is not None


def _app() -> typer.Typer:
    from tunempi.cli import simulate as simulate_cli

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """tunempi (test stand-in: a callback keeps `simulate` a subcommand)."""

    simulate_cli.register(app)
    return app


def test_cli_json_plot_and_usage_errors(tmp_path: Path) -> None:
    from tunempi.store.dataset import DatasetRow, write_dataset

    frame = synthetic_frame(ranks=(2, 4, 8, 16), msg_sizes=(4, 64, 1024, 16384))
    path = tmp_path / "synthetic.csv.gz"
    write_dataset((DatasetRow(system="synthetic", library="none", **row) for row in frame.to_dict("records")),
                  path)
    runner = CliRunner()
    png = tmp_path / "curves.png"
    result = runner.invoke(_app(), ["simulate", "--dataset", str(path), "--collective", "allreduce",
                                    "--compare", "random,tunempi", "--seeds", "1", "--budget-fraction", "0.3",
                                    "--plot", str(png), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["strategy"] for d in data] == ["random", "tunempi"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = runner.invoke(_app(), ["simulate", "--dataset", str(path), "--strategy", "tunempi", "--seeds", "1",
                                   "--budget-fraction", "0.2"])
    assert table.exit_code == 0 and "tunempi" in table.stdout
    from tunempi.errors import UsageError

    bad = runner.invoke(_app(), ["simulate", "--dataset", str(path), "--strategy", "bogus"])
    assert isinstance(bad.exception, UsageError) and "acclaim" in str(bad.exception)


def test_cli_passes_strategy_settings_and_refuses_bad_ones(tmp_path: Path) -> None:
    """`--param tunempi.extrapolation=trend` reaches the strategy (recorded in the JSON; beyond the measured
    scales it selects otherwise than the default carry rule); a bad key, value or form is a usage error."""
    from tunempi.errors import UsageError
    from tunempi.store.dataset import DatasetRow, write_dataset

    frame = synthetic_frame(seed=3, collective="allreduce")
    path = tmp_path / "synthetic.csv.gz"
    write_dataset((DatasetRow(system="synthetic", library="none", **row) for row in frame.to_dict("records")), path)
    runner = CliRunner()
    common = ["simulate", "--dataset", str(path), "--strategy", "tunempi", "--seeds", "1", "--budget-fraction", "0.5",
              "--train-max-ranks", "8", "--format", "json"]
    carried = json.loads(runner.invoke(_app(), common).stdout)[0]
    result = runner.invoke(_app(), [*common, "--param", "tunempi.extrapolation=trend", "--param", "tunempi.batch_size=3"])
    assert result.exit_code == 0, result.output
    trend = json.loads(result.stdout)[0]
    assert trend["params"] == {"extrapolation": "trend", "batch_size": 3} and carried["params"] == {}
    assert trend["avg_slowdown_extrapolated"] != carried["avg_slowdown_extrapolated"]
    for bad, said in (("tunempi.extrapolation=sideways", "extrapolation must be"), ("tunempi.no_such=1", "no_such"),
                      ("extrapolation=trend", "STRATEGY.KEY=VALUE"), ("random.n_estimators=5", "not among")):
        refused = runner.invoke(_app(), [*common, "--param", bad])
        assert isinstance(refused.exception, UsageError) and said in str(refused.exception), (bad, refused.output)


def test_peak_dataset_quick_run(peak_dataset: Path) -> None:
    frame = load_frame(peak_dataset)
    summaries, traces = simulate(frame, "allreduce", ["tunempi"], seeds=1, budget_fraction=0.03)
    summary = summaries[0]
    assert summary["default_slowdown"] == pytest.approx(1.628, abs=0.01)  # the anchors' figure
    _assert_stops_at_the_budget(traces["tunempi"][0], 0.03 * summary["exhaustive_cost_s"])
    assert 1.0 <= summary["avg_slowdown"] < summary["default_slowdown"]


def test_engine_cost_model_charges_one_launch_per_layout_not_per_point() -> None:
    backend = ReplayBackend(_tiny(), "bcast", seed=0, cost_model=CostModel.named("engine"))
    small, large = Cell("bcast", 2, 1, 2, 8), Cell("bcast", 4, 1, 4, 16384)
    first = backend.measure([Request(small, ("a", "b"), repeats=2)])
    assert [r.launches for r in first] == [1, 0, 0, 0]  # the engine for 2 ranks starts once
    for record in first[1:]:  # later points cost their iterations only
        assert record.cost_s == pytest.approx(1200 * record.latency_us * 1e-6)
    assert backend.measure([Request(small, ("a",))])[0].launches == 0  # still up in a later batch
    other = backend.measure([Request(large, ("a", "b"))])
    assert [r.launches for r in other] == [1, 0]  # a new layout pays its own launch
    # exhaustive under the engine model: 2 layouts + iterations; under acclaim's model: 4 launches
    oracle = Oracle(backend)
    iterations = 1200 * (11 + 20) * 1e-6 + 110 * (42 + 21) * 1e-6
    assert oracle.exhaustive_cost() == pytest.approx(2.0 + iterations)
    assert oracle.exhaustive_cost(CostModel.named("acclaim")) == pytest.approx(4.0 + iterations)


def test_engine_cost_model_in_a_whole_simulation() -> None:
    frame = synthetic_frame(ranks=(2, 4, 8), msg_sizes=(4, 256, 16384), noise=0.0)
    small_forest = {"exhaustive": {"n_estimators": 10}}
    engine, traces = simulate(frame, "allreduce", ["exhaustive"], seeds=1, params=small_forest,
                              cost_model=CostModel.named("engine"))
    acclaim, _ = simulate(frame, "allreduce", ["exhaustive"], seeds=1, params=small_forest)
    assert engine[0]["cost_model"] == "engine" and acclaim[0]["cost_model"] == "acclaim"
    assert engine[0]["launches"] == 3  # one per layout (2, 4, 8 ranks)
    assert acclaim[0]["launches"] > 20  # one per (cell, algorithm)
    assert engine[0]["cost_fraction"] == pytest.approx(1.0)
    assert engine[0]["exhaustive_cost_s"] < acclaim[0]["exhaustive_cost_s"] - 20


def test_warm_start_gets_small_scales_free_and_scores_the_rest() -> None:
    frame = synthetic_frame(ranks=(2, 4, 8, 16, 32), msg_sizes=(4, 64, 1024, 16384))
    backend = ReplayBackend(frame, "allreduce", seed=0)
    prior = backend.prior_records(8)
    assert prior and all(r.cell.ranks <= 8 and r.cost_s == 0 and r.launches == 0 for r in prior)
    assert len({(r.cell, r.algorithm) for r in prior}) == len(prior)  # one run per point
    options = {"seeds": 1, "budget_fraction": 5.0, "params": {"exhaustive": {"n_estimators": 10}}}
    warm, traces = simulate(frame, "allreduce", ["exhaustive"], prior_max_ranks=8, **options)
    cold, _ = simulate(frame, "allreduce", ["exhaustive"], evaluate_above=8, **options)
    assert warm[0]["prior_max_ranks"] == 8 and warm[0]["evaluated_above_ranks"] == 8
    # both are scored on the 16- and 32-rank cells, against the exhaustive cost of those cells only
    assert warm[0]["exhaustive_cost_s"] == pytest.approx(cold[0]["exhaustive_cost_s"])
    assert warm[0]["cost_fraction"] == pytest.approx(1.0, abs=0.02)  # measured only the rest (noisy runs)
    assert cold[0]["cost_fraction"] > 2.0  # paid for the 2-, 4- and 8-rank cells too
    assert warm[0]["avg_slowdown"] < 1.05 and cold[0]["avg_slowdown"] < 1.05


def _assert_stops_at_the_budget(trace: Trace, budget_s: float) -> None:
    """What the code guarantees, on any machine: the strategy checks its budget before each ask, so every
    batch but the last starts below the budget; the overshoot is the last batch's cost, whatever it was."""
    assert trace.cost_s == pytest.approx(sum(trace.step_cost_s))
    assert sum(trace.step_cost_s[:-1]) < budget_s


# Loose pins of the default strategy on Peak (seed 0, 15 % of the exhaustive cost, one launch per point). A
# replay is deterministic on one machine but not across machines (the forest's float order, BLAS kernels),
# so a pin must hold for any trajectory, not this machine's one: over seeds 0-4 (5 trajectories, 2026-11-27)
# the slowdown at 15 % was 1.024-1.062 (allreduce) and 1.009-1.045 (alltoall), at 10 % up to 1.18
# (allreduce); the pins sit about twice as far above 1. Close figures: docs/measurements/strategies.md.
@pytest.mark.parametrize(("collective", "at_15_percent"), [("allreduce", 1.13), ("alltoall", 1.10)])
def test_peak_curve_key_points_regression(peak_dataset: Path, collective: str, at_15_percent: float) -> None:
    summaries, traces = simulate(load_frame(peak_dataset), collective, ["tunempi"], seeds=1,
                                 budget_fraction=0.15)
    summary = summaries[0]
    assert summary["slowdown_at_fraction"]["0.15"] <= at_15_percent
    assert summary["slowdown_at_fraction"]["0.15"] < summary["default_slowdown"] - 0.2
    assert summary["slowdown_at_fraction"]["0.1"] < summary["default_slowdown"]  # learning by then
    _assert_stops_at_the_budget(traces["tunempi"][0], 0.15 * summary["exhaustive_cost_s"])


@pytest.mark.parametrize(("sweep", "collective", "above_limit"), [
    # Seeds 0-4 (2026-11-27): Peak alltoall 1.030-1.036, pr7730 bcast 1.029-1.092; all cells 1.010-1.031.
    # Peak alltoall: 1.04 over 5 seeds, 1.03 on this seed; the log-linear trend ("trend") gave 1.33, on this
    # seed 2.04.
    ("peak", "alltoall", 1.15),
    # pr7730 bcast: 1.07 over 5 seeds, 1.09 on this seed; carrying at the same bytes per rank (the rule before
    # CARRY_EXPONENT) gave 1.24 on this seed, the trend 1.16.
    ("pr7730", "bcast", 1.12),
])
def test_peak_extrapolation_regression(peak_dataset: Path, peak_pr7730_dataset: Path, sweep: str, collective: str,
                                       above_limit: float) -> None:
    """Pins of the default selection beyond the measured scales (issue 15's goal 2; seed 0, one launch per
    point, only <= 128 ranks measured): the 256- and 512-rank cells, and all cells within 1.10."""
    dataset = peak_dataset if sweep == "peak" else peak_pr7730_dataset
    summaries, _ = simulate(load_frame(dataset), collective, ["tunempi"], seeds=1, budget_fraction=0.5,
                            max_ranks=128)
    assert summaries[0]["avg_slowdown_extrapolated"] <= above_limit
    assert summaries[0]["avg_slowdown"] <= 1.10


def test_parallel_runs_give_the_same_summaries() -> None:
    frame = synthetic_frame(ranks=(2, 4, 8), msg_sizes=(4, 256, 16384))
    options = {"seeds": 2, "budget_fraction": 0.5, "params": {"random": {"n_estimators": 10}}}
    serial, _ = simulate(frame, "allreduce", ["random"], **options)
    parallel, _ = simulate(frame, "allreduce", ["random"], jobs=2, **options)
    assert parallel[0]["curve"] == serial[0]["curve"]
    assert parallel[0]["cost_s"] == serial[0]["cost_s"]


def test_cells_where_only_the_default_ran_are_not_cells_to_tune() -> None:
    frame = _tiny()
    only_default = frame[(frame["ranks"] == 2) & (frame["algorithm"] == "default")].assign(ranks=8, ppn=8)
    backend = ReplayBackend(pd.concat([frame, only_default]), "bcast")
    assert [c.ranks for c in backend.cells] == [2, 4]
    assert Oracle(backend).best_algorithm == ["a", "b"]


def _first_batch_after_the_initial_design(frame: pd.DataFrame, **params: object) -> tuple[list[Cell], list[Cell], float]:
    """Peak allgather, seed 3, one launch per point: the cells of the initial design, those of the next
    batch, and that batch's cost as a fraction of the exhaustive sweep's."""
    backend = ReplayBackend(frame, "allgather", seed=3)
    space = backend.space()
    exhaustive = Oracle(backend).exhaustive_cost()
    strategy = make_strategy("tunempi", space, seed=3, budget_s=exhaustive, **params)
    initial = strategy.ask()
    strategy.tell(backend.measure(initial))
    batch = strategy.ask()
    spent = strategy.spent_s
    strategy.tell(backend.measure(batch))
    return [r.cell for r in initial], [r.cell for r in batch], (strategy.spent_s - spent) / exhaustive


def test_tunempi_cost_floor_keeps_the_first_batch_cheap(peak_dataset: Path) -> None:
    """After the initial design (5 cells) the model predicts Peak allgather at 512 ranks x 1 MiB e^7.9 us
    (measured: e^13-e^14). Without a floor under the predicted cost the next batch goes there: 0.17 of the
    exhaustive cost after 0.014 was spent. With the default `volume_floor` (each rank moves (ranks - 1) x
    size bytes, at no more than the best rate measured) it stays cheap."""
    frame = load_frame(peak_dataset)
    _, batch, cost = _first_batch_after_the_initial_design(frame)
    assert (512, 1 << 20) not in {(c.ranks, c.msg_bytes) for c in batch}
    assert cost < 0.03
    _, unguarded, unguarded_cost = _first_batch_after_the_initial_design(frame, volume_floor=False)
    assert (512, 1 << 20) in {(c.ranks, c.msg_bytes) for c in unguarded}
    assert unguarded_cost > 0.1


def test_tunempi_stairs_step_up_to_costly_cells(peak_dataset: Path) -> None:
    """With `stairs=COST_STAIRS` (opt-in) a cell is measured only within 2 doublings of ranks and 4 of size
    above a measured one: the same case as above, without the floor, stays cheap too."""
    frame = load_frame(peak_dataset)
    initial, batch, cost = _first_batch_after_the_initial_design(frame, stairs=COST_STAIRS, volume_floor=False)
    for cell in batch:
        assert any(np.log2(cell.ranks / c.ranks) <= 2 and np.log2(cell.msg_bytes / c.msg_bytes) <= 4
                   for c in initial), cell
    assert cost < 0.03


def test_volume_floor_bounds_the_predicted_latency_of_block_collectives() -> None:
    """The floor: (ranks - 1) x size bytes at the best rate of any run at that size or larger; none for a
    whole-buffer collective, none for sizes above every measured one."""
    def floor(collective: str) -> dict[tuple[int, int], float]:
        cells = tuple(Cell(collective, ranks, 1, ranks, size) for ranks in (2, 4, 64) for size in (8, 1024, 1 << 20))
        space = FeatureSpace(collective, cells, ("a", "b"))
        strategy = make_strategy("tunempi", space, seed=0)
        # 2 ranks x 1 KiB in 1 us (1024 B/us: the best rate), 4 ranks x 8 B in 1 us (24 B/us)
        strategy.tell([MeasurementRecord(Cell(collective, 2, 1, 2, 1024), "a", 1.0, iterations=10, cost_s=1.0),
                       MeasurementRecord(Cell(collective, 4, 1, 4, 8), "b", 1.0, iterations=10, cost_s=1.0)])
        values = strategy._volume_floor_us([r for r in strategy.records if r.ok])
        return {(c.ranks, c.msg_bytes): float(v) for c, v in zip(space.cells, values, strict=True)}

    allgather = floor("allgather")
    assert allgather[(64, 1024)] == pytest.approx(63 * 1024 / 1024)
    assert allgather[(64, 8)] == pytest.approx(63 * 8 / 1024)  # the 1 KiB rate counts for 8 B too
    assert allgather[(2, 1 << 20)] == 0.0  # no run at 1 MiB or larger: no floor
    assert not any(floor("allreduce").values())


def test_scale_doubling_weight_counts_a_doubling_of_ranks_twice() -> None:
    """The doubt added far from an algorithm's measurements: with `scale_doubling_weight=2` one doubling of
    ranks adds as much as two of size (opt-in: a trend carried to another scale is checked sooner)."""
    sizes = (8, 16, 32, 64, 128, 256)
    cells = tuple(Cell("allreduce", ranks, 1, ranks, size) for ranks in (2, 4, 8) for size in sizes)
    space = FeatureSpace("allreduce", cells, ("a",))
    records = [MeasurementRecord(Cell("allreduce", 2, 1, 2, size), "a", 1.0 + 0.1 * k, iterations=10, cost_s=1.0)
               for k, size in enumerate(sizes[:4])]

    def std(weight: float) -> dict[tuple[int, int], float]:
        strategy = make_strategy("tunempi", space, seed=0, scale_doubling_weight=weight, forest_blend=0.0)
        strategy.tell(records)
        _, deviation, _ = strategy._posterior()
        return {(c.ranks, c.msg_bytes): float(d) for c, d in zip(space.cells, deviation[:, 0], strict=True)}

    plain, weighted = std(1.0), std(2.0)
    # Two size doublings from the nearest measurement (2 ranks x 64 B): 0.2 either way.
    assert weighted[(2, 256)] == pytest.approx(plain[(2, 256)])
    # One and two doublings of ranks: (0.1 x 2 x d)^2 instead of (0.1 x d)^2 on top of the GP's own variance.
    for ranks, doublings in ((4, 1), (8, 2)):
        for size in sizes[:4]:
            extra = weighted[(ranks, size)] ** 2 - plain[(ranks, size)] ** 2
            assert extra == pytest.approx((0.2 * doublings) ** 2 - (0.1 * doublings) ** 2, rel=1e-6)


def test_scale_doubling_weight_must_be_positive() -> None:
    space = FeatureSpace("allreduce", (Cell("allreduce", 2, 1, 2, 8),), ("a",))
    with pytest.raises(ValueError, match="scale_doubling_weight"):
        make_strategy("tunempi", space, seed=0, scale_doubling_weight=0.0)


def test_oracle_is_known_where_the_sweep_ran_half_its_fullest_cell() -> None:
    """A cell counts as known where the dataset ran at least half of the algorithms it ran in the same
    collective's fullest cell; collectives are judged apart, and a cell with none is never known."""
    from tunempi.sim.metrics import oracle_known

    known = oracle_known(["bcast", "bcast", "bcast", "bcast", "alltoall", "alltoall"], [4, 2, 1, 0, 1, 3])
    assert known.tolist() == [True, True, False, False, False, True]
