"""tune --plan's model (tune/plan.py) with injected costs: no timing, no launch."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tunempi.bench.protocol import MeasureSettings
from tunempi.space import Cell, FeatureSpace
from tunempi.store.dataset import DatasetRow
from tunempi.store.fits import FitTiming
from tunempi.strategy import MeasurementRecord
from tunempi.tune import plan
from tunempi.tune.driver import DEFAULT_MARGIN, prefer_default
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
    assert predicted.launches == 1 + 3  # switched at run time: a fresh launch per deciding block
    one_run = run_s(100.0, 50, SETTINGS, 0.01)
    assert predicted.wall_s == pytest.approx(predicted.launches * 1.0 + (exploring + deciding) * one_run
                                             + plan.MODEL_S_PER_ROUND + 3 * plan.DECIDING_BLOCK_S)
    # one launch: no deciding block
    assert predict(spaces, SETTINGS, costs(100.0, 50, (2, 1, 2)), launches=1).launches == 1


def test_the_machines_state_blocks_are_a_bound_beside_the_wall_time_not_in_it() -> None:
    """tune/driver.py adds deciding blocks for the machine's state (a pause, then a block of every layout
    short of its reference) until STATE_WAIT_S has passed, and only with more than 2 launches: the most they
    can add is STATE_WAIT_S + a pause + one more block of every layout; the wall time leaves them out."""
    from tunempi.tune.machine_state import STATE_PAUSE_S, STATE_WAIT_S

    one_run = run_s(100.0, 50, SETTINGS, 0.01)
    block_s = 1.0 + plan.CONTENDERS * 2 * one_run + plan.DECIDING_BLOCK_S  # a fresh launch, 2 cells x contenders
    one = predict({"allreduce": space(2)}, SETTINGS, costs(100.0, 50, (2, 1, 2)), launches=4)
    assert one.state_s == pytest.approx(STATE_WAIT_S + STATE_PAUSE_S + block_s)
    two = {"allreduce": FeatureSpace("allreduce", space(2, 2).cells + space(4, 2).cells, space(2).algorithms)}
    both = predict(two, SETTINGS, costs(100.0, 50, (2, 2, 1), (4, 2, 2)), launches=4, allocation_nodes=2)
    start = 1.0 + plan.ENGINE_START_PER_NODE_S  # two nodes
    assert both.state_s == pytest.approx(STATE_WAIT_S + STATE_PAUSE_S + 2 * (block_s - 1.0 + start))
    for launches in (1, 2):
        assert predict({"allreduce": space(2)}, SETTINGS, costs(100.0, 50, (2, 1, 2)), launches=launches).state_s == 0
    # recorded in the manifest's plan and read back; an actual has none
    assert plan.Prediction.from_dict(one.to_dict()) == one
    assert "state_s" not in plan.Prediction(5.0, 3, 100).to_dict()


def test_where_ranks_take_turns_on_the_cores_the_plan_counts_the_third_block_and_no_state_bound() -> None:
    """tune/driver.py: a layout whose ranks take turns on the cores (4 ranks on 2: one node's, or 2 emulated
    nodes x 2 sharing this machine's) gets TURNS_BLOCKS deciding blocks with 3 launches, and no block for the
    machine's state (its probe reads the turns). Real nodes of 2 cores hold 2 ranks each: neither."""
    two = {"allreduce": FeatureSpace("allreduce", space(4, 2).cells, space(2).algorithms)}
    c = costs(100.0, 50, (4, 2, 2))
    real = predict(two, SETTINGS, c, launches=3, allocation_nodes=2, cores=2)
    emulated = predict(two, SETTINGS, c, launches=3, allocation_nodes=2, cores=2, emulated=True)
    assert real.state_s > 0 and emulated.state_s == 0
    block_runs = plan.CONTENDERS * 2  # switched: one run of each contender in each of the 2 cells
    assert emulated.runs - real.runs == block_runs and emulated.launches - real.launches == 1
    assert emulated.wall_s > real.wall_s
    # 4 launches already make 3 deciding blocks: the same runs, still no state bound
    four = predict(two, SETTINGS, c, launches=4, allocation_nodes=2, cores=2, emulated=True)
    assert four.runs == predict(two, SETTINGS, c, launches=4, allocation_nodes=2, cores=2).runs and four.state_s == 0


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


# --- the exploring runs replayed (issue 57 part 4): tune's own strategy on a latency for every point ---

REPLAY_SIZES = tuple(4 << i for i in range(16))
#: how much slower than the default each algorithm is, at every size: one clear winner (a0)
SLOWDOWN = {"default": 1.0, "a0": 0.5, "a1": 3.0, "a2": 4.0, "a3": 5.0, "a4": 6.0}
LIVE = {"batch_size": 32, "regret_tolerance": 0.05, "max_repeats": 1, "contention": 0.3}  # job.LIVE_STRATEGY_PARAMS


def replay_space() -> FeatureSpace:
    return FeatureSpace("allreduce", tuple(Cell("allreduce", 4, 1, 4, s) for s in REPLAY_SIZES), tuple(SLOWDOWN))


def replay_costs(base_us: float = 100.0, leave_out: str | None = None) -> PointCosts:
    """Three runs of every point (1 % apart), slower algorithms by SLOWDOWN; `leave_out`: an algorithm never run."""
    runs = {((4, 1, 4), "allreduce", s, a): tuple((base_us + s / 100) * f * (1 + 0.01 * k) for k in range(3))
            for s in REPLAY_SIZES for a, f in SLOWDOWN.items() if a != leave_out}
    return PointCosts({}, {}, "table", runs_us=runs)


def test_where_every_point_has_latencies_the_strategy_replayed_on_them_gives_the_exploring_runs() -> None:
    spaces = {"allreduce": replay_space()}
    points = len(REPLAY_SIZES) * len(SLOWDOWN)
    constant = predict(spaces, SETTINGS, replay_costs(leave_out="a4"), launches=1, strategy="tunempi",
                       strategy_params=LIVE)
    assert constant.runs == round(plan.EXPLORE_RUNS_PER_POINT * points)  # an algorithm never run: the constant
    replayed = predict(spaces, SETTINGS, replay_costs(), launches=1, strategy="tunempi", strategy_params=LIVE)
    # one clear winner: the strategy stops on its own long before it measured every point
    assert 0 < replayed.runs < points / 2 < constant.runs
    # seeded: the same plan twice; its seconds are the replayed runs' own (each at its algorithm's latency)
    assert predict(spaces, SETTINGS, replay_costs(), launches=1, strategy="tunempi", strategy_params=LIVE) == replayed
    explored = plan.replayed_exploration(spaces, replay_costs(), SETTINGS, strategy="tunempi", params=LIVE)
    runs, seconds = explored.explored["allreduce"][(4, 1, 4)]
    assert round(runs) == replayed.runs
    # the model's seconds: the replay's rounds after its initial design, MODEL_S_PER_ROUND each
    assert explored.model_s > 0 and explored.model_s / plan.MODEL_S_PER_ROUND == pytest.approx(
        round(explored.model_s / plan.MODEL_S_PER_ROUND))
    assert replayed.wall_s == pytest.approx(plan.ENGINE_START_S + seconds + explored.model_s)
    # the deciding blocks: what tune would contest after that exploration, 3 runs each per block under files:
    # the default and the winner in every cell (a0 overrides the default everywhere, and the confirmation round
    # measured whichever of the two the exploration left out)
    assert set(explored.contenders) == set(replay_space().cells)
    assert set(explored.contenders.values()) == {2}
    decided = predict(spaces, SETTINGS, replay_costs(), launches=4, strategy="tunempi", strategy_params=LIVE,
                      under_files={"allreduce"})
    assert decided.runs == round(runs + 3 * 3 * sum(explored.contenders.values()))


def test_the_replays_deciding_blocks_contest_only_the_cells_tune_would() -> None:
    # points of 10 ms, fits of 0.3 s: after the initial design another round would cost more than measuring every
    # point once, and the rest more than a round: the guard stops there, as tune's did at Open MPI's 4 ranks.
    # and the default fastest everywhere: a cell is contested only where the exploration measured another
    default_wins = {a: 1.0 if a == "default" else 2.0 + i for i, a in enumerate(SLOWDOWN)}

    def dear_points(requests):
        return [dataclasses.replace(record, cost_s=0.01) for record in cheap_points(requests, default_wins)]

    replayed = plan.replay_exploration({"allreduce": replay_space()}, {"allreduce": dear_points}, strategy="tunempi",
                                       params=LIVE, seed=1, model_s_per_round=None, clock=FitClock(0.3))
    explored = replayed.strategies["allreduce"]
    measured = {(record.cell, record.algorithm) for record in explored.records}
    assert len(measured) < len(REPLAY_SIZES) * len(SLOWDOWN) / 2
    # tune's confirmation round (driver.confirmation_requests_of) came after: every override the exploration
    # would write has both sides measured
    overrides = {cell: a for cell, a in prefer_default(explored, explored.select(), DEFAULT_MARGIN).items()
                 if a != "default"}
    assert all({(cell, "default"), (cell, a)} <= measured for cell, a in overrides.items())
    # tune contests a cell only where the default and another algorithm were measured (launch_blocks.contenders):
    # none elsewhere (the plan counted 2 in every cell before)
    counts = plan.replayed_contenders({"allreduce": explored})
    assert set(counts) == set(replay_space().cells)
    for cell, count in counts.items():
        contested = (cell, "default") in measured and any((cell, a) in measured for a in SLOWDOWN if a != "default")
        assert count >= 2 if contested else count == 0
    assert 0 in counts.values() and max(counts.values()) >= 2


def cheap_points(requests, slowdown=SLOWDOWN):
    return [MeasurementRecord(r.cell, a, (100 + r.cell.msg_bytes / 100) * slowdown[a], launches=0, cost_s=1e-4)
            for r in requests for a in r.algorithms]


class FitClock:
    """A clock that moves `fit_s` between the two reads around each round's asks (the replay reads it only there)."""

    def __init__(self, fit_s: float) -> None:
        self.now, self.fit_s, self.reads = 0.0, fit_s, 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.fit_s
        return self.now


def test_the_replay_ends_where_tunes_guard_would_and_measures_the_rest_of_cheap_points() -> None:
    # points of 0.1 ms, a model round of a second: after its first model round another would cost more than
    # measuring every point once, and the rest costs less than a round: every point once, as tune does (the
    # same latencies with no model time: the strategy stops on its own, as above)
    spaces = {"allreduce": replay_space()}
    every_point = len(REPLAY_SIZES) * len(SLOWDOWN)
    replayed = plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE, seed=0,
                                       model_s_per_round=1.0)
    records = replayed.strategies["allreduce"].records
    assert len(records) == len({(record.cell, record.algorithm) for record in records}) == every_point
    assert replayed.model_s == 1.0  # the first round is the initial design: no model yet
    # the fits timed instead (tune's guard reads its clock): a second each, the same end; none, the strategy's own
    timed = plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE, seed=0,
                                    model_s_per_round=None, clock=FitClock(1.0))
    assert len(timed.strategies["allreduce"].records) == every_point and timed.model_s >= 1.0
    free = plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE, seed=0,
                                   model_s_per_round=None, clock=FitClock(0.0))
    assert len(free.strategies["allreduce"].records) < every_point / 2 and free.model_s == 0.0


