"""The parallel runner's launch plans against fake node lists (exact hosts), and its threading contract."""

from __future__ import annotations

import threading
import time

import pytest

from tunempi.bench.engine import Layout
from tunempi.bench.sweep import BenchPoint
from tunempi.launch.hosts import NodeAllocation
from tunempi.launch.scheduler import GroupScheduler
from tunempi.launch.topology import group_nodes
from tunempi.tune.job import scheduling
from tunempi.tune.runner import ParallelRunner

HOSTS = ("r1n1", "r1n2", "r1n3", "r1n4", "r2n1", "r2n2", "r3n1", "r3n2")
ALLOCATION = NodeAllocation(HOSTS, (4,) * len(HOSTS), "test")


class RecordingRunner:
    """Stands in for LayoutRunner: records where it runs and how many run at once."""

    active = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self, layout: Layout, allocation: NodeAllocation | None, log: list) -> None:
        self.layout = layout
        self.hosts = allocation.hosts if allocation is not None else ()
        self.launches = 1
        log.append((layout.nodes, self.hosts))

    def measure(self, point: BenchPoint, settings=None):  # noqa: ANN001, ANN201
        with RecordingRunner.lock:
            RecordingRunner.active += 1
            RecordingRunner.peak = max(RecordingRunner.peak, RecordingRunner.active)
        time.sleep(0.02)
        with RecordingRunner.lock:
            RecordingRunner.active -= 1
        return (self.layout, self.hosts, point)

    def in_launch_order(self, points):  # noqa: ANN001, ANN201
        return list(points)

    def kill(self) -> None:
        pass

    def close(self) -> None:
        pass


def run_plan(mode: str, layouts: list[Layout], pattern: str | None = r"^(r\d+)"):  # noqa: ANN201
    log: list = []
    RecordingRunner.active = RecordingRunner.peak = 0
    groups = group_nodes(HOSTS, pattern=pattern) if mode == "topology" else group_nodes(HOSTS)
    runner = ParallelRunner(lambda layout, hosts: RecordingRunner(layout, hosts, log),  # type: ignore[arg-type,return-value]
                            GroupScheduler(groups, mode), ALLOCATION)
    work = {layout: [BenchPoint("allreduce", "ring", 8, run) for run in range(3)] for layout in layouts}
    delivered = runner.run(work)
    return log, delivered, RecordingRunner.peak


LAYOUTS = [Layout(16, 4, 4), Layout(8, 2, 4), Layout(4, 2, 2), Layout(4, 1, 4)]


def test_topology_mode_places_layouts_on_disjoint_network_groups_exactly() -> None:
    log, delivered, peak = run_plan("topology", LAYOUTS)
    assert log[:3] == [
        (4, ("r1n1", "r1n2", "r1n3", "r1n4")),  # biggest first, the one group that holds it
        (2, ("r2n1", "r2n2")),  # smallest group that fits, in group order
        (2, ("r3n1", "r3n2")),
    ]
    assert log[3][1] in (("r1n1",), ("r2n1",), ("r3n1",))  # waits for a group to free up, then takes it
    assert len(delivered) == 3 * len(LAYOUTS)
    assert peak == 3  # three groups: three jobs at a time, the fourth waits


def test_serial_mode_runs_one_layout_at_a_time_on_the_first_hosts() -> None:
    log, delivered, peak = run_plan("serial", LAYOUTS)
    assert [hosts for _, hosts in log] == [HOSTS[:4], HOSTS[:2], HOSTS[:2], HOSTS[:1]]
    assert peak == 1 and len(delivered) == 12


def test_local_mode_starts_everything_at_once() -> None:
    _, delivered, peak = run_plan("local", [Layout(2), Layout(4)])
    assert peak == 2 and len(delivered) == 6


def test_runners_are_reused_between_rounds() -> None:
    log: list = []
    runner = ParallelRunner(lambda layout, hosts: RecordingRunner(layout, hosts, log),  # type: ignore[arg-type,return-value]
                            GroupScheduler(group_nodes(["localhost"]), "serial"))
    for _ in range(3):
        runner.run({Layout(2): [BenchPoint("bcast", "binomial", 8)]})
    assert len(log) == 1


def test_a_worker_exception_reaches_the_caller() -> None:
    class Broken(RecordingRunner):
        def measure(self, point, settings=None):  # noqa: ANN001, ANN201
            raise RuntimeError("engine exploded")

    runner = ParallelRunner(lambda layout, hosts: Broken(layout, hosts, []),  # type: ignore[arg-type,return-value]
                            GroupScheduler(group_nodes(["localhost"]), "serial"))
    with pytest.raises(RuntimeError, match="exploded"):
        runner.run({Layout(2): [BenchPoint("bcast", "binomial", 8)]})


def test_topology_option_spellings(tmp_path) -> None:  # noqa: ANN001
    assert scheduling("serial", None).mode == "serial"
    assert scheduling("local", ALLOCATION).mode == "local"
    by_pattern = scheduling(r"pattern:^(r\d+)", ALLOCATION)
    assert by_pattern.mode == "topology" and set(by_pattern.groups) == {"r1", "r2", "r3"}
    group_file = tmp_path / "groups.txt"
    group_file.write_text("".join(f"{h} g{i % 2}\n" for i, h in enumerate(HOSTS)))
    from_file = scheduling(str(group_file), ALLOCATION)
    assert from_file.groups["g0"] == HOSTS[0::2]
    from tunempi.errors import UsageError

    with pytest.raises(UsageError, match="serial, local"):
        scheduling("nonsense", None)


def test_points_forced_per_launch_are_grouped_by_launch_only_when_their_sessions_cannot_all_stay_open() -> None:
    """Intel MPI takes a preset per launch: a round over more presets than open sessions is measured preset
    by preset (each launch once), in the order the strategy asked within each preset."""
    from test_impi import adapter as intel_adapter

    from tunempi.bench.protocol import MeasureSettings
    from tunempi.tune.runner import LayoutRunner

    adapter = intel_adapter()
    runner = LayoutRunner(adapter.library, adapter, Layout(2), settings=MeasureSettings(), max_sessions=2)
    few = [BenchPoint("allreduce", name, size) for size in (8, 64) for name in ("preset_1", "default")]
    assert runner.in_launch_order(few) == few  # two launches: both stay open, the order is the strategy's
    many = [BenchPoint("allreduce", name, size) for size in (8, 64) for name in ("preset_1", "preset_2", "default")]
    ordered = runner.in_launch_order(many)
    assert sorted(ordered, key=many.index) == many
    assert [p.algorithm for p in ordered] == ["preset_1", "preset_1", "preset_2", "preset_2", "default", "default"]
    assert [p.msg_bytes for p in ordered] == [8, 64] * 3
