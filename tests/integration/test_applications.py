"""Real applications nobody here wrote, through the whole pipeline a user runs: profile -> advise -> tune
--from-profile -> compare (the application itself, default against the tuning, results checked).

LAMMPS, HPCC and Quantum ESPRESSO as Debian ships them (on Debian's Open MPI 4.1.4), and HPCC built from Debian's source
against the embedded MPICH; on one node x 2 ranks and on 2 emulated nodes x 1 (TCP between them). Short
inputs: each case runs in about a minute. bench/applications.py runs the real sizes."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import require_system

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from app_recipes import (  # noqa: E402 - bench/ is no package
    DEBIAN_OPENMPI,
    QE_RESULT,
    Layout,
    build_hpcc,
    hpcc,
    lammps,
    lammps_pppm,
    launcher_line,
    qe_silicon,
    run_pipeline,
    tunempi,
)

from tunempi.launch.cluster import EmulatedCluster  # noqa: E402
from tunempi.tune.manifest import Manifest  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

#: Tuning kept short: a test asserts the pipeline, not the best tuning.
QUICK_TUNE = ("--timeout", "40s", "--time-cap", "10ms", "--rel-ci", "0.2", "--max-msg", "64KiB", "--launches", "1")
QUICK_COMPARE = ("--min-runs", "10", "--max-runs", "10")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedCluster]:
    if os.geteuid() != 0:
        pytest.skip("emulated nodes need root (unshare --uts gives each node its own host name)")
    emulated = EmulatedCluster(tmp_path_factory.mktemp("app-cluster"))
    try:
        assert emulated.start(2, slots=2).state == "running"
        yield emulated
    finally:
        emulated.stop()


@pytest.fixture(scope="module")
def hpcc_mpich(tmp_path_factory: pytest.TempPathFactory) -> str:
    require_system("applications")
    from tunempi.mpi.discovery import resolve_library

    return str(build_hpcc(resolve_library("mpich").mpicc, tmp_path_factory.mktemp("hpcc") / "hpcc"))


def application(name: str, hpcc_mpich: str | None, ranks: int):
    require_system("applications")
    require_system("site-mpi")
    if name == "lammps":
        return lammps(cells=8, steps=100)
    if name == "hpcc-debian":
        return hpcc("hpcc", DEBIAN_OPENMPI, ranks)
    assert hpcc_mpich is not None
    return hpcc(hpcc_mpich, "mpich", ranks)


def check_pipeline(result, app, layout: Layout, workdir: Path) -> None:
    """What the pipeline must show whatever the machine: advice for the library the application ran with,
    a comparison of every run with unchanged results, and the verdict in the tuning's manifest."""
    from tunempi.mpi.discovery import resolve_library

    library = resolve_library(app.mpi)
    assert f"library: {library.name}" in result.advice
    assert "plan for this application" in result.advice
    doc = result.comparison
    (tuned,) = doc["variants"]
    assert tuned["results"] == "unchanged", tuned
    assert tuned["verdict"] in ("faster", "no difference", "slower"), tuned
    assert tuned["pairs"] == 10 and doc["default"]["runs"] == 10
    comparison = tuned["comparison"]
    assert comparison["low"] <= comparison["speedup"] <= comparison["high"]
    check = Manifest.load(workdir / "tuned").applications[-1]
    assert check.verdict == tuned["verdict"] and check.results == "unchanged"
    manifest = Manifest.load(workdir / "tuned")
    assert manifest.library.fingerprint == library.fingerprint
    assert manifest.scales and all(scale[1] == layout.nodes for scale in manifest.scales[-1:])


# One application per layout in `make test`; the others at that layout in `make test-all` (marker `full`):
# HPCC on Debian's Open MPI at one node, HPCC across the emulated nodes (the slowest, ~100 s).
@pytest.mark.parametrize("name", ["lammps", pytest.param("hpcc-debian", marks=pytest.mark.full),
                                  pytest.param("hpcc-mpich", marks=pytest.mark.full)])
