"""Launchers: registered classes that turn a `LaunchSpec` into an argv list (never a shell string).

- `HydraLauncher` ("hydra"): MPICH's mpiexec. Environment overrides as `-genv K V`.
- `OpenMPILauncher` ("mpirun"): Open MPI's mpirun (PRRTE in 5.x). Environment overrides as `-x K=V`;
  adds `--allow-run-as-root` when run as root and `--oversubscribe` when the ranks exceed the slots,
  or sets the equivalent environment variables instead (`flags_as_env=True`).
- `SrunLauncher` ("srun"): Slurm. Environment overrides travel in srun's own environment (srun
  exports its whole environment to the tasks by default).

A launcher returns a `LaunchCommand`: the argv plus the variables to ADD to the launcher process's own
environment. Running it is launch/process.py's job. `launcher_for(library)` picks the launcher that
belongs to an MPI library from its vendor; this package knows nothing else about libraries.
`rank_env_command(argv, env)` takes a user's own launcher command line instead of a spec and inserts
the variables the ranks must see in that launcher's syntax (`tunempi profile -- mpiexec -n 4 ./app`).
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from tunempi.errors import UsageError
from tunempi.launch.hosts import NodeAllocation, local_cores

if TYPE_CHECKING:
    from tunempi.mpi.library import MPILibrary

#: Binding choices every launcher understands (None: the launcher's own default).
BINDINGS: tuple[str, ...] = ("core", "none")


@dataclass(frozen=True)
class LaunchSpec:
    """What to launch and how to lay it out.

    command: the program's argv (executable first). ranks: total processes. nodes/ppn: processes per
    node across nodes (optional; ppn is the largest count where nodes are not filled evenly).
    allocation: the hosts that may be used (None: this machine). env: variables the RANKS must see.
    bind: "core", "none" or None (launcher default). extra_args: launcher options passed through as is,
    placed just before the command.
    """

    command: tuple[str, ...]
    ranks: int
    nodes: int | None = None
    ppn: int | None = None
    allocation: NodeAllocation | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    bind: str | None = None
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(str(c) for c in self.command))
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        object.__setattr__(self, "env", MappingProxyType({str(k): str(v) for k, v in self.env.items()}))
        if not self.command:
            raise UsageError("launch: empty command")
        if self.ranks <= 0:
            raise UsageError(f"launch: ranks must be positive, got {self.ranks}")
        if self.nodes is not None and self.nodes <= 0:
            raise UsageError(f"launch: nodes must be positive, got {self.nodes}")
        if self.ppn is not None and self.ppn <= 0:
            raise UsageError(f"launch: ppn must be positive, got {self.ppn}")
        if self.nodes is not None and self.ppn is not None and self.ranks > self.nodes * self.ppn:
            raise UsageError(f"launch: {self.ranks} ranks do not fit on {self.nodes} node(s) x {self.ppn} ppn")
        if self.bind is not None and self.bind not in BINDINGS:
            raise UsageError(f"launch: unknown binding {self.bind!r}; valid: {', '.join(BINDINGS)}")
        bad = [k for k in self.env if not k or "=" in k]
        if bad:
            raise UsageError(f"launch: bad environment variable name(s): {bad}")

    def hosts_used(self) -> NodeAllocation | None:
        """The allocation cut down to `nodes` hosts where both are given."""
        if self.allocation is None or self.nodes is None:
            return self.allocation
        return self.allocation.first(self.nodes)


@dataclass(frozen=True)
class LaunchCommand:
    """An argv to run, and variables to add to the environment of the launcher process itself."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def full_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) with this command's additions."""
        merged = dict(os.environ if base is None else base)
        merged.update(self.env)
        return merged


