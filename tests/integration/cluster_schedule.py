"""Run benchmark jobs for several layouts through tune's ParallelRunner on the allocation found in the
environment (an emulated cluster's hostfile, or a Slurm allocation) and print the job records as JSON.

usage: cluster_schedule.py MPI MODE(topology|serial) GROUPS(slurm|pairs)
Layouts: 2 nodes x 1, 2 nodes x 2 (ppn 2) and 1 node x 2; a few bcast points each (default algorithm).
"""

from __future__ import annotations

import json
import sys
import time

from tunempi.bench.engine import Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint
from tunempi.launch import GroupScheduler, NodeAllocation, group_nodes
from tunempi.launch.topology import slurm_topology
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.tune.runner import LayoutRunner, ParallelRunner, most_at_once

LAYOUTS = (Layout(2, nodes=2, ppn=1), Layout(4, nodes=2, ppn=2), Layout(2, nodes=1))
SETTINGS = MeasureSettings(warmup=2, min_iters=10, max_iters=200, rel_ci=0.05, time_cap_s=0.05)


def main() -> int:
    mpi, mode, groups_from = sys.argv[1], sys.argv[2], sys.argv[3]
    library = resolve_library(mpi)
    adapter = adapter_for(library)
    allocation = NodeAllocation.from_environment()
    assert allocation is not None and allocation.nodes == 4, allocation
    if groups_from == "slurm":
        mapping = slurm_topology()
    else:
        mapping = {h: f"s{i // 2 + 1}" for i, h in enumerate(allocation.hosts)}
    scheduler = GroupScheduler(group_nodes(allocation.hosts, mapping=mapping), mode)

    def make_runner(layout: Layout, hosts: NodeAllocation | None) -> LayoutRunner:
        return LayoutRunner(library, adapter, layout, settings=SETTINGS, allocation=hosts)

    runner = ParallelRunner(make_runner, scheduler, allocation)
    work = {layout: [BenchPoint("bcast", "default", size, run) for run in range(2) for size in (8, 1024, 8192)]
            for layout in LAYOUTS}
    began = time.time()
    try:
        results = runner.run(work)
    finally:
        runner.close()
    wall = time.time() - began
    print(json.dumps({
        "wall_s": wall, "most_at_once": most_at_once(runner.jobs), "ok": sum(r.outcome.ok for r in results),
        "points": len(results), "failures": [r.outcome.reason for r in results if not r.outcome.ok][:3],
        "hosts_seen": [list(r.outcome.hosts) for r in results if r.outcome.ok][:1],
        "jobs": [{"layout": [j.layout.ranks, j.layout.nodes, j.layout.ppn], "hosts": list(j.hosts),
                  "start": j.start - began, "end": j.end - began, "points": j.points} for j in runner.jobs],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