def test_pipeline_on_one_node(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    hpcc_binary = request.getfixturevalue("hpcc_mpich") if name == "hpcc-mpich" else None
    layout = Layout(1, 2)
    app = application(name, hpcc_binary, layout.ranks)
    result = run_pipeline(app, layout, tmp_path, tune_args=QUICK_TUNE, compare_args=QUICK_COMPARE)
    check_pipeline(result, app, layout, tmp_path)


@pytest.mark.full  # LAMMPS and HPCC across nodes: make test-all (one node and the cluster tests stay in make test)
@pytest.mark.parametrize("name", ["lammps", "hpcc-mpich"])
def test_pipeline_on_two_emulated_nodes(name: str, tmp_path: Path, cluster: EmulatedCluster,
                                        request: pytest.FixtureRequest) -> None:
    hpcc_binary = request.getfixturevalue("hpcc_mpich") if name == "hpcc-mpich" else None
    layout = Layout(2, 1)
    app = application(name, hpcc_binary, layout.ranks)
    result = run_pipeline(app, layout, tmp_path, cluster_env=cluster.environment(), cluster_dir=cluster.dir,
                          tune_args=QUICK_TUNE, compare_args=QUICK_COMPARE)
    check_pipeline(result, app, layout, tmp_path)
    from tunempi.profile.reader import load_profile

    assert int(load_profile(tmp_path / "app.json").header["nodes"]) == 2  # the ranks really were on two nodes


@pytest.mark.full  # one profiled LAMMPS run (~20 s under load); the recipe's measurement: docs/measurements/applications.md
def test_lammps_pppm_spends_a_fifth_of_its_run_in_collectives(tmp_path: Path) -> None:
    """Issue 40 step 3: an input whose collectives are >= 20 % of the run at a layout this machine runs
    (2 ranks on one node): LAMMPS' PPPM with collective FFT remaps, nearly all of it alltoallv."""
    from tunempi.profile.reader import load_profile

    require_system("applications")
    require_system("site-mpi")
    app = lammps_pppm(cells=8, steps=20)
    app.prepare(tmp_path)
    line = launcher_line(app.mpi, app.program, Layout(1, 2), None)
    profiled = tunempi("profile", "--mpi", app.mpi, "-o", "app.json", "--", *line, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stdout[-2000:] + profiled.stderr[-2000:]
    profile = load_profile(tmp_path / "app.json")
    assert profile.collective_s / profile.wall_s >= 0.2
    assert profile.time_by_collective()[0][0] == "alltoallv"


#: Debian 12's Quantum ESPRESSO 6.7 on the recipe's 16 silicon atoms (its ld1.x pseudopotential, PBE, 40 Ry), in Ry.
QE_SILICON_ENERGY = -125.0361175


@pytest.mark.full  # one profiled pw.x run at 2 emulated nodes x 1 (7-11 s quiet, up to 60 s under load)
def test_quantum_espresso_spends_a_fifth_of_its_run_in_collectives_at_two_emulated_nodes(
        tmp_path: Path, cluster: EmulatedCluster) -> None:
    """Issue 40 step 3, the second application: Quantum ESPRESSO's plane-wave energy of 16 silicon atoms with two
    FFT task groups at 2 emulated nodes x 1 over TCP spends >= 20 % of the ranks' time in collectives (the charge
    density's 1.5 MB allreduce, the FFT transposes' alltoallv), and the energy `compare` checks is there and
    right under the profiler."""
    import re

    from app_recipes import network_env

    from tunempi.profile.reader import load_profile

    require_system("quantum-espresso")
    require_system("site-mpi")
    layout = Layout(2, 1)
    app = qe_silicon()
    app.prepare(tmp_path)
    line = launcher_line(app.mpi, app.program, layout, cluster.dir)
    profiled = tunempi("profile", "--mpi", app.mpi, "-o", "app.json", "--", *line, cwd=tmp_path,
                       env={**cluster.environment(), **network_env(app.mpi, layout)}, timeout=600)
    assert profiled.returncode == 0, profiled.stdout[-2000:] + profiled.stderr[-2000:]
    profile = load_profile(tmp_path / "app.json")
    assert int(profile.header["nodes"]) == 2
    assert profile.collective_s / profile.wall_s >= 0.2, profiled.stdout[-3000:]
    assert {"alltoallv", "allreduce"} <= {name for name, _, _ in profile.time_by_collective()[:3]}
    energies = [float(match.group(1)) for match in re.finditer(QE_RESULT, profiled.stdout, re.MULTILINE)]
    assert energies == pytest.approx([QE_SILICON_ENERGY], rel=1e-6)


@pytest.mark.full  # a whole autotune (profile, tune, online/search as planned, compare): 3-6 min here under load
def test_autotune_on_lammps_pppm_at_two_emulated_nodes(tmp_path: Path, cluster: EmulatedCluster) -> None:
    """Issue 40: `tunempi autotune` on LAMMPS (the PPPM input, short) at 2 emulated nodes x 1 finishes with its
    report; whatever it compared ran with unchanged results (docs/measurements/applications.md: the 20 min
    run of the full input)."""
    import json

    from app_recipes import LJ_RESULT, network_env

    require_system("applications")
    require_system("site-mpi")
    layout = Layout(2, 1)
    app = lammps_pppm(cells=6, steps=20)
    app.prepare(tmp_path)
    line = launcher_line(app.mpi, app.program, layout, cluster.dir)
    done = tunempi("autotune", "--budget", "3m", "--out", "auto", "--mpi", app.mpi, "--check", LJ_RESULT,
                   "--min-runs", "5", "--max-runs", "5", "--", *line, cwd=tmp_path,
                   env={**cluster.environment(), **network_env(app.mpi, layout)}, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "auto" / "report.html").is_file()
    steps = json.loads((tmp_path / "auto" / "autotune-state.json").read_text())["steps"]
    assert {"profile", "plan", "tune"} <= set(steps)  # PPPM's collectives: the plan always tunes them
    assert steps["profile"]["nodes"] == 2
    for variant in (steps.get("compare") or {}).get("outcome", {}).get("variants", []):
        assert variant["results"] == "unchanged", variant
