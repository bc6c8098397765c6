"""Emulated nodes in the launchers' argv (agent, shared cores), allocations from TUNEMPI_HOSTFILE, Slurm's
topology, and the emulated cluster's generated files (no daemon is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.launch import HydraLauncher, LaunchSpec, NodeAllocation, OpenMPILauncher, SrunLauncher
from tunempi.launch.cluster import EmulatedCluster, default_cluster_dir
from tunempi.launch.topology import group_nodes, parse_slurm_topology

PROG = ("/opt/engine",)
EMULATED = NodeAllocation(("n1", "n2", "n3"), (2, 2, 2), "hf", agent="/st/agent", emulated=True)


def _spec(ranks: int, **kwargs: object) -> LaunchSpec:
    return LaunchSpec(PROG, ranks, **kwargs)  # type: ignore[arg-type]


def test_hydra_starts_emulated_nodes_through_the_agent_unbound() -> None:
    assert HydraLauncher().argv(_spec(2, nodes=2, ppn=1, allocation=EMULATED, bind="core")) == [
        "mpiexec", "-n", "2", "-launcher", "ssh", "-launcher-exec", "/st/agent", "-localhost", "127.0.0.1", "-iface", "lo",
        "-hosts", "n1,n2", "-ppn", "1", "-bind-to", "none", *PROG,
    ]
    # One node of the emulated cluster: its ranks may be bound (they do not meet another node's ranks).
    assert HydraLauncher().argv(_spec(2, nodes=1, allocation=EMULATED, bind="core")) == [
        "mpiexec", "-n", "2", "-launcher", "ssh", "-launcher-exec", "/st/agent", "-localhost", "127.0.0.1", "-iface", "lo",
        "-hosts", "n1:2", "-bind-to", "core", *PROG,
    ]


def test_openmpi_emulated_nodes_never_bind_by_default() -> None:
    launcher = OpenMPILauncher(as_root=False, cores=2, runtime="prrte")
    assert launcher.argv(_spec(4, nodes=2, ppn=2, allocation=EMULATED)) == [
        "mpirun", "-n", "4", "--prtemca", "plm_ssh_agent", "/st/agent", "--host", "n1:2,n2:2",
        "--map-by", "ppr:2:node", "--bind-to", "none", *PROG,
    ]
    orte = OpenMPILauncher(as_root=False, cores=2, runtime="orte")  # Open MPI 4.x (Debian's 4.1.4)
    assert orte.argv(_spec(4, nodes=2, ppn=2, allocation=EMULATED))[3:6] == ["--mca", "plm_rsh_agent", "/st/agent"]
    real = NodeAllocation(("n1", "n2"), (2, 2), "slurm")
    assert "--bind-to" not in launcher.argv(_spec(4, nodes=2, ppn=2, allocation=real))


def test_srun_on_emulated_nodes_does_not_bind() -> None:
    shared = NodeAllocation(("n1", "n2"), (2, 2), "slurm", emulated=True)
    argv = SrunLauncher(mpi="pmi2").argv(_spec(2, nodes=2, ppn=1, allocation=shared, bind="core"))
    assert "--cpu-bind=none" in argv and "--cpu-bind=cores" not in argv


def test_allocation_from_hostfile_variables(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("n1 slots=2\nn2 slots=2\n")
    env = {"TUNEMPI_HOSTFILE": str(hostfile), "TUNEMPI_LAUNCH_AGENT": "/st/agent", "TUNEMPI_EMULATED_NODES": "1"}
    allocation = NodeAllocation.from_environment(env)
    assert allocation == NodeAllocation(("n1", "n2"), (2, 2), str(hostfile), agent="/st/agent", emulated=True)
    assert allocation.first(1).agent == "/st/agent" and allocation.first(1).emulated
    # Slurm wins over a hostfile; the shared-cores flag travels into the allocation.
    slurm = NodeAllocation.from_environment({**env, "SLURM_JOB_NODELIST": "n[3-4]", "SLURM_TASKS_PER_NODE": "1(x2)"})
    assert slurm == NodeAllocation(("n3", "n4"), (1, 1), "slurm", emulated=True)
    assert NodeAllocation.from_environment({}) is None


def test_slurm_topology_leaf_switches_are_groups() -> None:
    text = ("SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[1-2]\nSwitchName=s2 Level=0 LinkSpeed=1 Nodes=n3,n4\n"
            "SwitchName=top Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=s1,s2\n")
    mapping = parse_slurm_topology(text)
    assert mapping == {"n1": "s1", "n2": "s1", "n3": "s2", "n4": "s2"}
    assert group_nodes(["n1", "n2", "n3", "n4"], mapping=mapping) == {"s1": ("n1", "n2"), "s2": ("n3", "n4")}


def test_state_directory_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TUNEMPI_CLUSTER_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_cluster_dir() == tmp_path / "state" / "tunempi" / "cluster"
    monkeypatch.setenv("TUNEMPI_CLUSTER_DIR", str(tmp_path / "mine"))
    assert default_cluster_dir() == tmp_path / "mine"
    assert EmulatedCluster().dir == tmp_path / "mine"
    # The marker that finds the cluster's processes depends on the directory only.
    assert EmulatedCluster(tmp_path / "mine").marker == EmulatedCluster().marker
    assert EmulatedCluster(tmp_path / "other").marker != EmulatedCluster().marker


def test_slurm_conf_is_loopback_only_with_distinct_ports(tmp_path: Path) -> None:
    cluster = EmulatedCluster(tmp_path)
    cluster._write_slurm_conf(["n1", "n2", "n3"], 2, group_size=2)
    conf = cluster.slurm_conf.read_text()
    assert "AuthType=auth/none" in conf and "TopologyPlugin=topology/tree" in conf
    node_lines = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert len(node_lines) == 3 and all("NodeAddr=127.0.0.1" in line for line in node_lines)
    ports = [line.split("Port=")[1].split()[0] for line in conf.splitlines() if "Port=" in line]
    assert len(ports) == 4 and len(set(ports)) == 4  # slurmctld + one per slurmd
    assert (tmp_path / "topology.conf").read_text().splitlines() == [
        "SwitchName=s1 Nodes=n1,n2", "SwitchName=s2 Nodes=n3", "SwitchName=top Switches=s1,s2"]
    assert all((tmp_path / sub / n).is_dir() for sub in ("spool", "tmp") for n in ("n1", "n2", "n3"))


def test_stopped_cluster_status_and_environment_refused(tmp_path: Path) -> None:
    cluster = EmulatedCluster(tmp_path)
    assert cluster.status().state == "stopped"
    with pytest.raises(Exception, match="no emulated cluster"):
        cluster.environment()
    assert cluster.stop() == 0


def test_launches_inside_slurm_may_share_the_allocation_cpus() -> None:
    """Several engines of one tuning job live at once (one per cvar setup): their job steps must overlap."""
    slurm = NodeAllocation(("n1", "n2"), (1, 1), "slurm")
    spec = _spec(2, nodes=2, ppn=1, allocation=slurm)
    assert dict(HydraLauncher().command(spec).env) == {"SLURM_OVERLAP": "1"}
    assert OpenMPILauncher(as_root=False, cores=2).command(spec).env["SLURM_OVERLAP"] == "1"
    assert "--overlap" in SrunLauncher().argv(spec)
    hostfile = NodeAllocation(("n1", "n2"), (1, 1), "hf")
    assert "SLURM_OVERLAP" not in HydraLauncher().command(_spec(2, nodes=2, ppn=1, allocation=hostfile)).env


def test_hydra_inside_a_slurm_allocation_starts_its_proxies_with_slurm() -> None:
    """MPICH's Hydra picks srun by itself inside an allocation; Intel MPI's tries ssh unless told."""
    real = NodeAllocation(("n1", "n2"), (2, 2), "slurm")
    assert HydraLauncher().argv(_spec(2, nodes=2, ppn=1, allocation=real))[3:7] == [
        "-launcher", "slurm", "-hosts", "n1,n2"]
    hostfile = NodeAllocation(("n1", "n2"), (2, 2), "hostfile", agent="/st/agent")
    argv = HydraLauncher().argv(_spec(2, nodes=2, ppn=1, allocation=hostfile))
    assert "slurm" not in argv and argv[3:7] == ["-launcher", "ssh", "-launcher-exec", "/st/agent"]
