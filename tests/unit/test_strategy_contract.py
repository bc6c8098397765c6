"""Contract tests run over every strategy (as Optuna does for its samplers)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tunempi.errors import UsageError
from tunempi.sim import CostModel, Oracle, ReplayBackend
from tunempi.sim.synthetic import synthetic_frame
from tunempi.strategy import STRATEGIES, MeasurementRecord, Request, Strategy, make_strategy
from tunempi.strategy.tunempi import CARRY_EXPONENT, TunempiStrategy

FRAME = synthetic_frame(seed=3)


def _drive(strategy: Strategy, backend: ReplayBackend, max_steps: int = 500) -> list[Request]:
    asked: list[Request] = []
    for _ in range(max_steps):
        requests = strategy.ask()
        if not requests:
            break
        asked.extend(requests)
        strategy.tell(backend.measure(requests))
    return asked


@pytest.fixture(params=sorted(STRATEGIES))
def name(request: pytest.FixtureRequest) -> str:
    return request.param


def _setup(name: str, seed: int, budget_fraction: float, max_ranks: int | None = None):
    backend = ReplayBackend(FRAME, "allreduce", seed=seed)
    space = backend.space()
    measurable = space.restrict(max_ranks=max_ranks) if max_ranks else space
    budget = budget_fraction * Oracle(backend).exhaustive_cost()
    return backend, space, make_strategy(name, space, seed=seed, measurable=measurable, budget_s=budget)


def test_same_seed_same_requests_and_selection(name: str) -> None:
    runs = []
    for _ in range(2):
        backend, _, strategy = _setup(name, seed=7, budget_fraction=0.3)
        runs.append((_drive(strategy, backend), strategy.select()))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]


def test_never_asks_outside_measurable_space_or_for_unavailable_algorithms(name: str) -> None:
    backend, space, strategy = _setup(name, seed=1, budget_fraction=1.0, max_ranks=8)
    asked = _drive(strategy, backend)
    assert asked
    for request in asked:
        assert request.cell.ranks <= 8
        assert set(request.algorithms) <= set(space.candidates(request.cell))
    assert all(record.ok for record in strategy.records)  # nothing unavailable was ever run
    table = strategy.select()
    assert set(table) == set(space.cells)  # selection covers cells beyond the measurable ones too
    assert all(table[cell] in space.candidates(cell) for cell in space.cells)


def test_stops_within_budget(name: str) -> None:
    backend, _, strategy = _setup(name, seed=2, budget_fraction=0.15)
    asked = _drive(strategy, backend)
    largest_batch = max(
        sum(r.cost_s for r in backend.measure([request])) for request in asked
    )
    assert strategy.finished and strategy.ask() == []
    assert strategy.spent_s <= strategy.budget_s + 3 * largest_batch
    assert 0.0 <= strategy.convergence() <= 1.0


def test_failed_algorithm_is_not_selected_where_it_failed(name: str) -> None:
    backend, space, strategy = _setup(name, seed=0, budget_fraction=1.0)
    cell = space.cells[0]
    failing = space.candidates(cell)[0]
    strategy.tell([MeasurementRecord(cell, failing, None, cost_s=1.0)])
    strategy.tell(backend.measure([Request(space.cells[-1], space.candidates(space.cells[-1]))]))
    assert strategy.select()[cell] != failing


def test_reaches_the_oracle_on_noise_free_data_with_full_budget(name: str) -> None:
    frame = synthetic_frame(noise=0.0)
    backend = ReplayBackend(frame, "allreduce", seed=0)
    oracle = Oracle(backend)
    strategy = make_strategy(name, backend.space(), seed=0, budget_s=oracle.exhaustive_cost())
    _drive(strategy, backend)
    assert oracle.average_slowdown(strategy.select()) < 1.05


def test_a_space_of_one_cell_is_tuned_not_a_traceback(name: str) -> None:
    """Issue 40: a profile with one size per collective at one layout gives a space of one cell, where no
    feature varies; every strategy measures it, stops and selects the faster algorithm."""
    from tunempi.space import FeatureSpace

    space = FeatureSpace.grid("alltoall", [(2, 1, 2)], [4], ["default", "fast", "slow"])
    latency = {"default": 10.0, "fast": 6.0, "slow": 30.0}
    strategy = make_strategy(name, space, seed=0, budget_s=60.0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        requests = strategy.ask()
        if not requests:
            break
        strategy.tell([MeasurementRecord(r.cell, a, latency[a] * float(rng.uniform(0.97, 1.03)), iterations=100,
                                         cost_s=0.1)
                       for r in requests for a in r.algorithms for _ in range(r.repeats)])
    assert strategy.finished
    assert strategy.select() == {space.cells[0]: "fast"}
    assert 0.0 <= strategy.convergence() <= 1.0


def test_unknown_strategy_names_the_valid_ones() -> None:
    backend = ReplayBackend(FRAME, "allreduce", seed=0)
    with pytest.raises(UsageError, match="exhaustive"):
        make_strategy("bogus", backend.space())


def test_acclaim_prefers_non_power_of_two_neighbour_when_perturbing() -> None:
    from tunempi.space import FeatureSpace, in_between_sizes, power_of_two_sizes

    sizes = power_of_two_sizes(4, 4096) + in_between_sizes(4, 4096, align=4)
    space = FeatureSpace.grid("allreduce", [(2, 1, 2), (4, 1, 4)], sizes, ["a", "b"])
    strategy = make_strategy("acclaim", space, seed=0, perturb_probability=1.0)
    index = space.index(next(c for c in space.cells if c.ranks == 4 and c.msg_bytes == 256))
    todo = np.arange(len(space.cells))
    picked = space.cells[strategy._nearby_non_power_of_two(index, todo)]
    assert picked.ranks == 4 and picked.msg_bytes in (192, 384)


def test_earlier_jobs_at_other_scales_are_context_for_the_model_not_for_the_books(name: str) -> None:
    """Warm start across jobs: points at scales outside the space train the model; they are neither
    measurements of the space (not counted, not spent) nor cells to select for."""
    frame = synthetic_frame(ranks=(2, 4, 8, 16, 32), seed=5)
    backend = ReplayBackend(frame, "allreduce", seed=0)
    full = backend.space()
    target = full.restrict(cells=[c for c in full.cells if c.ranks == 16])
    earlier = backend.measure([Request(c, full.candidates(c)) for c in full.cells if c.ranks != 16])
    strategy = make_strategy(name, target, seed=0, records=earlier)
    assert strategy.records == [] and strategy.spent_s == 0.0  # nothing of the space is known yet
    assert {c.ranks for c in strategy.context_cells} == {2, 4, 8, 32}
    _, algorithms, _ = strategy.training_rows()
    assert len(algorithms) == len(earlier)  # the model sees them all
    asked = strategy.ask()
    assert asked and all(r.cell in target for r in asked)
    assert set(strategy.select()) == set(target.cells)


def test_context_from_other_scales_predicts_a_new_scale() -> None:
    frame = synthetic_frame(ranks=(2, 4, 8, 16, 32), seed=5, noise=0.0)
    backend = ReplayBackend(frame, "allreduce", seed=0)
    full = backend.space()
    target = full.restrict(cells=[c for c in full.cells if c.ranks == 16])
    earlier = backend.measure([Request(c, full.candidates(c)) for c in full.cells if c.ranks != 16])
    oracle = Oracle(ReplayBackend(frame[frame["ranks"] == 16], "allreduce"))
    informed = make_strategy("exhaustive", target, seed=0, records=earlier).select()
    first_candidate = {c: target.candidates(c)[0] for c in target.cells}
    assert oracle.average_slowdown(informed) < 1.1 < oracle.average_slowdown(first_candidate)


def test_tunempi_with_a_shared_surface_keeps_the_contract_and_uses_it() -> None:
    """`shared_surface=True` (the default, docs/strategies.md): the same seed asks the same, nothing outside
    the measurable space, a selection for every cell as good as without the surface here, and the surface
    changes the posterior (it is fitted, not ignored)."""
    runs = []
    for shared in (True, True, False):
        backend = ReplayBackend(FRAME, "allreduce", seed=3)
        space = backend.space()
        oracle = Oracle(backend)
        strategy = make_strategy("tunempi", space, seed=3, measurable=space.restrict(max_ranks=8),
                                 budget_s=0.5 * oracle.exhaustive_cost(), shared_surface=shared)
        asked = _drive(strategy, backend)
        assert all(r.cell.ranks <= 8 and set(r.algorithms) <= set(space.candidates(r.cell)) for r in asked)
        table = strategy.select()
        assert set(table) == set(space.cells)
        runs.append((asked, table, oracle.average_slowdown(table), strategy.estimate_log_latency()))
    assert runs[0][0] == runs[1][0] and runs[0][1] == runs[1][1]
    assert runs[0][2] <= runs[2][2] + 0.02
    assert not np.allclose(runs[0][3], runs[2][3], equal_nan=True)


def test_tunempi_carries_each_layout_from_the_edge_layout_with_the_same_ranks_per_node() -> None:
    """8 ranks come as 1 x 8 (where `a` wins) and 2 x 4 (where `b` wins); beyond them, 16 ranks as 2 x 8
    take 1 x 8's decision and 4 x 4 take 2 x 4's, not whichever edge layout comes first."""
    rows = []
    layouts = [(2, 1, 2), (4, 1, 4), (8, 1, 8), (8, 2, 4), (16, 2, 8), (16, 4, 4)]
    for ranks, nodes, ppn in layouts:
        for size in (4, 64, 1024, 16384):
            base = (1.0 + ranks * 0.3) * (1.0 + size / 512)
            for algorithm, factor in (("a", 1.0 if ppn >= 8 else 2.0), ("b", 2.0 if ppn >= 8 else 1.0),
                                      ("default", 1.5)):
                rows += [("alltoall", algorithm, ranks, nodes, ppn, size, run, base * factor * (1 + 0.01 * run))
                         for run in range(2)]
    frame = pd.DataFrame(rows, columns=["collective", "algorithm", "ranks", "nodes", "ppn", "msg_bytes", "run",
                                        "latency_us"])
    backend = ReplayBackend(frame, "alltoall", seed=0)
    space = backend.space()
    strategy = make_strategy("tunempi", space, seed=0, measurable=space.restrict(max_ranks=8),
                             budget_s=Oracle(backend).exhaustive_cost())
    _drive(strategy, backend)
    table = strategy.select()
    beyond = {(c.ppn, table[c]) for c in space.cells if c.ranks == 16}
    assert beyond == {(8, "a"), (4, "b")}


@pytest.mark.parametrize("collective", ["allreduce", "bcast", "alltoall"])
def test_tunempi_carries_the_decision_at_the_largest_measured_scale_beyond_it(collective: str) -> None:
    """By default, beyond the measured scales each cell keeps the choice of the largest measured scale at the
    size its collective's exponent says: allreduce the same bytes per rank, bcast the same size times
    ranks, alltoall the same size."""
    exponent = {"allreduce": -1, "bcast": 1, "alltoall": 0}[collective]
    assert CARRY_EXPONENT[collective] == exponent
    frame = synthetic_frame(seed=3, collective=collective)
    backend = ReplayBackend(frame, collective, seed=0)
    space = backend.space()
    strategy = make_strategy("tunempi", space, seed=0, measurable=space.restrict(max_ranks=8),
                             budget_s=0.5 * Oracle(backend).exhaustive_cost())
    _drive(strategy, backend)
    table = strategy.select()
    edge = {c.msg_bytes: c for c in space.cells if c.ranks == 8}
    sizes = np.array(sorted(edge))
    beyond = [c for c in space.cells if c.ranks > 8]
    assert beyond
    for cell in beyond:
        target = cell.msg_bytes * (cell.ranks / 8) ** exponent
        anchor = edge[int(sizes[np.argmin(np.abs(np.log2(sizes) - np.log2(max(target, 1))))])]
        assert table[cell] == table[anchor]
    # The log-linear trend decides otherwise somewhere beyond (else this test would not tell them apart).
    trend = make_strategy("tunempi", space, seed=0, measurable=space.restrict(max_ranks=8),
                          budget_s=0.5 * Oracle(backend).exhaustive_cost(), extrapolation="trend")
    _drive(trend, backend)
    assert trend.select() != table


def _first_batch_after_one_layout(fixed: bool) -> tuple[list[Request], set[tuple[int, int, int]]]:
    """tunempi under the engine cost model (one launch per layout), told every point at 2 ranks; its next
    batch, and the layouts launched so far."""
    backend = ReplayBackend(FRAME, "allreduce", seed=0, cost_model=CostModel.named("engine"))
    space = backend.space()
    strategy = make_strategy("tunempi", space, seed=0)
    assert isinstance(strategy, TunempiStrategy)
    if not fixed:  # the batch's cost without launches (before issue 15's fix)
        strategy._layout_launches = lambda paid: (0.0, {c.scale for c in space.cells})  # type: ignore[method-assign]
    strategy._initial_done = True
    strategy.tell(backend.measure([Request(c, space.candidates(c)) for c in space.cells if c.ranks == 2]))
    return strategy.ask(), {r.cell.scale for r in strategy.records}


def test_tunempi_batch_counts_the_launch_of_a_new_layout() -> None:
    """Where points share one launch per layout (the engine), a batch is cut at `batch_size` cells once it
    opens a layout whose launch alone costs more than 3 % of what was spent: the cells' own predicted costs
    (milliseconds) leave the launch out: without the cut this batch has 8 cells over 3 new layouts (on
    Peak bcast, up to 24 cells costing 0.054 of the exhaustive sweep where 0.002 was allowed)."""
    batch, launched = _first_batch_after_one_layout(fixed=True)
    new_layouts = {r.cell.scale for r in batch} - launched
    assert new_layouts and len(batch) == 3
    unbounded, _ = _first_batch_after_one_layout(fixed=False)
    assert len(unbounded) > 3 and len({r.cell.scale for r in unbounded} - launched) > len(new_layouts)


def _guard_records(space, fast_until: int):  # noqa: ANN001, ANN202
    """'slow' measured in every cell; 'fast' (5 % faster where it was measured) only at the sizes up to
    `fast_until` bytes: beyond, the model carries its trend into cells where it never ran."""
    from tunempi.strategy import MeasurementRecord

    records = []
    rng = np.random.default_rng(28)
    for cell in space.cells:
        base = 5.0 + cell.msg_bytes / 50.0
        records.append(MeasurementRecord(cell, "slow", base * float(np.exp(rng.normal(0, 0.03)))))
        if cell.msg_bytes <= fast_until:
            records.append(MeasurementRecord(cell, "fast", 0.95 * base * float(np.exp(rng.normal(0, 0.03)))))
    return records


def test_tunempi_does_not_select_an_algorithm_never_measured_near_a_cell_a_measured_one_may_win() -> None:
    """Issue 28, item 3: on a sweep never tuned on, the catastrophic cells were cells whose selected
    algorithm was never measured there. Where neither the algorithm nor a neighbouring size at that scale
    was measured and a measured algorithm's interval overlaps its prediction, the measured one is selected;
    next to its measurements, or without the guard, the model's choice stands. Seeded."""
    from tunempi.tune.scope import Scale, feature_space, message_sizes

    space = feature_space("allreduce", [Scale(1, 2)], message_sizes(1 << 20), ("slow", "fast"))
    records = _guard_records(space, fast_until=1024)
    guarded = make_strategy("tunempi", space, seed=0, records=records)
    unguarded = make_strategy("tunempi", space, seed=0, records=records, unmeasured_guard=None)
    far = [c for c in space.cells if c.msg_bytes >= 64 * 1024]
    estimate = unguarded.estimate_log_latency()
    fast, slow = space.algorithms.index("fast"), space.algorithms.index("slow")
    assert any(estimate[space.index(c), fast] < estimate[space.index(c), slow] for c in far)  # the premise
    chosen_unguarded, chosen = unguarded.select(), guarded.select()
    assert any(chosen_unguarded[c] == "fast" for c in far)
    assert all(chosen[c] == "slow" for c in far)
    sizes = sorted({c.msg_bytes for c in space.cells})
    near = [c for c in space.cells if c.msg_bytes <= sizes[sizes.index(1024) + 1]]
    assert all(chosen[c] == chosen_unguarded[c] for c in near)  # measured there or next to it
    assert [c for c in near if chosen[c] == "fast"]
