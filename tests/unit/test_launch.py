"""Launchers build exact argv lists; node lists from Slurm, PBS and hostfiles; topology groups."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.launch import (
    LAUNCHERS,
    HydraLauncher,
    LaunchSpec,
    NodeAllocation,
    OpenMPILauncher,
    SrunLauncher,
    expand_counts,
    expand_hostlist,
    get_launcher,
    group_nodes,
    launcher_for,
    launcher_for_argv,
    rank_env_command,
    read_group_file,
)
from tunempi.mpi.library import MPILibrary

PROG = ("/opt/engine", "--serve")
TWO_NODES = NodeAllocation(("n01", "n02"), (4, 4), "test")


def _spec(ranks: int, **kwargs: object) -> LaunchSpec:
    return LaunchSpec(PROG, ranks, **kwargs)  # type: ignore[arg-type]


# --- Hydra -------------------------------------------------------------------------------------------
def test_hydra_minimal() -> None:
    assert HydraLauncher().argv(_spec(2)) == ["mpiexec", "-n", "2", "/opt/engine", "--serve"]


def test_hydra_env_binding_and_sorted_genv() -> None:
    spec = _spec(2, bind="core", env={"B": "2", "A": "x y"})
    assert HydraLauncher("/p/bin/mpiexec").argv(spec) == [
        "/p/bin/mpiexec", "-n", "2", "-bind-to", "core", "-genv", "A", "x y", "-genv", "B", "2", *PROG,
    ]


def test_hydra_hosts_with_slots_or_ppn() -> None:
    assert HydraLauncher().argv(_spec(8, allocation=TWO_NODES)) == [
        "mpiexec", "-n", "8", "-hosts", "n01:4,n02:4", *PROG,
    ]
    assert HydraLauncher().argv(_spec(4, nodes=2, ppn=2, allocation=TWO_NODES, extra_args=("-v",))) == [
        "mpiexec", "-n", "4", "-hosts", "n01,n02", "-ppn", "2", "-v", *PROG,
    ]


def test_hydra_uses_first_nodes_of_allocation() -> None:
    alloc = NodeAllocation(("a", "b", "c"), (2, 2, 2))
    assert HydraLauncher().argv(_spec(2, nodes=1, ppn=2, allocation=alloc)) == [
        "mpiexec", "-n", "2", "-hosts", "a", "-ppn", "2", *PROG,
    ]
    with pytest.raises(UsageError, match="has 3"):
        HydraLauncher().argv(_spec(8, nodes=4, ppn=2, allocation=alloc))


def test_multinode_without_hosts_is_refused() -> None:
    with pytest.raises(UsageError, match="no host list"):
        HydraLauncher().argv(_spec(4, nodes=2, ppn=2))


# --- Open MPI ----------------------------------------------------------------------------------------
def test_openmpi_user_within_cores() -> None:
    launcher = OpenMPILauncher("mpirun", as_root=False, cores=2)
    assert launcher.argv(_spec(2, env={"K": "v=1"})) == ["mpirun", "-n", "2", "-x", "K=v=1", *PROG]


def test_openmpi_root_and_oversubscribed_flags() -> None:
    launcher = OpenMPILauncher("/o/bin/mpirun", as_root=True, cores=2)
    assert launcher.argv(_spec(4)) == ["/o/bin/mpirun", "--allow-run-as-root", "-n", "4", "--oversubscribe", *PROG]


def test_openmpi_oversubscribed_core_binding_allows_overload() -> None:
    launcher = OpenMPILauncher(as_root=False, cores=2)
    assert launcher.argv(_spec(4, bind="core")) == [
        "mpirun", "-n", "4", "--oversubscribe", "--bind-to", "core:overload-allowed", *PROG,
    ]
    assert launcher.argv(_spec(2, bind="core")) == ["mpirun", "-n", "2", "--bind-to", "core", *PROG]
    assert launcher.argv(_spec(2, bind="none")) == ["mpirun", "-n", "2", "--bind-to", "none", *PROG]


def test_openmpi_flags_as_environment() -> None:
    launcher = OpenMPILauncher(as_root=True, cores=2, flags_as_env=True)
    command = launcher.command(_spec(4))
    assert command.argv == ("mpirun", "-n", "4", *PROG)
    assert dict(command.env) == {
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1", "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    }
    assert command.full_env({"PATH": "/bin"})["PATH"] == "/bin"
    assert command.full_env({"PATH": "/bin"})["OMPI_ALLOW_RUN_AS_ROOT"] == "1"


def test_openmpi_hosts_ppn_and_oversubscription_per_node() -> None:
    launcher = OpenMPILauncher(as_root=False, cores=64)  # the local core count does not matter with hosts
    assert launcher.argv(_spec(8, nodes=2, ppn=4, allocation=TWO_NODES)) == [
        "mpirun", "-n", "8", "--host", "n01:4,n02:4", "--map-by", "ppr:4:node", *PROG,
    ]
    assert launcher.argv(_spec(10, nodes=2, ppn=5, allocation=TWO_NODES)) == [
        "mpirun", "-n", "10", "--oversubscribe", "--host", "n01:4,n02:4", "--map-by", "ppr:5:node", *PROG,
    ]


# --- srun --------------------------------------------------------------------------------------------
def test_srun_layout_and_env_through_process_environment() -> None:
    command = SrunLauncher(mpi="pmix").command(
        _spec(8, nodes=2, ppn=4, allocation=TWO_NODES, bind="core", env={"A": "1"})
    )
    assert command.argv == (
        "srun", "-n", "8", "-N", "2", "--ntasks-per-node", "4", "--nodelist", "n01,n02", "--cpu-bind=cores",
        "--mpi=pmix", "--kill-on-bad-exit=1", "--export=ALL", *PROG,
    )
    assert dict(command.env) == {"A": "1"}
    assert SrunLauncher().argv(_spec(2)) == ["srun", "-n", "2", "--kill-on-bad-exit=1", "--export=ALL", *PROG]


# --- spec validation, registry, choice by vendor ------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ranks": 0}, "ranks must be positive"),
        ({"ranks": 9, "nodes": 2, "ppn": 4}, "do not fit"),
        ({"ranks": 2, "bind": "socket"}, "valid: core, none"),
        ({"ranks": 2, "env": {"A=B": "1"}}, "bad environment variable"),
    ],
)
def test_spec_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        LaunchSpec(PROG, **kwargs)  # type: ignore[arg-type]


def test_registry_names_valid_choices() -> None:
    assert set(LAUNCHERS) == {"hydra", "mpirun", "srun"}
    assert isinstance(get_launcher("srun"), SrunLauncher)
    with pytest.raises(UsageError, match="valid: hydra, mpirun, srun"):
        get_launcher("aprun")


def _library(vendor: str, launcher: str) -> MPILibrary:
    prefix = Path("/x") / vendor
    return MPILibrary(vendor, "1.0", "v", "", prefix, prefix / "bin/mpicc", prefix / "bin" / launcher)


def test_launcher_for_vendor_or_srun() -> None:
    hydra = launcher_for(_library("mpich", "mpiexec"))
    assert isinstance(hydra, HydraLauncher) and hydra.executable == "/x/mpich/bin/mpiexec"
    ompi = launcher_for(_library("openmpi", "mpirun"), as_root=False, cores=2)
    assert ompi.argv(_spec(2)) == ["/x/openmpi/bin/mpirun", "-n", "2", *PROG]
    assert isinstance(launcher_for(_library("mpich", "mpiexec"), use_srun=True), SrunLauncher)
    with pytest.raises(UsageError, match="known: mpich, openmpi"):
        launcher_for(_library("intel", "mpiexec"))


# --- host lists --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("login", ["login"]),
        ("a[1-2],b3,c[9-10]", ["a1", "a2", "b3", "c9", "c10"]),
        ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
        ("gpu[098-101]-ib", ["gpu098-ib", "gpu099-ib", "gpu100-ib", "gpu101-ib"]),
        ("n1,n1,n2", ["n1", "n2"]),
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["node[01-", "node]1[", "node[a-b]", "node[5-2]"])
def test_expand_hostlist_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="bad host list"):
        expand_hostlist(text)


def test_expand_counts() -> None:
    assert expand_counts("36(x2),40") == [36, 36, 40]
    assert expand_counts("4") == [4]
    with pytest.raises(UsageError):
        expand_counts("4(y2)")


def test_allocation_from_slurm() -> None:
    env = {"SLURM_JOB_NODELIST": "cn[001-003]", "SLURM_TASKS_PER_NODE": "2(x2),1", "SLURM_JOB_CPUS_PER_NODE": "8(x3)"}
    alloc = NodeAllocation.from_slurm(env)
    assert alloc.hosts == ("cn001", "cn002", "cn003") and alloc.slots == (2, 2, 1) and alloc.total_slots == 5
    alloc = NodeAllocation.from_slurm({"SLURM_NODELIST": "x[1-2]", "SLURM_JOB_CPUS_PER_NODE": "8(x2)"})
    assert alloc.slots == (8, 8) and alloc.source == "slurm"
    assert NodeAllocation.from_environment(env) == NodeAllocation.from_slurm(env)
    assert NodeAllocation.from_environment({}) is None
    with pytest.raises(UsageError, match="SLURM_JOB_NODELIST"):
        NodeAllocation.from_slurm({})


def test_allocation_from_pbs_nodefile(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("b1\nb1\nb2\nb1\n\n")
    alloc = NodeAllocation.from_environment({"PBS_NODEFILE": str(nodefile)})
    assert alloc is not None and alloc.hosts == ("b1", "b2") and alloc.slots == (3, 1)


def test_allocation_from_hostfiles(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# comment\nh1 slots=4 max_slots=8\nh2:2\nh3\nh1 slots=2  # more\n")
    alloc = NodeAllocation.from_hostfile(hostfile)
    assert alloc.hosts == ("h1", "h2", "h3") and alloc.slots == (6, 2, 1)
    assert alloc.hostfile_text("hydra") == "h1:6\nh2:2\nh3:1\n"
    assert alloc.hostfile_text("mpirun") == "h1 slots=6\nh2 slots=2\nh3 slots=1\n"
    assert NodeAllocation.from_hostfile(tmp_path / "hosts").first(2).hosts == ("h1", "h2")
    hostfile.write_text("h1 cpus=4\n")
    with pytest.raises(UsageError, match="expected slots=N"):
        NodeAllocation.from_hostfile(hostfile)
    with pytest.raises(UsageError, match="cannot read host file"):
        NodeAllocation.from_hostfile(tmp_path / "missing")
    hostfile.write_text("# nothing but a comment\n")
    with pytest.raises(UsageError, match="empty node allocation"):
        NodeAllocation.from_hostfile(hostfile)


def test_local_allocation() -> None:
    assert NodeAllocation.local(3) == NodeAllocation(("localhost",), (3,), "local")
    assert NodeAllocation.local().total_slots >= 1


# --- topology groups ---------------------------------------------------------------------------------
def test_group_nodes_by_pattern_mapping_or_all(tmp_path: Path) -> None:
    hosts = ["r1n01", "r2n01", "r1n02", "login"]
    assert group_nodes(hosts, pattern=r"^(r\d+)") == {"r1": ("r1n01", "r1n02"), "r2": ("r2n01",), "login": ("login",)}
    groups_file = tmp_path / "groups"
    groups_file.write_text("r1n01 sw0\nr1n02, sw1\nr2n01:sw0  # same switch\n")
    mapping = read_group_file(groups_file)
    assert group_nodes(hosts, mapping=mapping) == {"sw0": ("r1n01", "r2n01"), "sw1": ("r1n02",), "login": ("login",)}
    assert group_nodes(hosts) == {"all": tuple(hosts)}
    with pytest.raises(UsageError, match="not both"):
        group_nodes(hosts, mapping=mapping, pattern="x")
    groups_file.write_text("lonely\n")
    with pytest.raises(UsageError, match="groups:1"):
        read_group_file(groups_file)


# --- a user's own command line: variables for the ranks ---------------------------------------------
RANK_ENV = {"LD_PRELOAD": "/c/tmpi.so", "TUNEMPI_MODE": "profile"}


def _user_library(vendor: str, prefix: str = "/nowhere") -> MPILibrary:
    launcher = "mpiexec" if vendor == "mpich" else "mpirun"
    return MPILibrary(vendor, "5.0", "", "", Path(prefix), Path(prefix) / "bin/mpicc",
                      Path(prefix) / "bin" / launcher)


def test_rank_env_on_a_hydra_command_line() -> None:
    command = rank_env_command(["/opt/mpich/bin/mpiexec", "-n", "4", "./app", "-genv"], RANK_ENV,
                               _user_library("mpich"))
    assert command.argv == ("/opt/mpich/bin/mpiexec", "-genv", "LD_PRELOAD", "/c/tmpi.so", "-genv", "TUNEMPI_MODE",
                            "profile", "-n", "4", "./app", "-genv")
    assert dict(command.env) == {}  # the launcher itself does not get the preload


def test_rank_env_on_an_open_mpi_command_line() -> None:
    command = rank_env_command(["mpirun", "--oversubscribe", "-n", "4", "./app"], RANK_ENV, _user_library("openmpi"))
    assert command.argv == ("mpirun", "-x", "LD_PRELOAD=/c/tmpi.so", "-x", "TUNEMPI_MODE=profile",
                            "--oversubscribe", "-n", "4", "./app")
    assert dict(command.env) == {}


def test_rank_env_specific_launcher_names_win_over_the_library() -> None:
    assert isinstance(launcher_for_argv(["mpiexec.hydra", "-n", "2", "a"], _user_library("openmpi")), HydraLauncher)
    assert isinstance(launcher_for_argv(["/usr/bin/mpirun.openmpi", "a"], _user_library("mpich")), OpenMPILauncher)
    assert isinstance(launcher_for_argv(["prterun", "a"]), OpenMPILauncher)
    assert launcher_for_argv(["./app", "mpiexec"]) is None


def test_rank_env_generic_name_decided_by_the_files_next_to_it(tmp_path: Path) -> None:
    for vendor, marker, expected in (("hydra", "hydra_pmi_proxy", HydraLauncher), ("ompi", "prterun", OpenMPILauncher)):
        bin_dir = tmp_path / vendor
        bin_dir.mkdir()
        for name in ("mpiexec", marker):
            (bin_dir / name).write_text("#!/bin/sh\n")
            (bin_dir / name).chmod(0o755)
        # the library says the other vendor: the launcher's own directory wins
        other = _user_library("openmpi" if expected is HydraLauncher else "mpich")
        assert isinstance(launcher_for_argv([str(bin_dir / "mpiexec"), "a"], other), expected)


def test_rank_env_generic_name_without_any_clue_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="Hydra or Open MPI"):
        launcher_for_argv(["/nonexistent/mpiexec", "-n", "2", "a"])
    assert isinstance(launcher_for_argv(["/nonexistent/mpiexec", "a"], _user_library("mpich")), HydraLauncher)


def test_rank_env_srun_uses_export_for_the_tasks_only() -> None:
    command = rank_env_command(["srun", "-n", "4", "./app"], RANK_ENV)
    assert command.argv == ("srun", "--export=ALL,LD_PRELOAD=/c/tmpi.so,TUNEMPI_MODE=profile", "-n", "4", "./app")
    assert dict(command.env) == {}
    command = rank_env_command(["srun", "-n", "4", "--export=HOME,PATH", "./app"], RANK_ENV)
    assert command.argv[3] == "--export=HOME,PATH,LD_PRELOAD=/c/tmpi.so,TUNEMPI_MODE=profile"
    command = rank_env_command(["srun", "--export", "NONE", "./app"], RANK_ENV)
    assert command.argv == ("srun", "--export=LD_PRELOAD=/c/tmpi.so,TUNEMPI_MODE=profile", "./app")
    with pytest.raises(UsageError, match="','"):
        rank_env_command(["srun", "./app"], {"X": "a,b"})


def test_rank_env_for_a_plain_program_goes_in_its_environment() -> None:
    command = rank_env_command(["./app", "1"], RANK_ENV)
    assert command.argv == ("./app", "1") and dict(command.env) == RANK_ENV


def test_a_bare_launcher_is_known_by_what_it_resolves_to_where_both_libraries_share_a_directory(
        tmp_path: Path) -> None:
    """Debian installs MPICH's Hydra (hydra_pmi_proxy, mpiexec.hydra) and Open MPI's orterun side by side in
    /usr/bin; `mpirun` is an alternatives link to either. The link's target decides, not the neighbours."""
    for name in ("hydra_pmi_proxy", "mpiexec.hydra", "orterun"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    (tmp_path / "mpirun").symlink_to(tmp_path / "orterun")
    (tmp_path / "mpiexec").symlink_to(tmp_path / "mpiexec.hydra")
    assert isinstance(launcher_for_argv([str(tmp_path / "mpirun")], _user_library("mpich")), OpenMPILauncher)
    assert isinstance(launcher_for_argv([str(tmp_path / "mpiexec")], _user_library("openmpi")), HydraLauncher)


# --- shared memory a killed job leaves ------------------------------------------------------------------
def test_a_launch_s_left_behind_mpi_shared_memory_goes_and_what_is_held_or_older_or_not_mpi_s_stays(
        tmp_path: Path) -> None:
    import time

    from tunempi.mpi.shared_memory import remove_left_behind

    since = time.time()
    for name in ("mpich_shm_1_0", "mpich_shm_2_0", "sm_segment.vm.0.1.0", "vader_segment.vm.0.1.0", "sem.other"):
        (tmp_path / name).write_bytes(b"x")
    held = {str(tmp_path / "mpich_shm_2_0")}
    removed = remove_left_behind(since, tmp_path, held=held)
    assert sorted(p.name for p in removed) == ["mpich_shm_1_0", "sm_segment.vm.0.1.0", "vader_segment.vm.0.1.0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mpich_shm_2_0", "sem.other"]
    (tmp_path / "mpich_shm_3_0").write_bytes(b"x")
    assert remove_left_behind(time.time() + 60, tmp_path, held=set()) == []  # made before the launch started


def test_held_paths_sees_a_file_this_process_holds_open(tmp_path: Path) -> None:
    from tunempi.mpi.shared_memory import held_paths

    path = tmp_path / "mpich_shm_9_0"
    with open(path, "wb"):
        assert str(path) in held_paths()
    assert str(path) not in held_paths()