class Launcher(ABC):
    """A way to start an MPI job. Subclasses set `name` and are registered with @register_launcher."""

    name: ClassVar[str]
    default_executable: ClassVar[str]

    def __init__(self, executable: str | os.PathLike[str] | None = None) -> None:
        self.executable = str(executable) if executable is not None else self.default_executable

    @abstractmethod
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        """The argv (and launcher environment) that runs `spec`."""

    def argv(self, spec: LaunchSpec) -> list[str]:
        return list(self.command(spec).argv)

    def env_args(self, env: Mapping[str, str]) -> list[str]:
        """Options that pass `env` to every rank, to insert after the executable of a user's own
        launch command (the same spelling `command` uses); [] where the environment is inherited."""
        return []

    def with_rank_env(self, argv: Sequence[str], env: Mapping[str, str]) -> LaunchCommand:
        """A user's own command line for this launcher, with `env` passed to the RANKS only.

        `argv[0]` is this launcher; the variables go in as global options right after it (so they also
        apply to every section of an MPMD command line). The launcher process itself does not get them:
        an LD_PRELOAD meant for the ranks must not be loaded into the launcher.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot pass variables on a user's command line")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.executable!r})"


LAUNCHERS: dict[str, type[Launcher]] = {}


def register_launcher(cls: type[Launcher]) -> type[Launcher]:
    LAUNCHERS[cls.name] = cls
    return cls


def get_launcher(name: str, **options: Any) -> Launcher:
    """The launcher registered under `name`, built with `options` (UsageError naming the valid ones)."""
    try:
        cls = LAUNCHERS[name]
    except KeyError:
        raise UsageError(f"unknown launcher {name!r}; valid: {', '.join(sorted(LAUNCHERS))}") from None
    return cls(**options)


def _host_list(allocation: NodeAllocation, with_slots: bool) -> str:
    if with_slots:
        return ",".join(f"{h}:{s}" for h, s in zip(allocation.hosts, allocation.slots, strict=True))
    return ",".join(allocation.hosts)


def _binding(spec: LaunchSpec, hosts: NodeAllocation | None, launcher_binds_by_default: bool) -> str | None:
    """The binding to ask for: the spec's, except on emulated nodes (hosts sharing this machine's cores),
    where binding per node would put every node's rank 0 on the same core (measured 200x slower)."""
    if hosts is not None and hosts.emulated and hosts.nodes > 1:
        if spec.bind == "core" or (spec.bind is None and launcher_binds_by_default):
            return "none"
    return spec.bind


#: Inside a Slurm allocation every launch is a job step (Hydra and PRRTE start their proxies with srun).
#: By default a step holds the CPUs of its tasks, so a second engine started while the first still runs
#: (one per cvar setup; they take turns measuring) waited forever: "did not start within 120 s" (measured
#: in `salloc -N 2 -n 2`). Steps of a tuning job may share the allocation's CPUs.
SLURM_OVERLAP_ENV: Mapping[str, str] = MappingProxyType({"SLURM_OVERLAP": "1"})


def _in_slurm(hosts: NodeAllocation | None) -> bool:
    return hosts is not None and hosts.source == "slurm"


def _check_multinode(spec: LaunchSpec, launcher: str) -> None:
    if spec.nodes is not None and spec.nodes > 1 and spec.allocation is None:
        raise UsageError(
            f"{launcher}: {spec.nodes} nodes asked for but no host list given "
            "(run inside a Slurm or PBS job, or pass a hostfile)"
        )


@register_launcher
class HydraLauncher(Launcher):
    """MPICH's Hydra `mpiexec`."""

    name = "hydra"
    default_executable = "mpiexec"

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        _check_multinode(spec, self.name)
        argv = [self.executable, "-n", str(spec.ranks)]
        hosts = spec.hosts_used()
        if hosts is not None:
            if hosts.agent is not None:
                argv += ["-launcher", "ssh", "-launcher-exec", hosts.agent]
            elif _in_slurm(hosts):
                # MPICH's Hydra starts its proxies with srun inside an allocation by itself; Intel MPI's
                # tries ssh unless told (measured in the private Slurm: "Ssh bootstrap cannot launch").
                argv += ["-launcher", "slurm"]
            if hosts.emulated:
                # The proxies call back the host mpiexec runs on by its name, which for an emulated node
                # (mpiexec inside an sbatch script runs "on" n1) resolves nowhere: hydra then hangs. Intel MPI's
                # Hydra ignores -localhost for that and needs its interface named (measured inside sbatch).
                argv += ["-localhost", "127.0.0.1", "-iface", "lo"]
            # With -ppn Hydra places ppn ranks per host; without it, per-host slot counts do.
            argv += ["-hosts", _host_list(hosts, with_slots=spec.ppn is None)]
        if spec.ppn is not None:
            argv += ["-ppn", str(spec.ppn)]
        bind = _binding(spec, hosts, launcher_binds_by_default=False)
        if bind is not None:
            argv += ["-bind-to", bind]
        argv += self.env_args(spec.env)
        launcher_env = SLURM_OVERLAP_ENV if _in_slurm(hosts) else MappingProxyType({})
        return LaunchCommand((*argv, *spec.extra_args, *spec.command), launcher_env)

    def env_args(self, env: Mapping[str, str]) -> list[str]:
        return [token for key in sorted(env) for token in ("-genv", key, env[key])]

    def with_rank_env(self, argv: Sequence[str], env: Mapping[str, str]) -> LaunchCommand:
        _check_env_names(env)
        flags = self.env_args(env)
        return LaunchCommand((argv[0], *flags, *argv[1:]))