def test_with_the_fits_a_tune_recorded_the_replay_ends_the_same_whatever_the_planning_clock_says() -> None:
    # a second per model fit as recorded (the initial design: none): tune's guard ends it as with the fits timed
    # at a second, on a clock that says none or five (a plan of the same store is the same at any moment)
    spaces = {"allreduce": replay_space()}
    every_point = len(REPLAY_SIZES) * len(SLOWDOWN)
    asked: list[tuple[int, int]] = []

    def recorded(points: int, records: int) -> float:
        asked.append((points, records))
        return 1.0 if records else 0.0
    ends = [plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE, seed=0,
                                    model_s_per_round=None, clock=FitClock(now), fit_s=recorded)
            for now in (0.0, 5.0)]
    assert [len(end.strategies["allreduce"].records) for end in ends] == [every_point, every_point]
    assert [end.model_s for end in ends] == [1.0, 1.0]
    assert asked[0] == (every_point, 0) and asked[1][0] == every_point and asked[1][1] > 0  # space, records told
    # where nothing is recorded (None), the fits are timed: no time, the strategy's own end as above
    free = plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE, seed=0,
                                   model_s_per_round=None, clock=FitClock(0.0), fit_s=lambda points, records: None)
    assert len(free.strategies["allreduce"].records) < every_point / 2 and free.model_s == 0.0
    # and a tune without its guard explores until the strategy stops, whatever its fits cost
    unguarded = plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE,
                                        seed=0, model_s_per_round=1.0, guard=False)
    assert len(unguarded.strategies["allreduce"].records) == len(free.strategies["allreduce"].records)


