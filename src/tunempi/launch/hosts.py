"""Which nodes a job may use: node lists from Slurm, PBS or a hostfile, as a `NodeAllocation`.

Slurm's compressed host lists (`node[01-04,07],gpu-a[1-2]b[1-2]`) and per-node counts (`36(x2),40`)
are expanded here, without calling `scontrol`, so this works on login nodes and in tests alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path

from tunempi.errors import UsageError


def local_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


#: Where an allocation outside a batch system comes from (an emulated cluster sets them: launch/cluster.py).
HOSTFILE_VAR = "TUNEMPI_HOSTFILE"
AGENT_VAR = "TUNEMPI_LAUNCH_AGENT"
EMULATED_VAR = "TUNEMPI_EMULATED_NODES"


# --- Slurm host list syntax --------------------------------------------------------------------------
def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"bad host list {text!r}: unbalanced ']'")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise UsageError(f"bad host list {text!r}: unbalanced '['")
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _expand_range_set(body: str, whole: str) -> list[str]:
    """'01-04,07' -> ['01', '02', '03', '04', '07'], keeping zero padding."""
    values: list[str] = []
    for item in body.split(","):
        item = item.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not match:
            raise UsageError(f"bad host list {whole!r}: cannot read range {item!r}")
        lo_text, hi_text = match.group(1), match.group(2)
        if hi_text is None:
            values.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise UsageError(f"bad host list {whole!r}: range {item!r} runs backwards")
        width = len(lo_text) if lo_text.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list: 'node[01-03,07],login' -> ['node01', 'node02', 'node03', 'node07', 'login'].

    Several bracket groups in one name expand as a product, in Slurm's order ('r[1-2]n[1-2]' ->
    r1n1, r1n2, r2n1, r2n2). Duplicates are kept out, order is kept.
    """
    hosts: list[str] = []
    for part in _split_top_level(text):
        pieces = re.split(r"\[([^\]]*)\]", part)  # literal, range, literal, range, ..., literal
        choices: list[list[str]] = []
        for index, piece in enumerate(pieces):
            choices.append(_expand_range_set(piece, text) if index % 2 else [piece])
        hosts.extend("".join(combo) for combo in product(*choices))
    return list(dict.fromkeys(hosts))