@register_launcher
class OpenMPILauncher(Launcher):
    """Open MPI's `mpirun` (PRRTE's prterun in 5.x).

    as_root / cores default to this process's effective uid and usable cores; tests pass them.
    With flags_as_env=True, root permission and oversubscription are granted through environment
    variables (both the 4.x and the PRRTE 5.x spellings) instead of command-line flags.
    """

    name = "mpirun"
    default_executable = "mpirun"

    #: Environment spellings of --allow-run-as-root and --oversubscribe. Measured on 5.0.11:
    #: OMPI_MCA_rmaps_base_oversubscribe (the 4.x spelling) is ignored; the PRRTE one works.
    ROOT_ENV: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    )
    OVERSUBSCRIBE_ENV: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"OMPI_MCA_rmaps_base_oversubscribe": "1", "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
    )

    def __init__(
        self,
        executable: str | os.PathLike[str] | None = None,
        *,
        as_root: bool | None = None,
        cores: int | None = None,
        flags_as_env: bool = False,
        runtime: str | None = None,
    ) -> None:
        super().__init__(executable)
        self.as_root = (os.geteuid() == 0) if as_root is None else as_root
        self.cores = local_cores() if cores is None else cores
        self.flags_as_env = flags_as_env
        if runtime not in (None, "orte", "prrte"):
            raise UsageError(f"unknown Open MPI runtime {runtime!r}; valid: orte, prrte")
        self.runtime = runtime

    @property
    def orte(self) -> bool:
        """Open MPI 4.x's runtime (ORTE: mpirun is orterun, no prterun beside it) rather than 5.x's PRRTE;
        `runtime` when given, else found from the executable."""
        if self.runtime is not None:
            return self.runtime == "orte"
        found = shutil.which(self.executable)
        if found is None:
            return False
        resolved = Path(os.path.realpath(found))
        return resolved.name == "orterun" or (
            (resolved.parent / "orterun").exists() and not (resolved.parent / "prterun").exists())

    def oversubscribed(self, spec: LaunchSpec) -> bool:
        """More ranks than slots: in total, or per node where ppn is given."""
        hosts = spec.hosts_used()
        if hosts is None:
            return spec.ranks > self.cores or (spec.ppn is not None and spec.ppn > self.cores)
        return spec.ranks > hosts.total_slots or (spec.ppn is not None and spec.ppn > min(hosts.slots))

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        _check_multinode(spec, self.name)
        oversubscribe = self.oversubscribed(spec)
        launcher_env: dict[str, str] = {}
        argv = [self.executable]
        if self.as_root:
            if self.flags_as_env:
                launcher_env.update(self.ROOT_ENV)
            else:
                argv.append("--allow-run-as-root")
        argv += ["-n", str(spec.ranks)]
        if oversubscribe:
            if self.flags_as_env:
                launcher_env.update(self.OVERSUBSCRIBE_ENV)
            else:
                argv.append("--oversubscribe")
        hosts = spec.hosts_used()
        if hosts is not None:
            if hosts.agent is not None:  # PRRTE (5.x) and ORTE (4.x) name the remote-start agent differently
                argv += (["--mca", "plm_rsh_agent", hosts.agent] if self.orte
                         else ["--prtemca", "plm_ssh_agent", hosts.agent])
            argv += ["--host", _host_list(hosts, with_slots=True)]
        if spec.ppn is not None:
            argv += ["--map-by", f"ppr:{spec.ppn}:node"]
        bind = _binding(spec, hosts, launcher_binds_by_default=True)
        if bind is not None:
            # PRRTE refuses to bind more processes than cores unless told the overload is wanted.
            overload = bind == "core" and oversubscribe
            argv += ["--bind-to", "core:overload-allowed" if overload else bind]
        argv += self.env_args(spec.env)
        if _in_slurm(hosts):
            launcher_env.update(SLURM_OVERLAP_ENV)
        return LaunchCommand((*argv, *spec.extra_args, *spec.command), MappingProxyType(launcher_env))

    def env_args(self, env: Mapping[str, str]) -> list[str]:
        # On one node PRRTE 5.0.11 hands its whole environment to the ranks (measured); to other nodes only
        # OMPI_*/PMIX_* and what -x names travel, so every variable is named.
        return [token for key in sorted(env) for token in ("-x", f"{key}={env[key]}")]

    def with_rank_env(self, argv: Sequence[str], env: Mapping[str, str]) -> LaunchCommand:
        # mpirun forwards nothing but what -x names (and OMPI_*/PRTE_* of its own environment).
        _check_env_names(env)
        flags = self.env_args(env)
        return LaunchCommand((argv[0], *flags, *argv[1:]))