def test_a_replayed_ask_costs_the_median_of_the_nearest_recorded_asks_of_its_kind() -> None:
    fits = (FitTiming("tunempi", 56, 0, 0.001),  # initial designs: no model
            *(FitTiming("tunempi", 56, records, seconds) for records, seconds in
              ((20, 0.10), (30, 0.12), (40, 0.50), (50, 0.14), (60, 0.16), (70, 0.90))),
            FitTiming("tunempi", 900, 0, 0.002),
            *(FitTiming("tunempi", 900, records, seconds) for records, seconds in ((35, 1.8), (40, 2.0), (45, 2.2))))
    costs = PointCosts(fits=fits)
    assert PointCosts().fit_s(56, 30) is None  # nothing recorded: the replay times its own
    assert costs.fit_s(56, 0) == pytest.approx(0.0015)  # an initial design: only those
    # at 56 points and 40 records, the five nearest in log2 records are 30-70 (20 is farther than 70), none of
    # the 900-point space's: 0.12, 0.14, 0.16, 0.5, 0.9
    assert costs.fit_s(56, 40) == pytest.approx(0.16)
    # at 1000 points, the 900-point space's three and the 56-point one's nearest two: 0.14, 0.5, 1.8, 2.0, 2.2
    assert costs.fit_s(1000, 40) == pytest.approx(1.8)
    assert PointCosts(fits=fits[:1]).fit_s(56, 30) is None  # no model fit recorded: none of its kind


