"""The layout a user's launch line asks for: how many ranks, on how many nodes (`tunempi run`, issue 57).

Read from the launch line only, never guessed: ranks from `-n`/`-np` (`--ntasks` for srun), processes per
node from Hydra's `-ppn` / Open MPI's `--npernode` / srun's `--ntasks-per-node`, nodes from a hostfile
(`-f`, `-hostfile`, `-machinefile`, `--hostfile`) or a host list (`-hosts`, `--host`, `-H`) filled in
order, a slot count per host as both launchers map by slot by default, or srun's `-N`; without any, the
batch system's allocation, else this machine. What a line does not say stays None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tunempi.errors import UsageError
from tunempi.launch.hosts import NodeAllocation
from tunempi.launch.launchers import SrunLauncher, launcher_for_argv
from tunempi.mpi.library import MPILibrary

_RANKS = ("-n", "-np", "--np", "--ntasks")
_PPN = ("-ppn", "-npernode", "--npernode", "--ntasks-per-node")
_HOSTFILE = ("-f", "-hostfile", "--hostfile", "-machinefile", "--machinefile")
_HOSTS = ("-hosts", "--host", "-host", "-H")
_NODES = ("-N", "--nodes")  # srun only: Hydra's and Open MPI's -N is something else


@dataclass(frozen=True)
class JobLayout:
    """Ranks and nodes a launch line asks for (None: the line does not say)."""

    ranks: int | None = None
    nodes: int | None = None
    ppn: int | None = None
    #: where each figure came from, for the message ("-n 8", "hostfile hosts.txt")
    source: str = ""

    def text(self) -> str:
        ranks = f"{self.ranks} ranks" if self.ranks is not None else "ranks unknown"
        nodes = f"{self.nodes} node{'s' if self.nodes != 1 else ''}" if self.nodes is not None else "nodes unknown"
        ppn = f", {self.ppn} per node" if self.ppn is not None else ""
        return f"{ranks} on {nodes}{ppn}" + (f" ({self.source})" if self.source else "")


def _options(argv: Sequence[str]) -> dict[str, str]:
    """The launcher's `-flag value` / `--flag=value` options, up to the program it starts."""
    found: dict[str, str] = {}
    wanted = (*_RANKS, *_PPN, *_HOSTFILE, *_HOSTS, *_NODES)
    index = 1
    while index < len(argv):
        word = argv[index]
        if not word.startswith("-"):
            break  # the program: its own options are not the launcher's
        name, equals, value = word.partition("=")
        if name in wanted:
            if not equals:
                if index + 1 >= len(argv):
                    raise UsageError(f"{name} on the launch line has no value")
                value = argv[index + 1]
                index += 1
            found[name] = value
        index += 1
    return found


def _number(options: dict[str, str], names: Sequence[str]) -> tuple[int | None, str]:
    for name in names:
        if name in options:
            try:
                value = int(options[name])
            except ValueError:
                raise UsageError(f"{name} {options[name]!r} on the launch line is not a whole number") from None
            if value < 1:
                raise UsageError(f"{name} {value} on the launch line: must be at least 1")
            return value, f"{name} {value}"
    return None, ""


def _filled(slots: Sequence[int], ranks: int | None) -> int:
    """Hosts a by-slot mapping uses for `ranks` (all of them when the line does not say or they overflow)."""
    if ranks is None:
        return len(slots)
    placed = 0
    for used, count in enumerate(slots, start=1):
        placed += count
        if placed >= ranks:
            return used
    return len(slots)


def job_layout(argv: Sequence[str], library: MPILibrary | None = None,
               env: Mapping[str, str] | None = None) -> JobLayout:
    """The layout `argv` asks for; empty where it is no launcher line (a singleton program, a script).

    Without a hostfile or host list, the hosts are the batch system's allocation (or TUNEMPI_HOSTFILE's,
    `NodeAllocation.from_environment`), else this machine alone.
    """
    launcher = launcher_for_argv(argv, library)
    if launcher is None:
        return JobLayout(source="not a launch line")
    options = _options(argv)
    ranks, rank_source = _number(options, _RANKS)
    ppn, ppn_source = _number(options, _PPN)
    sources = [s for s in (rank_source, ppn_source) if s]
    nodes: int | None = None
    if isinstance(launcher, SrunLauncher):
        nodes, node_source = _number(options, _NODES)
        sources += [node_source] if node_source else []
    hostfile = next((options[name] for name in _HOSTFILE if name in options), None)
    hosts = next((options[name] for name in _HOSTS if name in options), None)
    if hostfile is not None:
        slots = list(NodeAllocation.from_hostfile(hostfile).slots)
        sources.append(f"hostfile {hostfile}")
    elif hosts is not None:
        counts: dict[str, int] = {}
        for item in filter(None, hosts.split(",")):
            host, _, count = item.partition(":")
            counts[host] = counts.get(host, 0) + (int(count) if count.isdigit() else 1)
        slots = list(counts.values())
        sources.append(f"hosts {hosts}")
    else:
        allocation = NodeAllocation.from_environment(env)
        slots = list(allocation.slots) if allocation is not None else [ranks or 1]
        sources.append(f"{allocation.source} allocation" if allocation is not None else "this machine")
    if nodes is None:
        nodes = min(len(slots), math.ceil(ranks / ppn)) if ranks and ppn else _filled(slots, ranks)
    if ppn is None and ranks is not None and ranks % nodes == 0:
        ppn = ranks // nodes
    return JobLayout(ranks, nodes, ppn, ", ".join(sources))
