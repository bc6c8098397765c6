"""Network groups of nodes (racks, switches, dragonfly groups): which nodes are "close".

A later scheduler runs independent jobs in parallel, one per group, so that they do not share links.
Groups come from a file mapping node -> group, a regular expression over node names, or Slurm's topology
plugin (`scontrol show topology`: nodes under one leaf switch form a group).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from tunempi.errors import UsageError
from tunempi.launch.hosts import expand_hostlist


def read_group_file(path: str | Path) -> dict[str, str]:
    """Read `node group` pairs, one per line (whitespace, ',' or ':' separated; '#' comments)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read topology file {path}: {exc.strerror}") from None
    mapping: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = re.split(r"[\s,:]+", line)
        if len(parts) != 2:
            raise UsageError(f"{path}:{number}: expected 'node group', got {raw.strip()!r}")
        mapping[parts[0]] = parts[1]
    return mapping


def group_nodes(
    hosts: Iterable[str],
    *,
    mapping: Mapping[str, str] | None = None,
    pattern: str | re.Pattern[str] | None = None,
) -> dict[str, tuple[str, ...]]:
    """Group hosts into network groups, keeping the hosts' order within and between groups.

    mapping: node -> group (e.g. from read_group_file). pattern: a regex searched in each node name;
    its first capture group (or the whole match) names the group, e.g. r"^(r\\d+)" for 'r12n03'.
    A node that neither names is a group of its own. With neither given, all nodes form one group "all".
    """
    if mapping is not None and pattern is not None:
        raise UsageError("give a topology mapping or a node-name pattern, not both")
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    groups: dict[str, list[str]] = {}
    for host in dict.fromkeys(hosts):
        if mapping is not None:
            group = mapping.get(host, host)
        elif regex is not None:
            match = regex.search(host)
            group = (match.group(1) if match.groups() else match.group(0)) if match else host
        else:
            group = "all"
        groups.setdefault(group, []).append(host)
    return {name: tuple(members) for name, members in groups.items()}


def parse_slurm_topology(text: str) -> dict[str, str]:
    """node -> leaf switch from `scontrol show topology` (lines `SwitchName=s1 Level=0 ... Nodes=n[1-2]`).

    Only the lowest-level switches name groups: nodes under one leaf switch share its links.
    """
    mapping: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "SwitchName" not in fields or fields.get("Level", "0") != "0" or not fields.get("Nodes"):
            continue
        for node in expand_hostlist(fields["Nodes"]):
            mapping.setdefault(node, fields["SwitchName"])
    return mapping


def slurm_topology(scontrol: str = "scontrol", timeout: float = 10.0) -> dict[str, str]:
    """node -> leaf switch from the running Slurm (its topology plugin); UsageError when Slurm has none."""
    try:
        done = subprocess.run([scontrol, "show", "topology"], capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot ask Slurm for its topology: {exc}") from None
    mapping = parse_slurm_topology(done.stdout) if done.returncode == 0 else {}
    if not mapping:
        why = done.stderr.strip() or done.stdout.strip() or "no switches (TopologyPlugin=topology/tree is off?)"
        raise UsageError(f"`scontrol show topology` gave no network groups: {why}")
    return mapping