def test_a_point_whose_runs_failed_fails_in_the_replay_and_a_missing_size_takes_the_nearest() -> None:
    costs = costs_from_measurements([
        DatasetRow("here", "mpich", "allreduce", "ring", 2, 1, 2, 8, 0, 5.0),
        DatasetRow("here", "mpich", "allreduce", "ring", 2, 1, 2, 8, 1, 7.0),
        DatasetRow("here", "mpich", "allreduce", "default", 2, 1, 2, 8, 0, 3.0),
        DatasetRow("here", "mpich", "allreduce", "smp", 2, 1, 2, 8, 0, 0.0)], "rows")
    cells = (Cell("allreduce", 2, 1, 2, 8), Cell("allreduce", 2, 1, 2, 16))
    table = plan.point_runs(FeatureSpace("allreduce", cells, ("default", "ring", "smp")), costs)
    assert table == {(cells[0], "default"): (3.0,), (cells[0], "ring"): (5.0, 7.0),
                     (cells[1], "default"): (3.0,), (cells[1], "ring"): (5.0, 7.0)}  # smp: failed, no runs
    # an algorithm never run at the layout: no table (the plan takes the constant)
    assert plan.point_runs(FeatureSpace("allreduce", cells, ("default", "ring", "bruck")), costs) is None


def stored(algorithm: str, size: int, ranks: int = 2, nodes: int = 1, latency: float = 5.0, status: str = "ok",
           reason: str = "") -> SimpleNamespace:
    """A stored run as the store gives it (status, reason): what costs_from_measurements reads."""
    return SimpleNamespace(collective="allreduce", algorithm=algorithm, ranks=ranks, nodes=nodes,
                           ppn=ranks // nodes, msg_bytes=size, mean_us=latency if status == "ok" else None,
                           status=status, reason=reason, iterations=50)


def test_each_stored_point_keeps_its_own_iterations() -> None:
    # every stored size's iterations, the median per layout and size (not only the last row's: a run priced
    # by its latency takes them where the store did not time it)
    rows = [SimpleNamespace(**{**vars(stored("ring", 8)), "iterations": 40}), stored("default", 8),  # 50
            SimpleNamespace(**{**vars(stored("ring", 1024)), "iterations": 7}),
            SimpleNamespace(**{**vars(stored("ring", 1024, ranks=4)), "iterations": 300})]
    c = costs_from_measurements(rows, "store")
    assert c.iterations == {((2, 1, 2), "allreduce", 8): 45, ((2, 1, 2), "allreduce", 1024): 7,
                            ((4, 1, 4), "allreduce", 1024): 300}
    assert c.nearest(Cell("allreduce", 2, 1, 2, 8)) == (5.0, 45)


