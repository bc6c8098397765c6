"""The emulated cluster for real: named nodes with a hostfile, a private Slurm, every launcher path across
nodes (Hydra and mpirun with a hostfile, srun with pmi2/pmix, Hydra and mpirun inside salloc and sbatch),
Slurm's topology, and nothing left running afterwards, even when a run is killed midway.

A probe (c/node_probe.c) reports what the library itself sees: the number of MPI_COMM_TYPE_SHARED
communicators (nodes), each rank's node size and processor name, and a checked allreduce across nodes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import require_system

from tunempi.launch import LaunchSpec, launcher_for, run_launch
from tunempi.launch.cluster import EmulatedCluster
from tunempi.launch.topology import group_nodes, slurm_topology
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.tune.driver import DEFAULT_LAUNCHES
from tunempi.tune.launch_blocks import MOST_CONTENDERS
from tunempi.tune.machine_state import STATE_PAUSE_S, STATE_WAIT_S

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

HERE = Path(__file__).parent
PROBE_SOURCE = HERE / "c" / "node_probe.c"
LAUNCH_HELPER = HERE / "cluster_launch.py"


def _root_or_skip() -> None:
    if os.geteuid() != 0:
        pytest.skip("emulated nodes need root (unshare --uts gives each node its own host name)")


@pytest.fixture(scope="module")
def libraries() -> dict[str, MPILibrary]:
    return {vendor: resolve_library(vendor) for vendor in ("mpich", "openmpi", "impi")}


@pytest.fixture(scope="module")
def probes(libraries: dict[str, MPILibrary]) -> dict[str, Path]:
    return {vendor: build_c(lib, [PROBE_SOURCE], "node_probe", werror=True) for vendor, lib in libraries.items()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedCluster]:
    """4 nodes of 2 slots with a private Slurm; stopped (and checked empty) even when a test fails."""
    _root_or_skip()
    require_system("slurm")
    emulated = EmulatedCluster(tmp_path_factory.mktemp("cluster"))
    try:
        status = emulated.start(4, slots=2, slurm=True)
        assert status.state == "running", status
        yield emulated
    finally:
        emulated.stop()
        assert emulated.processes({}) == {}, "the cluster left processes behind"


def _env(cluster: EmulatedCluster) -> dict[str, str]:
    return {**os.environ, **cluster.environment()}


def _probe_report(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith('{"size"')]
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def _helper(cluster: EmulatedCluster, mpi: str, how: str, nodes: int, ppn: int, probe: Path,
            wrap: list[str] | None = None, env: dict[str, str] | None = None) -> tuple[dict, dict]:
    """Run the launch helper (tunempi's launcher on the allocation found in the environment), optionally
    under `wrap` (salloc ...); returns (the helper's launch record, the probe's report)."""
    argv = [*(wrap or []), sys.executable, str(LAUNCH_HELPER), mpi, how, str(nodes), str(ppn), str(probe)]
    done = subprocess.run(argv, env=env or _env(cluster), capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    return json.loads(next(line for line in lines if line.startswith('{"argv"'))), _probe_report(done.stdout)


def _expect_layout(report: dict, nodes: int, ppn: int, names: list[str] | None = None) -> None:
    assert report["size"] == nodes * ppn
    assert report["nodes"] == nodes, report
    assert report["node_sizes"] == [ppn] * (nodes * ppn), report
    assert report["sum_ok"] is True
    if names is not None:
        assert sorted(report["names"]) == sorted(n for n in names for _ in range(ppn)), report


# --- hostfile: Hydra and mpirun through the agent -----------------------------------------------------
@pytest.mark.parametrize(("mpi", "nodes", "ppn"), [("mpich", 2, 1), ("mpich", 2, 2), ("openmpi", 2, 2), ("impi", 2, 1),
                                                   ("impi", 2, 2)])
def test_hostfile_launch_across_nodes(cluster: EmulatedCluster, probes: dict[str, Path], mpi: str, nodes: int,
                                      ppn: int) -> None:
    env = {k: v for k, v in _env(cluster).items() if not k.startswith("SLURM_")}
    record, report = _helper(cluster, mpi, "own", nodes, ppn, probes[mpi], env=env)
    assert record["hosts"] == ["n1", "n2", "n3", "n4"] and record["emulated"] is True
    assert str(cluster.agent) in record["argv"]
    assert "core" not in record["argv"]  # emulated nodes share cores: nothing bound
    _expect_layout(report, nodes, ppn, names=[f"n{i}" for i in range(1, nodes + 1)])


def test_openmpi_selects_han_across_emulated_nodes(cluster: EmulatedCluster, libraries: dict[str, MPILibrary],
                                                   probes: dict[str, Path]) -> None:
    library = libraries["openmpi"]
    spec = LaunchSpec((str(probes["openmpi"]),), 4, nodes=2, ppn=2, allocation=cluster.allocation(),
                      env={**adapter_for(library).launch_env(), "OMPI_MCA_coll_base_verbose": "100"})
    command = launcher_for(library).command(spec)
    result = run_launch(command.argv, command.full_env(_env(cluster)), timeout=90)
    assert result.ok, result.reason
    assert "pick me" in (result.stdout + result.stderr) and "han" in (result.stdout + result.stderr)
    _expect_layout(_probe_report(result.stdout), 2, 2)


# --- Slurm: srun, and the library's own launcher inside salloc and sbatch -------------------------------
@pytest.mark.parametrize(("mpi", "ppn"), [("mpich", 1), ("openmpi", 2)])
def test_srun_inside_an_allocation(cluster: EmulatedCluster, probes: dict[str, Path], mpi: str, ppn: int) -> None:
    record, report = _helper(cluster, mpi, "srun", 2, ppn, probes[mpi],
                             wrap=["salloc", "-N", "2", f"--ntasks-per-node={ppn}"])
    assert record["argv"][0] == "srun" and ("--mpi=pmi2" if mpi == "mpich" else "--mpi=pmix") in record["argv"]
    assert record["slots"] == [ppn, ppn]  # read from SLURM_TASKS_PER_NODE
    _expect_layout(report, 2, ppn)
    assert len(set(report["names"])) == 2


@pytest.mark.parametrize(("mpi", "ppn"), [("mpich", 1), ("openmpi", 2), ("impi", 1)])
def test_own_launcher_inside_salloc(cluster: EmulatedCluster, probes: dict[str, Path], mpi: str, ppn: int) -> None:
    record, report = _helper(cluster, mpi, "own", 2, ppn, probes[mpi],
                             wrap=["salloc", "-N", "2", f"--ntasks-per-node={ppn}"])
    assert len(record["hosts"]) == 2 and record["hosts"][0].startswith("n")
    _expect_layout(report, 2, ppn, names=record["hosts"])


@pytest.mark.parametrize("mpi", ["mpich", "openmpi", "impi"])
def test_own_launcher_inside_sbatch(cluster: EmulatedCluster, probes: dict[str, Path], tmp_path: Path,
                                    mpi: str) -> None:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {LAUNCH_HELPER} {mpi} own 2 1 {probes[mpi]}\n")
    output = tmp_path / "job.out"
    done = subprocess.run(["sbatch", "--wait", "-N", "2", "--ntasks-per-node=1", "-o", str(output), str(script)],
                          env=_env(cluster), capture_output=True, text=True, timeout=150, check=False)
    text = output.read_text() if output.exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + text
    _expect_layout(_probe_report(text), 2, 1)


def test_network_groups_from_slurm_topology(cluster: EmulatedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(cluster.slurm_conf))
    groups = group_nodes(["n1", "n2", "n3", "n4"], mapping=slurm_topology())
    assert groups == {"s1": ("n1", "n2"), "s2": ("n3", "n4")}
    # Slurm places a job asking for one switch inside one group.
    done = subprocess.run(["srun", "-N", "2", "--switches=1", "printenv", "SLURM_TOPOLOGY_ADDR"],
                          env=_env(cluster), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    switches = {line.split(".")[-2] for line in done.stdout.split()}
    assert len(switches) == 1, done.stdout


def test_concurrent_sbatch_jobs_get_disjoint_nodes(cluster: EmulatedCluster, tmp_path: Path) -> None:
    """Three 2-node jobs on 4 nodes: two at once on disjoint nodes, the third after one of them."""
    ids = []
    for i in range(3):
        done = subprocess.run(["sbatch", "--parsable", "-N", "2", "-o", str(tmp_path / f"{i}.out"), "--wrap",
                               "echo $SLURM_JOB_NODELIST $(date +%s.%N); sleep 2; date +%s.%N"],
                              env=_env(cluster), capture_output=True, text=True, timeout=30, check=True)
        ids.append(done.stdout.strip())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
            len((tmp_path / f"{i}.out").read_text().split()) == 3 if (tmp_path / f"{i}.out").exists() else False
            for i in range(3)):
        time.sleep(0.3)
    runs = []
    for i in range(3):
        nodelist, start, end = (tmp_path / f"{i}.out").read_text().split()
        runs.append((nodelist, float(start), float(end)))
    for a in range(3):
        for b in range(a + 1, 3):
            overlap = runs[a][1] < runs[b][2] and runs[b][1] < runs[a][2]
            if overlap:
                assert runs[a][0] != runs[b][0], runs
    assert sum(runs[a][1] < runs[b][2] and runs[b][1] < runs[a][2] for a in range(3) for b in range(a + 1, 3)) >= 1


# --- nothing left behind -------------------------------------------------------------------------------
def test_killed_start_and_killed_job_leave_nothing(tmp_path: Path) -> None:
    """SIGKILL `tunempi cluster start` midway: the next status says stale, stop cleans it; a job step
    running when the cluster stops is ended with it."""
    _root_or_skip()
    require_system("slurm")
    emulated = EmulatedCluster(tmp_path / "killed")
    env = {**os.environ, "TUNEMPI_CLUSTER_DIR": str(emulated.dir)}
    try:
        # Kill the start once its daemons run and before it has written its state: on a busy machine this
        # test's polling can wake only after the start finished, and then that try is stopped and repeated.
        for _ in range(5):
            starter = subprocess.Popen([sys.executable, "-m", "tunempi", "cluster", "start", "--nodes", "2",
                                        "--slurm"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(emulated.processes({})) < 2 \
                    and not emulated.state_file.exists():
                time.sleep(0.05)
            starter.send_signal(signal.SIGKILL)
            starter.wait(10)
            if not emulated.state_file.exists():
                break
            emulated.stop()  # the start finished before the signal: nothing was killed midway
        assert not emulated.state_file.exists(), "every start finished before it could be killed"
        assert emulated.processes({}), "the daemons were never seen"
        assert emulated.status().state == "stale"
        emulated.stop()
        assert emulated.processes({}) == {} and emulated.status().state == "stopped"

        emulated.start(2, slots=1, slurm=True)
        job = subprocess.Popen(["srun", "-N", "2", "sleep", "300"], env={**os.environ, **emulated.environment()},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(emulated.processes({})) < 3 + 2:  # daemons + steps
            time.sleep(0.1)
        assert emulated.stop() >= 5
        job.wait(30)
        assert emulated.processes({}) == {}
    finally:
        if starter.poll() is None:
            starter.kill()
        emulated.stop()
    assert emulated.processes({}) == {}


# --- the topology-aware scheduler running real jobs at the same time --------------------------------
SCHEDULE_HELPER = HERE / "cluster_schedule.py"


@pytest.mark.parametrize("where", ["hostfile", "slurm"])
def test_scheduler_runs_jobs_at_once_on_disjoint_nodes(cluster: EmulatedCluster, where: str) -> None:
    """Layouts 2x1, 2x2 and 1x2 on 4 nodes in two network groups: two jobs at once, never on one node;
    under Slurm (groups from scontrol show topology) each job's launches are job steps on its nodes."""
    if where == "slurm":
        argv, env = ["salloc", "-N", "4", sys.executable, str(SCHEDULE_HELPER), "mpich", "topology", "slurm"], None
    else:
        argv = [sys.executable, str(SCHEDULE_HELPER), "mpich", "topology", "pairs"]
        env = {k: v for k, v in _env(cluster).items() if not k.startswith("SLURM_")}
    done = subprocess.run(argv, env=env or _env(cluster), capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"wall_s"')))
    assert report["ok"] == report["points"] == 18, report["failures"]
    jobs = report["jobs"]
    assert len(jobs) == 3 and report["most_at_once"] == 2
    for a, first in enumerate(jobs):
        for second in jobs[a + 1:]:
            if first["start"] < second["end"] and second["start"] < first["end"]:
                assert not set(first["hosts"]) & set(second["hosts"]), jobs
    by_layout = {tuple(j["layout"]): j["hosts"] for j in jobs}
    assert len(by_layout[(2, 2, 1)]) == 2 and len(by_layout[(4, 2, 2)]) == 2 and len(by_layout[(2, 1, None)]) == 1


# --- tune, verify and run across emulated nodes ------------------------------------------------------
def _tunempi(*args: str, env: dict[str, str], wrap: tuple[str, ...] = (), timeout: float = 240) \
        -> subprocess.CompletedProcess[str]:
    return subprocess.run([*wrap, sys.executable, "-m", "tunempi", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_tune_verify_run_mpich_2x1_inside_salloc(cluster: EmulatedCluster, probes: dict[str, Path],
                                                 tmp_path: Path) -> None:
    env = {**_env(cluster), "TUNEMPI_DB": str(tmp_path / "results.sqlite")}
    salloc = ("salloc", "-N", "2", "-n", "2")
    out = tmp_path / "tuned"
    done = _tunempi("tune", "--mpi", "mpich", "--nodes", "2", "--ppn", "1", "--collectives", "bcast",
                    "--max-msg", "512", "--time-cap", "20ms", "--timeout", "90s", "--out", str(out), env=env,
                    wrap=salloc)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    # Launches per layout, not per point: the exploring launch of each layout, then in each deciding block a
    # launch without a file and one per contender rank (tune/file_launches.py). A busy machine may add blocks
    # (tune/machine_state.py), so the bound is per block made, not per block planned.
    layouts, blocks = len(manifest["scales"]), manifest["run"]["deciding_blocks"]
    most_state_blocks = math.ceil(STATE_WAIT_S / STATE_PAUSE_S)  # each after a pause, within the wait
    assert [2, 2, 1] in manifest["scales"] and blocks <= DEFAULT_LAUNCHES - 1 + most_state_blocks
    assert manifest["run"]["launches"] <= layouts * (1 + blocks * (1 + MOST_CONTENDERS))
    assert manifest["run"]["measured"] >= len(manifest["selection"])
    done = _tunempi("verify", "--tuning", str(out), "--repeats", "2", "--time-cap", "20ms", env=env, wrap=salloc)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified" in done.stdout
    # The tuned files loaded by the library at the 2-node layout (MPI_Init reads them; a bad file fails it).
    done = _tunempi("run", "--tuning", str(out), "--", sys.executable, str(LAUNCH_HELPER), "mpich", "own", "2", "1",
                    str(probes["mpich"]), env=env, wrap=salloc)
    assert done.returncode == 0, done.stdout + done.stderr
    _expect_layout(_probe_report(done.stdout), 2, 1)


# Inside an allocation in `make test-all` only (marker `full`): mpirun through Slurm is checked on its own by
# test_own_launcher_inside_salloc and test_srun_inside_an_allocation.
@pytest.mark.parametrize("where", ["hostfile", pytest.param("salloc", marks=pytest.mark.full)])
def test_tune_verify_openmpi_2x2(cluster: EmulatedCluster, tmp_path: Path, where: str) -> None:
    """Open MPI across 2 emulated nodes x 2 ranks: with the cluster's hostfile, and inside a Slurm allocation
    (the nodes come from SLURM_JOB_NODELIST, mpirun launches through Slurm)."""
    if where == "salloc":
        env, wrap = _env(cluster), ("salloc", "-N", "2", "-n", "4")
    else:
        env, wrap = {k: v for k, v in _env(cluster).items() if not k.startswith("SLURM_")}, ()
    env["TUNEMPI_DB"] = str(tmp_path / "results.sqlite")
    out = tmp_path / "tuned"
    # 4 ranks on this 2-core machine (3 scales: 1x2, 2x1, 2x2): few sizes, or the timeout comes first.
    done = _tunempi("tune", "--mpi", "openmpi", "--nodes", "2", "--ppn", "2", "--collectives", "bcast",
                    "--max-msg", "8", "--time-cap", "20ms", "--timeout", "120s", "--launches", "1", "--out", str(out),
                    env=env, wrap=wrap)  # the deciding launches across nodes: the 2x1 test above
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [4, 2, 2] in manifest["scales"]
    assert any(row["nodes"] == 2 and row["ppn"] == 2 for row in manifest["selection"])
    done = _tunempi("verify", "--tuning", str(out), "--repeats", "2", "--time-cap", "20ms", env=env, wrap=wrap)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified" in done.stdout


@pytest.mark.full  # Intel MPI's tune + verify + run: test_tune.py on one node; across nodes in make test-all
def test_tune_verify_run_intel_mpi_2x1_with_a_hostfile(cluster: EmulatedCluster, probes: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """Intel MPI's Hydra across 2 emulated nodes (through the cluster's agent, libfabric's tcp provider), the
    hosts given as `--hostfile` to tune and verify rather than found in TUNEMPI_HOSTFILE."""
    env = {k: v for k, v in _env(cluster).items() if not k.startswith("SLURM_") and k != "TUNEMPI_HOSTFILE"}
    env["TUNEMPI_DB"] = str(tmp_path / "results.sqlite")
    out = tmp_path / "tuned"
    hostfile = str(cluster.hostfile)
    done = _tunempi("tune", "--mpi", "impi", "--nodes", "2", "--ppn", "1", "--hostfile", hostfile, "--collectives",
                    "bcast", "--max-msg", "8", "--time-cap", "20ms", "--timeout", "90s", "--out", str(out), env=env)
    assert done.returncode == 0, done.stdout + done.stderr  # (every preset costs a launch: two sizes are enough)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [2, 2, 1] in manifest["scales"]
    done = _tunempi("verify", "--tuning", str(out), "--hostfile", hostfile, "--repeats", "2", "--time-cap", "20ms",
                    env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified" in done.stdout
    env["TUNEMPI_HOSTFILE"] = hostfile  # the launch helper finds its hosts there
    done = _tunempi("run", "--tuning", str(out), "--", sys.executable, str(LAUNCH_HELPER), "impi", "own", "2", "1",
                    str(probes["impi"]), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Incorrect" not in done.stdout + done.stderr
    _expect_layout(_probe_report(done.stdout), 2, 1)


def test_a_tune_that_measures_nothing_fails_and_writes_nothing(cluster: EmulatedCluster, tmp_path: Path) -> None:
    """Every engine launch fails (an agent that cannot start anything): exit 1, a message, no tuning file."""
    env = {k: v for k, v in _env(cluster).items() if not k.startswith("SLURM_")}
    env.update(TUNEMPI_DB=str(tmp_path / "results.sqlite"), TUNEMPI_LAUNCH_AGENT="/bin/false")
    out = tmp_path / "tuned"
    done = _tunempi("tune", "--mpi", "mpich", "--nodes", "2", "--ppn", "1", "--collectives", "bcast",
                    "--max-msg", "64", "--timeout", "60s", "--out", str(out), env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "measured too little" in done.stdout + done.stderr
    # no tuning file: only the failed runs' reasons, one line per run, where the closing line points
    assert sorted(p.name for p in out.glob("*")) == ["tune-failures.log"]
    reasons = (out / "tune-failures.log").read_text().splitlines()
    assert len(reasons) == 18 and all("failed" in line for line in reasons), reasons
    assert "tune-failures.log" in done.stdout + done.stderr
