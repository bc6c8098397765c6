"""Load written tuning files into the real library and run a short, checked workload with them.

It compiles the probe (smoke_probe.c) with the library's mpicc and launches it through launch/ under a
whole-job timeout. A file passes when the probe runs every point to completion with correct results.
MPICH aborts on a partial or malformed tree, so a bad MPICH file fails here. Open MPI silently ignores a
rules file it cannot parse, which is why its adapter reads the file back strictly before it counts as
written: a clean run alone proves nothing about it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunempi.launch import LaunchCommand, LaunchSpec, launcher_for, run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.library import MPILibrary
from tunempi.rules.ruleset import RuleSet

PROBE_SOURCE = Path(__file__).with_name("smoke_probe.c")
PROBE_COLLECTIVES: frozenset[str] = frozenset({"allreduce", "bcast", "reduce", "allgather", "alltoall",
                                               "iallreduce", "ibcast", "iallgather", "ialltoall"})
_LINE = re.compile(r"^ok (\w+) (\d+)(.*)$")


@dataclass(frozen=True)
class SmokeResult:
    """What one smoke run showed."""

    ok: bool
    returncode: int
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    #: (collective, bytes) -> extra observations, e.g. {"user_op_max_len": 2048, "count": 4096}
    observations: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    #: selections the library said it ignored (VendorAdapter.ignored_by_library): the run then fails
    ignored: tuple[str, ...] = ()

    def summary(self) -> str:
        state = "passed" if self.ok else f"FAILED (exit {self.returncode})"
        if self.ignored:
            state = f"FAILED (the library ignored {', '.join(self.ignored)})"
        tail = self.stderr.strip().splitlines()[-3:]
        return f"smoke run {state}: {' '.join(self.argv)}" + ("\n" + "\n".join(tail) if tail and not self.ok else "")


def probe_points(rule_set: RuleSet, *, element: int = 4, max_bytes: int = 1 << 22) -> list[int]:
    """Sizes that exercise every rule: each bound and the next whole element above it, plus the smallest.

    Bounds are in OSU bytes; sizes are multiples of `element` so reductions see whole ints.
    """
    if rule_set.collective not in PROBE_COLLECTIVES:
        return []
    points = {element}
    for rule in (rule for block in rule_set.blocks for rules in block.all_rules() for rule in rules):
        if rule.max_bytes is None:
            continue
        below = rule.max_bytes - rule.max_bytes % element
        for size in (below, below + element):
            if 0 < size <= max_bytes:
                points.add(size)
    return sorted(points)


def launch_command(library: MPILibrary, ranks: int, program: Sequence[str], **launcher_options: Any) -> LaunchCommand:
    """The library's own launcher running `program` on `ranks` ranks of this machine (`launcher_options`
    go to the launcher, e.g. Open MPI's as_root/cores)."""
    return launcher_for(library, **launcher_options).command(LaunchSpec(tuple(program), ranks))


def parse_probe_output(stdout: str) -> dict[tuple[str, int], dict[str, int]]:
    observations: dict[tuple[str, int], dict[str, int]] = {}
    for line in stdout.splitlines():
        match = _LINE.match(line.strip())
        if match:
            extras = dict(part.split("=", 1) for part in match.group(3).split() if "=" in part)
            observations[(match.group(1), int(match.group(2)))] = {k: int(v) for k, v in extras.items()}
    return observations


def smoke_check(library: MPILibrary, tuning_env: Mapping[str, str], points: Sequence[tuple[str, int]], *,
                ranks: int = 2, timeout: float = 120.0,
                ignored_by_library: Callable[[str], list[str]] | None = None) -> SmokeResult:
    """Run the probe at `points` ((collective, OSU bytes)) with `tuning_env` added to the environment.

    `tuning_env` is what activates the file, spelled by the vendor adapter (e.g.
    MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=/path, or Open MPI's use_dynamic_rules + filename).
    The run passes when it exits 0, every point reported a checked result and the library said it
    ignored no selection (`ignored_by_library`: the adapter's reader of the run's output; Intel MPI
    ignores a selection it cannot use with a warning and runs its own).
    """
    probe = build_c(library, [PROBE_SOURCE], "smoke_probe")
    wanted = [(coll, int(size)) for coll, size in points if coll in PROBE_COLLECTIVES]
    command = launch_command(library, ranks, [str(probe), *(f"{coll}:{size}" for coll, size in wanted)])
    argv = command.argv
    done = run_launch(argv, command.full_env({**os.environ, **tuning_env}), timeout=timeout)
    if done.timed_out or done.returncode is None:
        return SmokeResult(False, -1, argv, done.stdout, f"timed out after {timeout:.0f} s")
    observations = parse_probe_output(done.stdout)
    ignored = tuple(ignored_by_library(done.stdout + done.stderr)) if ignored_by_library else ()
    ok = done.returncode == 0 and all(point in observations for point in wanted) and not ignored
    return SmokeResult(ok, done.returncode, argv, done.stdout, done.stderr, observations, ignored)