def test_launches_are_the_exploring_one_a_relaunch_per_point_that_killed_the_engine_and_each_blocks_sides() -> None:
    died = "the engine died: exit status 3: tunempi engine: rank 0: a collective call failed here"
    c = costs_from_measurements([
        stored("default", 8), stored("ring", 8), stored("ring", 64),
        stored("smp", 8, status="failed", reason=died), stored("smp", 64, status="failed", reason=died),
        stored("rsag", 8, status="failed", reason="engine: MPI_Allreduce failed in 2 iteration(s)"),  # lived on
        stored("smp", 8, ranks=4, nodes=2, status="timeout", reason="no reply in 10 s"),
        stored("default", 8, ranks=4, nodes=2)], "rows")
    assert c.kills == frozenset({((2, 1, 2), "allreduce", 8, "smp"), ((2, 1, 2), "allreduce", 64, "smp"),
                                 ((4, 2, 2), "allreduce", 8, "smp")})
    spaces = {"allreduce": FeatureSpace("allreduce", space(2).cells + space(4, 2).cells, space(2).algorithms)}
    # under files each deciding block launches without a file and under one per contender rank
    # (file_launches.FileDecider.sides: CONTENDERS launches where the default and one other are contested)
    under_files = predict(spaces, SETTINGS, c, launches=4, under_files={"allreduce"})
    assert under_files.launches == (1 + 2 + 3 * plan.CONTENDERS) + (1 + 1 + 3 * plan.CONTENDERS)
    # switched at run time: one fresh launch per layout and block
    assert predict(spaces, SETTINGS, c, launches=4).launches == (1 + 2 + 3) + (1 + 1 + 3)
    # one launch: the exploring one and its relaunches only
    assert predict(spaces, SETTINGS, c, launches=1).launches == (1 + 2) + (1 + 1)


# --- what runs took, recorded (store schema 6): the price of a layout's runs where the store timed them ---

def timed_row(algorithm: str, msg_bytes: int, latency_us: float, run_s: float | None, block: int | None,
              ranks: int = 4) -> SimpleNamespace:
    return SimpleNamespace(collective="allreduce", algorithm=algorithm, ranks=ranks, nodes=1, ppn=ranks,
                           msg_bytes=msg_bytes, mean_us=latency_us, iterations=50, status="ok", reason="",
                           run_s=run_s, launch_block=block)


def test_recorded_run_seconds_price_the_runs_and_the_deciding_blocks_own_price_theirs() -> None:
    rows = [timed_row("default", 8, 100.0, 0.030, 1), timed_row("a0", 8, 50.0, 0.010, 1),
            timed_row("default", 8, 90.0, 0.200, 2), timed_row("a0", 8, 40.0, 0.100, 3),
            timed_row("a0", 64, 60.0, None, None)]  # a run from before run_s was recorded
    c = costs_from_measurements(rows, "store")
    cell = Cell("allreduce", 4, 1, 4, 8)
    # exploring: the point's own mean, else the mean over the algorithms at the nearest size timed
    assert c.seconds(cell, "a0") == pytest.approx(0.010)
    assert c.seconds(cell) == pytest.approx(0.020)
    assert c.seconds(Cell("allreduce", 4, 1, 4, 64)) == pytest.approx(0.020)  # 64 B untimed: 8 B's
    # deciding blocks: their own runs (launches under files), whatever the algorithm
    assert c.seconds(cell, deciding=True) == pytest.approx(0.150)
    assert plan.cell_run_s(cell, c, SETTINGS, deciding=True) == pytest.approx(0.150)
    # a layout never timed (a dataset, an older store): the model from its latency
    assert c.seconds(Cell("allreduce", 2, 1, 2, 8)) is None
    assert plan.cell_run_s(Cell("allreduce", 8, 1, 8, 8), c, SETTINGS) == pytest.approx(
        run_s(100.0, 50, SETTINGS, c.point_overhead_s), rel=0.5)
    # the replay draws the exploring launch's runs (its gaps: algorithms switched at run time), the deciding
    # blocks' only where a point has no other
    assert c.runs_us[((4, 1, 4), "allreduce", 8, "default")] == (100.0,)
    assert c.runs_us[((4, 1, 4), "allreduce", 8, "a0")] == (50.0,)
    only_deciding = costs_from_measurements([timed_row("a1", 8, 70.0, 0.1, 2)], "store")
    assert only_deciding.runs_us[((4, 1, 4), "allreduce", 8, "a1")] == (70.0,)