@register_launcher
class SrunLauncher(Launcher):
    """Slurm's `srun`, inside an allocation. `mpi` selects the PMI plugin (srun --mpi=...)."""

    name = "srun"
    default_executable = "srun"

    def __init__(self, executable: str | os.PathLike[str] | None = None, *, mpi: str | None = None) -> None:
        super().__init__(executable)
        self.mpi = mpi

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        argv = [self.executable, "-n", str(spec.ranks)]
        if spec.nodes is not None:
            argv += ["-N", str(spec.nodes)]
        if spec.ppn is not None:
            argv += ["--ntasks-per-node", str(spec.ppn)]
        hosts = spec.hosts_used()
        if hosts is not None:
            argv += ["--nodelist", _host_list(hosts, with_slots=False)]
        bind = _binding(spec, hosts, launcher_binds_by_default=False)
        if bind is not None:
            argv.append("--cpu-bind=cores" if bind == "core" else "--cpu-bind=none")
        if self.mpi is not None:
            argv.append(f"--mpi={self.mpi}")
        if _in_slurm(hosts):
            argv.append("--overlap")  # see SLURM_OVERLAP_ENV
        # A failing rank ends the step instead of leaving the others waiting in a collective.
        argv += ["--kill-on-bad-exit=1", "--export=ALL"]
        return LaunchCommand((*argv, *spec.extra_args, *spec.command), MappingProxyType(dict(spec.env)))

    def with_rank_env(self, argv: Sequence[str], env: Mapping[str, str]) -> LaunchCommand:
        """The variables go in `--export=...,NAME=VALUE` (for the tasks only: srun's own environment is
        left alone, a preload meant for the ranks must not be loaded into srun). A user's `--export` list
        is extended (`NONE` is replaced by the variables); without one, `--export=ALL,...` is added
        right after `srun`."""
        _check_env_names(env)
        bad = [k for k, v in env.items() if "," in v]
        if bad:
            raise UsageError(f"srun: cannot pass a value containing ',' through --export: {bad}")
        pairs = ",".join(f"{key}={env[key]}" for key in sorted(env))
        if not pairs:
            return LaunchCommand(tuple(argv))
        # srun's options and the program are not told apart without srun's option table: the user's
        # first --export (an application option of that name is unlikely) is extended, else one is added.
        out = list(argv)
        for i, token in enumerate(out):
            if token.startswith("--export=") or (token == "--export" and i + 1 < len(out)):
                value = token[len("--export="):] if token.startswith("--export=") else out.pop(i + 1)
                out[i] = f"--export={pairs}" if value.upper() == "NONE" else f"--export={value},{pairs}"
                return LaunchCommand(tuple(out))
        return LaunchCommand((out[0], f"--export=ALL,{pairs}", *out[1:]))


def _check_env_names(env: Mapping[str, str]) -> None:
    bad = [k for k in env if not k or "=" in k]
    if bad:
        raise UsageError(f"launch: bad environment variable name(s): {bad}")


