"""The layout a launch line asks for (`tunempi run` names it against what the tuning measured, issue 57)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.errors import UsageError
from tunempi.launch.layout import JobLayout, job_layout


def layout(*argv: str, env: dict[str, str] | None = None) -> JobLayout:
    return job_layout(list(argv), env=env or {})


def test_ranks_from_the_launch_line_on_this_machine() -> None:
    assert layout("mpiexec.hydra", "-n", "4", "./app") == JobLayout(4, 1, 4, "-n 4, this machine")
    assert layout("mpirun.openmpi", "--np=6", "./app").ranks == 6
    assert layout("mpiexec.hydra", "./app", "-n", "3").ranks is None  # the program's own option, not the launcher's
    assert layout("./app", "-n", "3") == JobLayout(source="not a launch line")


def test_nodes_from_a_hostfile_filled_by_slot(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("n1:2\nn2:2\nn3:2\n")
    assert layout("mpiexec.hydra", "-f", str(hosts), "-n", "4", "./app") == JobLayout(
        4, 2, 2, f"-n 4, hostfile {hosts}")
    assert layout("mpirun.openmpi", "--hostfile", str(hosts), "-np", "5", "./app").nodes == 3
    spread = layout("mpiexec.hydra", "-hosts", "a,b,c,d", "-np", "8", "-ppn", "2", "./app")
    assert (spread.ranks, spread.nodes, spread.ppn) == (8, 4, 2)


def test_a_batch_allocation_and_srun() -> None:
    slurm = {"SLURM_JOB_NODELIST": "n[1-4]", "SLURM_TASKS_PER_NODE": "2(x4)"}
    assert layout("mpiexec.hydra", "-n", "4", "./app", env=slurm).nodes == 2
    assert layout("srun", "-N", "3", "--ntasks=6", "./app", env=slurm) == JobLayout(6, 3, 2, "--ntasks 6, -N 3, "
                                                                                   "slurm allocation")


@pytest.mark.parametrize("bad", [["-n", "many"], ["-n", "0"], ["-n"]])
def test_bad_counts_are_refused(bad: list[str]) -> None:
    with pytest.raises(UsageError, match="-n"):
        layout("mpiexec.hydra", *bad, *(["./app"] if len(bad) > 1 else []))