def test_a_layout_whose_runs_took_longer_than_their_iterations_is_planned_longer() -> None:
    """Where ranks take turns on the cores the engine's own synchronisation costs more than its timed calls
    say (docs/measurements/tune.md): the recorded seconds carry it into the plan."""
    spaces = {"allreduce": space(4, sizes=(8,), algorithms=2)}

    def predicted(run_s_recorded: float | None) -> float:
        rows = [timed_row(a, 8, 100.0, run_s_recorded, block) for a in ("default", "a0") for block in (1, 2)]
        return predict(spaces, SETTINGS, costs_from_measurements(rows, "store"), launches=4).wall_s

    untimed, quick, slow = predicted(None), predicted(0.005), predicted(0.5)
    assert quick < slow
    runs = predict(spaces, SETTINGS, costs_from_measurements(
        [timed_row(a, 8, 100.0, 0.5, 1) for a in ("default", "a0")], "store"), launches=4).runs
    assert slow - quick == pytest.approx(runs * (0.5 - 0.005))
    assert quick < untimed < slow  # the model's price (iterations at 100 us + overhead) lies between


def test_a_failed_run_costs_what_it_took_and_a_relaunch_only_where_it_killed_the_engine() -> None:
    died = "the engine died: exit status 3: tunempi engine: rank 0: a collective call failed here"
    rows = [timed_row("default", 8, 100.0, 0.002, 1), timed_row("a0", 8, 50.0, 0.002, 1),
            SimpleNamespace(**{**vars(timed_row("smp", 8, 0.0, 0.54, 1)), "status": "failed", "reason": died,
                               "mean_us": None}),
            SimpleNamespace(**{**vars(timed_row("rsag", 8, 0.0, 0.001, 1)), "status": "failed",
                               "reason": "engine: MPI_Allreduce failed in 2 iteration(s)", "mean_us": None})]
    c = costs_from_measurements(rows, "store")
    cell = Cell("allreduce", 4, 1, 4, 8)
    # an engine's death is seen after a while (0.54 s at MPICH's smp here), then the engine is started again
    assert c.failed_run_s(cell, "smp") == pytest.approx(0.54 + c.engine_start_s)
    assert c.failed_run_s(cell, "rsag") == pytest.approx(0.001)  # failed, the engine lived on
    assert c.failed_run_s(cell, "a1") == pytest.approx(c.point_overhead_s)  # nothing recorded
    # the replay's seconds of those runs leave the relaunch to the layout's launches (counted there)
    records = [MeasurementRecord(cell, "smp", None, cost_s=c.failed_run_s(cell, "smp"), launches=0),
               MeasurementRecord(cell, "rsag", None, cost_s=c.failed_run_s(cell, "rsag"), launches=0)]
    assert plan.explored_by_layout(records, c) == {(4, 1, 4): (2, pytest.approx(0.54 + 0.001))}


def test_the_compositions_step_costs_a_fresh_launch_per_composition_each_running_its_sizes() -> None:
    rows = [timed_row("default", size, 100.0, 0.02, block, ranks=4) for size in (8, 64) for block in (1, 2)]
    rows = [SimpleNamespace(**{**vars(r), "nodes": 2, "ppn": 2}) for r in rows]
    c = costs_from_measurements(rows, "store")
    cells = [Cell("allreduce", 4, 2, 2, size) for size in (8, 64)]
    start_s = c.engine_start_s + plan.ENGINE_START_PER_NODE_S
    # the default's launch and one per composition (tune/job.py tune_compositions), each its sizes once, each run
    # priced as a deciding block's (fresh launches too)
    assert plan.compositions_s({"allreduce": 4}, cells, c, SETTINGS) == pytest.approx(4 * (start_s + 2 * 0.02))
    assert plan.compositions_s({}, [], c, SETTINGS) == 0.0