#: Launcher executables recognised by name on a user's command line.
_HYDRA_NAMES = frozenset({"mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich"})
_OPENMPI_NAMES = frozenset({"mpirun.openmpi", "mpiexec.openmpi", "orterun", "prterun", "prun"})
_GENERIC_NAMES = frozenset({"mpiexec", "mpirun"})
#: Files next to a generic mpiexec/mpirun that tell whose launcher it is.
_HYDRA_MARKERS = ("hydra_pmi_proxy", "mpiexec.hydra", "mpichversion")
_OPENMPI_MARKERS = ("prterun", "orterun", "ompi_info")


def launcher_for_argv(argv: Sequence[str], library: MPILibrary | None = None) -> Launcher | None:
    """The launcher a user's command line starts with, or None when it is no launcher (a singleton
    program or a script).

    Specific names (`mpiexec.hydra`, `mpirun.openmpi`, `prterun`, `srun`, ...) decide by themselves. A
    generic `mpiexec`/`mpirun` is Hydra or Open MPI's after the files next to it (`hydra_pmi_proxy`,
    `prterun`, ...), else after `library`'s vendor.
    """
    if not argv:
        raise UsageError("no command given; e.g. mpiexec -n 4 ./app")
    executable = str(argv[0])
    name = os.path.basename(executable)
    if name == "srun":
        return SrunLauncher(executable)
    if name in _HYDRA_NAMES:
        return HydraLauncher(executable)
    if name in _OPENMPI_NAMES:
        return OpenMPILauncher(executable)
    if name not in _GENERIC_NAMES:
        return None
    where = shutil.which(executable)
    if where:
        # Debian: /usr/bin/mpirun -> alternatives -> orterun, or -> mpiexec.hydra: the real name decides.
        # Only then the files next to it; Debian's MPICH and Open MPI share /usr/bin, where both kinds are.
        resolved = Path(os.path.realpath(where))
        if resolved.name in _HYDRA_NAMES:
            return HydraLauncher(executable)
        if resolved.name in _OPENMPI_NAMES:
            return OpenMPILauncher(executable)
        hydra = any((resolved.parent / marker).exists() for marker in _HYDRA_MARKERS)
        openmpi = any((resolved.parent / marker).exists() for marker in _OPENMPI_MARKERS)
        if hydra != openmpi:
            return HydraLauncher(executable) if hydra else OpenMPILauncher(executable)
    if library is not None and library.launcher is not None:
        return get_launcher(library.launcher, executable=executable)
    raise UsageError(
        f"cannot tell whose launcher {executable!r} is (Hydra or Open MPI); give --mpi, or the launcher's "
        f"specific name ({', '.join(sorted(_HYDRA_NAMES | _OPENMPI_NAMES))})"
    )


def own_launcher(argv: Sequence[str], library: MPILibrary) -> list[str]:
    """`argv` with a bare `mpiexec`/`mpirun` replaced by `library`'s own launcher.

    A bare name means "this library's launcher", never whatever comes first in PATH (a system's
    /usr/bin/mpiexec may belong to another MPI, whose ranks would not run `library`).
    """
    argv = [str(a) for a in argv]
    if argv and argv[0] in _GENERIC_NAMES:
        argv[0] = str(library.mpiexec)
    return argv


def rank_env_command(
    argv: Sequence[str], env: Mapping[str, str], library: MPILibrary | None = None
) -> LaunchCommand:
    """A user's command line with `env` passed to its ranks: on the launcher's command line for a
    recognised launcher (launcher_for_argv), else in the environment of the command itself."""
    launcher = launcher_for_argv(argv, library)
    if launcher is None:
        _check_env_names(env)
        return LaunchCommand(tuple(str(a) for a in argv), MappingProxyType(dict(env)))
    return launcher.with_rank_env([str(a) for a in argv], env)


def launcher_for(library: MPILibrary, *, use_srun: bool = False, **options: Any) -> Launcher:
    """The launcher for an MPI library: its own mpiexec/mpirun, or srun when asked.

    Only `library.launcher` and `library.mpiexec` are used. `options` go to the launcher's constructor.
    """
    if use_srun:
        return SrunLauncher(**options)
    if library.launcher is None:
        from tunempi.mpi.library import LAUNCHERS as OWN_LAUNCHERS

        raise UsageError(f"no launcher known for vendor {library.vendor!r}; known: {', '.join(OWN_LAUNCHERS)}")
    return get_launcher(library.launcher, executable=library.mpiexec, **options)

