"""Starting MPI jobs: launchers that build argv lists (launchers.py), node allocations from batch
systems and hostfiles (hosts.py), process control with whole-job timeouts (process.py), and network
groups of nodes (topology.py). Knows launchers, not vendors' cvars."""

from __future__ import annotations

from tunempi.launch.hosts import NodeAllocation, expand_counts, expand_hostlist, local_cores
from tunempi.launch.launchers import (
    LAUNCHERS,
    HydraLauncher,
    LaunchCommand,
    Launcher,
    LaunchSpec,
    OpenMPILauncher,
    SrunLauncher,
    get_launcher,
    launcher_for,
    launcher_for_argv,
    own_launcher,
    rank_env_command,
    register_launcher,
)
from tunempi.launch.process import (
    InteractiveLaunch,
    LaunchError,
    LaunchResult,
    LaunchTimeout,
    run_in_foreground,
    run_launch,
    terminate_job,
)
from tunempi.launch.scheduler import SCHEDULING_MODES, BenchJob, GroupScheduler, Placement, plan_waves
from tunempi.launch.topology import group_nodes, read_group_file

__all__ = [
    "LAUNCHERS", "SCHEDULING_MODES", "BenchJob", "GroupScheduler", "Placement", "plan_waves", "HydraLauncher", "InteractiveLaunch", "LaunchCommand", "LaunchError", "LaunchResult",
    "LaunchSpec", "LaunchTimeout", "Launcher", "NodeAllocation", "OpenMPILauncher", "SrunLauncher",
    "expand_counts", "expand_hostlist", "get_launcher", "group_nodes", "launcher_for", "launcher_for_argv",
    "local_cores", "own_launcher", "rank_env_command",
    "read_group_file", "register_launcher", "run_in_foreground", "run_launch", "terminate_job",
]
