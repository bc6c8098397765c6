"""Launch a program the way tunempi does, on the allocation this process finds in its environment
(Slurm's SLURM_JOB_NODELIST/SLURM_TASKS_PER_NODE, or TUNEMPI_HOSTFILE + TUNEMPI_LAUNCH_AGENT), and print
what the program printed plus the launch argv. Run inside salloc, an sbatch script, or with a hostfile.

usage: cluster_launch.py MPI(mpich|openmpi) LAUNCHER(own|srun) NODES PPN PROGRAM
"""

from __future__ import annotations

import json
import sys

from tunempi.launch import LaunchSpec, NodeAllocation, SrunLauncher, launcher_for, run_launch
from tunempi.mpi.discovery import adapter_for, resolve_library


def main() -> int:
    mpi, how, nodes, ppn, program = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    library = resolve_library(mpi)
    allocation = NodeAllocation.from_environment()
    if allocation is None:
        print("no allocation in the environment", file=sys.stderr)
        return 2
    if how == "srun":
        launcher = SrunLauncher(mpi="pmi2" if library.vendor == "mpich" else "pmix")
    else:
        launcher = launcher_for(library)
    spec = LaunchSpec((program,), nodes * ppn, nodes=nodes, ppn=ppn, allocation=allocation,
                      env=adapter_for(library).launch_env(), bind="core")
    command = launcher.command(spec)
    result = run_launch(command.argv, command.full_env(), timeout=90)
    print(json.dumps({"argv": list(command.argv), "hosts": list(allocation.hosts), "slots": list(allocation.slots),
                      "emulated": allocation.emulated, "status": result.status, "reason": result.reason}))
    sys.stdout.write(result.stdout)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