def test_a_launch_costs_what_the_librarys_launches_took_where_the_store_recorded_them() -> None:
    recorded = PointCosts(launch_s={(4, 1, 4): 0.22, (2, 1, 2): 0.17})
    # the layout's own, else the nearest recorded one's and a node's more per node beyond it, else the constants
    assert recorded.start_s((4, 1, 4)) == pytest.approx(0.22)
    assert recorded.start_s((8, 1, 8)) == pytest.approx(0.22)
    assert recorded.start_s((8, 2, 4)) == pytest.approx(0.22 + plan.ENGINE_START_PER_NODE_S)
    assert PointCosts().start_s((4, 2, 2)) == pytest.approx(plan.ENGINE_START_S + plan.ENGINE_START_PER_NODE_S)
    # the plan's wall: each launch at its layout's price (Open MPI's start was twice MPICH's here)
    spaces = {"allreduce": space(4)}
    base = costs(100.0, 50, (4, 1, 4))
    slow = dataclasses.replace(base, launch_s={(4, 1, 4): base.engine_start_s + 0.5})
    quick, dear = predict(spaces, SETTINGS, base, launches=4), predict(spaces, SETTINGS, slow, launches=4)
    assert dear.launches == quick.launches
    assert dear.wall_s - quick.wall_s == pytest.approx(0.5 * quick.launches)


def test_sessions_of_a_library_that_takes_its_choice_at_init_are_launched_as_tunes_runner_launches_them() -> None:
    # tune/runner.py LayoutRunner: one session per forced algorithm, at most MAX_SESSIONS open (the least recently
    # used closed first), a round's points grouped by session where they do not all fit
    cache = plan.SessionCache(max_sessions=2)
    a, b, c = ("allreduce", "a"), ("allreduce", "b"), ("allreduce", "c")
    assert cache.round([a, b, a, b]) == [a, b]  # they fit: in their order, each started once
    assert cache.round([a, b]) == []  # still open
    assert cache.round([c, a, c, a]) == [c]  # a is open: first; then c in b's place (the least recently used)
    # 3 sessions > 2: the open ones first (c, a), then b in c's place: one launch, where in their order
    # (b, c, a, b) each would have closed another: four
    assert cache.round([b, c, a, b]) == [b]
    assert cache.launches == 4


def test_the_replay_counts_a_launch_per_forced_algorithm_and_tunes_guard_pays_for_each() -> None:
    spaces = {"allreduce": replay_space()}
    at_init = plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE, seed=0,
                                      launch_per_algorithm={"allreduce"}, start_s=lambda layout: 0.5)
    records = at_init.strategies["allreduce"].records
    algorithms = {record.algorithm for record in records}
    # every algorithm measured was launched at least once, its first run carrying the start (tune's guard
    # prices points so); the launches beyond the first are the layout's extra launches
    assert at_init.extra_launches[(4, 1, 4)] >= len(algorithms) - 1 >= 1
    started = [record for record in records if record.launches == 1]
    assert len(started) == at_init.extra_launches[(4, 1, 4)] + 1
    assert all(record.cost_s == pytest.approx(1e-4 + 0.5) for record in started)
    runs, seconds = plan.explored_by_layout(records, PointCosts(launch_s={(4, 1, 4): 0.5}))[(4, 1, 4)]
    assert seconds == pytest.approx(1e-4 * runs)  # the starts are the layout's launches, not its runs' seconds
    # switched at run time: one launch, no start in any run
    switched = plan.replay_exploration(spaces, {"allreduce": cheap_points}, strategy="tunempi", params=LIVE, seed=0,
                                       start_s=lambda layout: 0.5)
    assert switched.extra_launches == {(4, 1, 4): 0}
    assert all(record.launches == 0 for record in switched.strategies["allreduce"].records)
    # and the prediction's launches count them (Intel MPI: 89 in a tune whose plan had said 10)
    per_algorithm = predict(spaces, SETTINGS, replay_costs(), launches=1, strategy="tunempi", strategy_params=LIVE,
                            launch_per_algorithm={"allreduce"})
    once = predict(spaces, SETTINGS, replay_costs(), launches=1, strategy="tunempi", strategy_params=LIVE)
    assert once.launches == 1 < per_algorithm.launches


def test_without_a_replay_a_collective_forced_per_launch_launches_each_algorithm_once_at_least() -> None:
    spaces = {"allreduce": space(2, algorithms=5)}
    c = costs(100.0, 50, (2, 1, 2))
    assert predict(spaces, SETTINGS, c, launches=1).launches == 1
    assert predict(spaces, SETTINGS, c, launches=1, launch_per_algorithm={"allreduce"}).launches == 5
