"""tune --plan's model (tune/plan.py) with injected costs: no timing, no launch."""

from __future__ import annotations

import pytest

from tunempi.bench.protocol import MeasureSettings
from tunempi.space import Cell, FeatureSpace
from tunempi.store.dataset import DatasetRow
from tunempi.tune import plan
from tunempi.tune.plan import PointCosts, costs_from_measurements, predict, run_s

SETTINGS = MeasureSettings(warmup=10, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.1)


def space(ranks: int, nodes: int = 1, sizes: tuple[int, ...] = (8, 64), algorithms: int = 3) -> FeatureSpace:
    cells = tuple(Cell("allreduce", ranks, nodes, max(1, ranks // nodes), s) for s in sizes)
    return FeatureSpace("allreduce", cells, ("default", *(f"a{i}" for i in range(algorithms - 1))))


def costs(latency_us: float, iterations: int | None, *layouts: tuple[int, int, int]) -> PointCosts:
    keys = [(layout, "allreduce", size) for layout in layouts for size in (8, 64)]
    return PointCosts({k: latency_us for k in keys}, {k: iterations for k in keys if iterations}, "test",
                      engine_start_s=1.0, point_overhead_s=0.01)


def test_one_run_costs_its_iterations_at_the_latency_and_the_engine_caps_its_warm_up() -> None:
    assert run_s(100.0, 50, SETTINGS, 0.01) == pytest.approx(10 * 100e-6 + 50 * 100e-6 + 0.01)
    # a slow point: the warm-up stops at its share of the time cap, the stored iterations are what it ran
    assert run_s(10_000.0, 10, SETTINGS, 0.01) == pytest.approx(0.025 + 10 * 0.01 + 0.01)
    # a dataset gives no iterations: the typical count, stopped at the time cap, never below min_iters
    assert run_s(1.0, None, SETTINGS, 0.0) == pytest.approx((10 + plan.TYPICAL_ITERATIONS) * 1e-6)
    assert run_s(1000.0, None, SETTINGS, 0.0) == pytest.approx(0.01 + plan.TYPICAL_ITERATIONS * 1e-3)
    assert run_s(5000.0, None, SETTINGS, 0.0) == pytest.approx(0.025 + 0.1)  # 60 iterations: past the cap
    assert run_s(50_000.0, None, SETTINGS, 0.0) == pytest.approx(0.1 + 10 * 0.05)
    # nothing measured: the documented latency, growing with the size
    unknown = PointCosts(point_overhead_s=0.0)
    assert plan.cell_run_s(Cell("allreduce", 2, 1, 2, 1 << 20), unknown, SETTINGS) > \
        plan.cell_run_s(Cell("allreduce", 2, 1, 2, 8), unknown, SETTINGS) > 0


def test_the_prediction_counts_exploring_and_deciding_runs_and_launches_per_layout() -> None:
    spaces = {"allreduce": space(2)}
    predicted = predict(spaces, SETTINGS, costs(100.0, 50, (2, 1, 2)), launches=4)
    exploring = plan.EXPLORE_RUNS_PER_POINT * 2 * 3
    deciding = 3 * plan.CONTENDERS * 2
    assert predicted.runs == round(exploring + deciding)
    assert predicted.launches == plan.EXPLORE_LAUNCHES + 3
    one_run = run_s(100.0, 50, SETTINGS, 0.01)
    assert predicted.wall_s == pytest.approx(predicted.launches * 1.0 + (exploring + deciding) * one_run
                                             + plan.MODEL_S_PER_ROUND)
    # one launch: no deciding block
    assert predict(spaces, SETTINGS, costs(100.0, 50, (2, 1, 2)), launches=1).launches == plan.EXPLORE_LAUNCHES


def test_layouts_add_up_when_serial_and_share_the_nodes_otherwise() -> None:
    two = {"allreduce": FeatureSpace("allreduce", space(2, 2).cells + space(4, 2).cells, space(2).algorithms)}
    c = costs(100.0, 50, (2, 2, 1), (4, 2, 2))
    serial = predict(two, SETTINGS, c, launches=4, allocation_nodes=2, serial=True)
    side_by_side = predict(two, SETTINGS, c, launches=4, allocation_nodes=4, serial=False)
    assert serial.runs == side_by_side.runs and serial.launches == side_by_side.launches
    assert side_by_side.wall_s == pytest.approx(serial.wall_s / 2)  # two equal layouts on 4 nodes at once
    # on 2 nodes both 2-node layouts still wait for each other
    assert predict(two, SETTINGS, c, launches=4, allocation_nodes=2, serial=False).wall_s == pytest.approx(serial.wall_s)


def test_costs_come_from_the_nearest_stored_size_at_the_layout_and_a_dataset_gives_latencies_only() -> None:
    rows = [DatasetRow("peak", "openmpi", "allreduce", "ring", 512, 16, 32, 1024, 0, 300.0),
            DatasetRow("peak", "openmpi", "allreduce", "default", 512, 16, 32, 1024, 0, 100.0),
            DatasetRow("peak", "openmpi", "allreduce", "ring", 512, 16, 32, 8, 0, 20.0)]
    c = costs_from_measurements(rows, "dataset")
    assert c.nearest(Cell("allreduce", 512, 16, 32, 2048)) == (200.0, None)  # median over algorithms
    assert c.nearest(Cell("allreduce", 512, 16, 32, 4)) == (20.0, None)
    assert c.nearest(Cell("allreduce", 256, 8, 32, 8)) == (20.0, None)  # the nearest layout measured
    assert c.nearest(Cell("bcast", 512, 16, 32, 8)) == (None, None)  # never measured
    # a slower library costs more, with everything else the same
    spaces = {"allreduce": space(2)}
    assert predict(spaces, SETTINGS, costs(500.0, 50, (2, 1, 2)), launches=4).wall_s > \
        predict(spaces, SETTINGS, costs(100.0, 50, (2, 1, 2)), launches=4).wall_s