def expand_counts(text: str) -> list[int]:
    """Expand Slurm's per-node counts: '36(x2),40' -> [36, 36, 40] (SLURM_JOB_CPUS_PER_NODE, ...)."""
    counts: list[int] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item)
        if not match:
            raise UsageError(f"bad Slurm count list {text!r}: cannot read {item!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


# --- the allocation ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeAllocation:
    """Hosts a job may use and how many processes each may take (`slots`, same order as `hosts`)."""

    hosts: tuple[str, ...]
    slots: tuple[int, ...]
    source: str = ""  # where it came from: "slurm", "pbs", a hostfile path, "local"
    #: A stand-in for ssh that starts a command on a host (an emulated cluster's agent); None: the
    #: launcher's own way (ssh, or the batch system's).
    agent: str | None = None
    #: The hosts are emulated nodes of this one machine (launch/cluster.py): they share its cores (binding
    #: each node's ranks to "its" cores would pile every node's rank 0 onto one core, so launchers leave
    #: multi-node ranks unbound) and their names do not resolve (Hydra is told to be reached on loopback).
    emulated: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", tuple(self.hosts))
        object.__setattr__(self, "slots", tuple(int(s) for s in self.slots))
        if not self.hosts:
            raise UsageError(f"empty node allocation ({self.source or 'no hosts given'})")
        if len(self.slots) != len(self.hosts):
            raise UsageError(f"node allocation has {len(self.hosts)} hosts but {len(self.slots)} slot counts")
        if any(s <= 0 for s in self.slots):
            raise UsageError(f"node allocation has a host with no slots: {dict(zip(self.hosts, self.slots, strict=True))}")

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def total_slots(self) -> int:
        return sum(self.slots)

    def first(self, nodes: int) -> NodeAllocation:
        """The first `nodes` hosts (UsageError when there are fewer)."""
        if not 0 < nodes <= self.nodes:
            raise UsageError(f"asked for {nodes} node(s) but the allocation ({self.source}) has {self.nodes}")
        return replace(self, hosts=self.hosts[:nodes], slots=self.slots[:nodes])

    # --- constructors ---------------------------------------------------------------------------
    @classmethod
    def local(cls, slots: int | None = None) -> NodeAllocation:
        """This machine alone, with one slot per usable core unless told otherwise."""
        return cls(("localhost",), (slots or local_cores(),), "local")

    @classmethod
    def from_slurm(cls, env: Mapping[str, str] | None = None) -> NodeAllocation:
        """From SLURM_JOB_NODELIST (or SLURM_NODELIST) and the per-node task or CPU counts.

        TUNEMPI_EMULATED_NODES=1 (set by an emulated cluster) marks the nodes as emulated ones."""
        env = os.environ if env is None else env
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not nodelist:
            raise UsageError("not inside a Slurm allocation: SLURM_JOB_NODELIST is not set")
        hosts = expand_hostlist(nodelist)
        slots = [1] * len(hosts)
        for variable in ("SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"):
            if env.get(variable):
                counts = expand_counts(env[variable])
                if len(counts) == len(hosts):
                    slots = counts
                    break
        return cls(tuple(hosts), tuple(slots), "slurm", emulated=_flag(env, EMULATED_VAR))

    @classmethod
    def from_pbs_nodefile(cls, path: str | Path | None = None) -> NodeAllocation:
        """From a PBS/Torque node file (one line per slot; $PBS_NODEFILE by default)."""
        if path is None:
            path = os.environ.get("PBS_NODEFILE")
            if not path:
                raise UsageError("not inside a PBS job: PBS_NODEFILE is not set")
        counts: dict[str, int] = {}
        for line in _read_lines(Path(path)):
            counts[line.split()[0]] = counts.get(line.split()[0], 0) + 1
        return cls(tuple(counts), tuple(counts.values()), "pbs")

    @classmethod
    def from_hostfile(cls, path: str | Path, *, agent: str | None = None,
                      emulated: bool = False) -> NodeAllocation:
        """From a hostfile in Open MPI (`host slots=N`), Hydra (`host:N`) or plain (`host`) form.

        A host named on several lines adds up its slots; `#` starts a comment.
        """
        counts: dict[str, int] = {}
        for line in _read_lines(Path(path)):
            host, slots = _parse_hostfile_line(line, path)
            counts[host] = counts.get(host, 0) + slots
        return cls(tuple(counts), tuple(counts.values()), str(path), agent=agent, emulated=emulated)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> NodeAllocation | None:
        """The batch system's allocation (Slurm, then PBS), else TUNEMPI_HOSTFILE's hosts (launched
        through TUNEMPI_LAUNCH_AGENT when set), or None."""
        env = os.environ if env is None else env
        if env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"):
            return cls.from_slurm(env)
        if env.get("PBS_NODEFILE"):
            return replace(cls.from_pbs_nodefile(env["PBS_NODEFILE"]), emulated=_flag(env, EMULATED_VAR))
        if env.get(HOSTFILE_VAR):
            return cls.from_hostfile(env[HOSTFILE_VAR], agent=env.get(AGENT_VAR) or None,
                                     emulated=_flag(env, EMULATED_VAR))
        return None

    @classmethod
    def given_or_found(cls, hostfile: str | Path | None, env: Mapping[str, str] | None = None
                       ) -> NodeAllocation | None:
        """A --hostfile's hosts, launched as TUNEMPI_HOSTFILE's are (through TUNEMPI_LAUNCH_AGENT, emulated
        per TUNEMPI_EMULATED_NODES); without one, from_environment()."""
        env = os.environ if env is None else env
        if hostfile:
            return cls.from_hostfile(hostfile, agent=env.get(AGENT_VAR) or None, emulated=_flag(env, EMULATED_VAR))
        return cls.from_environment(env)

    # --- writing ----------------------------------------------------------------------------------
    def hostfile_text(self, style: str = "mpirun") -> str:
        """A hostfile for this allocation: style 'mpirun' (Open MPI's `host slots=N`) or 'hydra' (`host:N`)."""
        if style == "mpirun":
            lines = [f"{h} slots={s}" for h, s in zip(self.hosts, self.slots, strict=True)]
        elif style == "hydra":
            lines = [f"{h}:{s}" for h, s in zip(self.hosts, self.slots, strict=True)]
        else:
            raise UsageError(f"unknown hostfile style {style!r}; valid: mpirun, hydra")
        return "\n".join(lines) + "\n"


def emulated_here(env: Mapping[str, str] | None = None) -> bool:
    """This shell's nodes are an emulated cluster's (TUNEMPI_EMULATED_NODES, set by `tunempi cluster env`):
    what a plan made before the allocation assumes of the one it asks for."""
    return _flag(os.environ if env is None else env, EMULATED_VAR)


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "yes", "true")


def _read_lines(path: Path) -> Iterable[str]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read host file {path}: {exc.strerror}") from None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            yield line


def _parse_hostfile_line(line: str, path: str | Path) -> tuple[str, int]:
    tokens = line.split()
    host, slots = tokens[0], 1
    if ":" in host:  # Hydra: host:N
        host, _, count = host.partition(":")
        if not count.isdigit():
            raise UsageError(f"{path}: cannot read slots in {line!r} (expected host:N)")
        slots = int(count)
    for token in tokens[1:]:
        key, _, value = token.partition("=")
        if key in ("slots", "max_slots", "max-slots") and value.isdigit():
            if key == "slots":
                slots = int(value)
        else:
            raise UsageError(f"{path}: cannot read {token!r} in {line!r} (expected slots=N)")
    return host, slots
