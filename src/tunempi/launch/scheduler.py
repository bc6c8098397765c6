"""Topology-aware parallel benchmarking (ACCLAiM's scheduler): which jobs may run at the same time, where.

Independent benchmark jobs (each needing `nodes` nodes) run concurrently on disjoint hosts, and never two
in the same network group, so they do not share links and disturb each other's timings. A job claims
whole groups: the smallest set of free groups that holds enough nodes (best fit: a single group if one is
big enough, else the fewest, smallest groups). Modes:
- "serial": one job at a time, on the first hosts of the allocation;
- "local": no constraint at all (one machine, tests): every job starts at once on the same hosts;
- "topology": the rule above, with groups from a file, a node-name pattern or the batch system.

`GroupScheduler.place`/`release` serve a dynamic runner (start a job whenever one finishes);
`plan_waves` gives the static view used in tests and dry runs.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from tunempi.errors import UsageError

SCHEDULING_MODES: tuple[str, ...] = ("serial", "local", "topology")


@dataclass(frozen=True)
class BenchJob:
    """One launch to schedule: an opaque key (e.g. a process layout) and how many nodes it needs."""

    key: Hashable
    nodes: int


@dataclass(frozen=True)
class Placement:
    job: BenchJob
    hosts: tuple[str, ...]  # the hosts the job runs on (its first `job.nodes` claimed hosts)
    groups: tuple[str, ...]  # the network groups it holds while running


class GroupScheduler:
    """Hands out hosts to jobs under one of SCHEDULING_MODES; not thread-safe (one driver thread calls it)."""

    def __init__(self, groups: Mapping[str, Sequence[str]], mode: str = "topology") -> None:
        if mode not in SCHEDULING_MODES:
            raise UsageError(f"unknown scheduling mode {mode!r}; valid: {', '.join(SCHEDULING_MODES)}")
        if not groups or not any(groups.values()):
            raise UsageError("no hosts to schedule on")
        self.mode = mode
        self.groups = {name: tuple(hosts) for name, hosts in groups.items() if hosts}
        self.hosts = tuple(h for hosts in self.groups.values() for h in hosts)
        self._busy: set[str] = set()  # groups held by running jobs
        self._running = 0

    @property
    def running(self) -> int:
        return self._running

    def check(self, job: BenchJob) -> None:
        if not 0 < job.nodes <= len(self.hosts):
            raise UsageError(f"job {job.key!r} needs {job.nodes} node(s); the allocation has {len(self.hosts)}")

    def place(self, job: BenchJob) -> Placement | None:
        """Claim hosts for `job` now, or None if it must wait for a running job to finish."""
        self.check(job)
        if self.mode == "local":
            self._running += 1
            return Placement(job, self.hosts[: job.nodes], ())
        if self.mode == "serial":
            if self._running:
                return None
            self._running += 1
            return Placement(job, self.hosts[: job.nodes], tuple(self.groups))
        chosen = self._best_fit(job.nodes)
        if chosen is None:
            return None
        self._busy.update(chosen)
        self._running += 1
        hosts = tuple(h for g in chosen for h in self.groups[g])[: job.nodes]
        return Placement(job, hosts, chosen)

    def release(self, placement: Placement) -> None:
        self._running -= 1
        if self.mode == "topology":
            self._busy.difference_update(placement.groups)

    def _best_fit(self, nodes: int) -> tuple[str, ...] | None:
        free = [g for g in self.groups if g not in self._busy]
        fitting = [g for g in free if len(self.groups[g]) >= nodes]
        if fitting:  # one group suffices: take the smallest that fits (keep big groups for big jobs)
            return (min(fitting, key=lambda g: len(self.groups[g])),)
        # Several groups: the largest free groups first gives the fewest groups; order kept for stable plans.
        chosen: list[str] = []
        total = 0
        for g in sorted(free, key=lambda g: -len(self.groups[g])):
            chosen.append(g)
            total += len(self.groups[g])
            if total >= nodes:
                order = list(self.groups)
                return tuple(sorted(chosen, key=order.index))
        return None


def plan_waves(jobs: Sequence[BenchJob], scheduler: GroupScheduler) -> list[list[Placement]]:
    """Static plan: waves of jobs that run together, biggest jobs first (they are hardest to place).

    Every job of a wave is placed before the next wave starts; within a wave, jobs are in placement order.
    """
    for job in jobs:
        scheduler.check(job)
    pending = sorted(jobs, key=lambda j: -j.nodes)  # stable: equal sizes keep their given order
    waves: list[list[Placement]] = []
    while pending:
        wave: list[Placement] = []
        waiting: list[BenchJob] = []
        for job in pending:
            placement = scheduler.place(job)
            if placement is None:
                waiting.append(job)
            else:
                wave.append(placement)
        for placement in wave:
            scheduler.release(placement)
        waves.append(wave)
        pending = waiting
    return waves
