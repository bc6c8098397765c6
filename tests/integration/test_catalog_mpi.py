"""`tunempi catalog` end to end with the embedded MPICH (issue 57 part 3): two tunings of two layouts (2 and 4
ranks on one node, different winners) added through the real command, built into one tuning directory through
tune's writing and smoke-check path, and that directory read back by the real library: the 2-rank winner on every
2-rank communicator, the library's own choice at 4 ranks (its measured winner) and at 5 (no evidence). Which
algorithm ran is read from a user-defined reduction (test_tuning_bounds.traces), no timing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import emulated_cluster, require_system
from test_tuning_bounds import BYTES, COUNT, traces
from test_tuning_bounds import SOURCE as SPLIT_ALLREDUCE

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.space import Cell
from tunempi.store.results import utc_timestamp
from tunempi.tune.files import write_tuning_files
from tunempi.tune.job import files_fields
from tunempi.tune.manifest import LibraryRecord, Manifest, SelectionRow

pytestmark = pytest.mark.mpi

TUNEMPI = [sys.executable, "-m", "tunempi"]
SIZES = (4, 1024, BYTES, 65536)
#: a coverage table row: nodes, ppn, ranks, node-hours, basis
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+(.+)$")


def tiny_tuning(directory: Path, ranks: int, algorithm: str, vendor: str = "mpich", nodes: int = 1,
                collective: str = "allreduce", assumes: tuple[str, ...] = ()) -> Path:
    """A tuning directory as `tune` leaves one (the adapter's files through tune/files.py, a manifest with
    selection rows) for one layout (`nodes` x ranks/nodes) whose every size measured `algorithm` fastest for
    `collective` (`assumes`: the requirements the user vouched for, as tune's --assume-* flags)."""
    library = resolve_library(vendor)
    adapter = adapter_for(library).assuming(assumes)
    table = SelectionTable.from_items((collective, ranks, size, algorithm) for size in SIZES)
    rule_sets = build_rule_sets(table)
    written = write_tuning_files(directory, library, adapter, rule_sets, smoke=False)
    ppn = ranks // nodes
    Manifest(directory=directory, library=LibraryRecord.of(library), created=utc_timestamp(),
             collectives=(collective,), scales=((ranks, nodes, ppn),), sizes=SIZES, assumes=assumes,
             selection=tuple(SelectionRow(Cell(collective, ranks, nodes, ppn, size), algorithm, 1.0, 2.0)
                             for size in SIZES),
             **files_fields(written, rule_sets)).save()
    return directory


def tunempi(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TUNEMPI, *args], capture_output=True, text=True, env=env, check=False)


def test_catalog_add_build_and_the_library_reads_the_built_files_back(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    for ranks, algorithm in ((2, "recursive_doubling"), (4, DEFAULT_ALGORITHM)):
        done = tunempi("catalog", "add", str(tiny_tuning(tmp_path / f"t{ranks}", ranks, algorithm)),
                       "--catalog", str(catalog))
        assert done.returncode == 0, done.stderr
    # Measured again with another winner: refused, exit 2, the catalog as it was.
    before = (catalog / "catalog.json").read_bytes()
    other = tunempi("catalog", "add", str(tiny_tuning(tmp_path / "again", 2, "reduce_scatter_allgather")),
                    "--catalog", str(catalog))
    assert other.returncode == 2 and "another winner" in other.stderr and "Traceback" not in other.stderr
    assert (catalog / "catalog.json").read_bytes() == before

    out = tmp_path / "built"
    built = tunempi("catalog", "build", "--out", str(out), "--catalog", str(catalog))
    assert built.returncode == 0, built.stderr
    manifest = Manifest.load(out)
    assert [s.ok for s in manifest.smoke] == [True, True]  # loaded by MPICH at 2 and 4 ranks before it counted
    assert manifest.rule_sets["allreduce"].select(2, BYTES) == "recursive_doubling"
    assert manifest.rule_sets["allreduce"].select(4, BYTES) == DEFAULT_ALGORITHM
    provenance = manifest.strategy_params["provenance"]
    assert {(p["ranks"], p["source"]) for p in provenance} == {(2, str((tmp_path / "t2").resolve())),
                                                               (4, str((tmp_path / "t4").resolve()))}

    # `run` and `report` take it as a tuning directory.
    printed = tunempi("run", "--tuning", str(out), "--print-env")
    assert printed.returncode == 0, printed.stderr
    env = dict(line.removeprefix("export ").split("=", 1) for line in printed.stdout.splitlines())
    assert Path(env["MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"]).parent == out.resolve()
    report = tunempi("report", "--tuning", str(out))
    assert report.returncode == 0, report.stderr

    library = resolve_library("mpich")
    adapter = adapter_for(library)
    untuned = {**adapter.launch_env(), **adapter.single_node_env()}
    tuned = {**untuned, **manifest.activation_env()}
    for ranks, subsize in ((2, 1), (4, 2), (5, 2)):
        without, under = traces(library, untuned, ranks, subsize), traces(library, tuned, ranks, subsize)
        for (communicator, size), seen in under.items():
            where = f"{communicator} of {size} ranks in a {ranks}-rank job"
            if size == 2:  # the 2-rank layout's winner
                assert seen == COUNT != without[(communicator, size)], where
            else:  # 4 ranks measured the library's own choice; 1, 3, 5 no evidence: the library's own
                assert seen == without[(communicator, size)], where

    # `verify` and `compare` take it too, and record what they found in its manifest.
    verified = tunempi("verify", "--tuning", str(out), "--repeats", "2", "--time-cap", "20ms")
    assert verified.returncode == 0, verified.stderr
    program = build_c(library, [SPLIT_ALLREDUCE], "split_allreduce")
    compared = tunempi("compare", "--variant", f"catalog={out}", "--min-runs", "3", "--max-runs", "3",
                       "--db", str(tmp_path / "compare.sqlite"), "--", "mpiexec", "-n", "2", str(program),
                       str(BYTES), "1")
    assert compared.returncode == 0, compared.stderr
    checked = Manifest.load(out)
    assert checked.verify is not None and len(checked.applications) == 1


def test_catalog_add_of_a_real_tunes_results_store(tmp_path: Path) -> None:
    """A real MPICH tune (2 ranks, allreduce up to 64 B) into a results store, then `catalog add STORE`: an entry
    per measured cell at the tune's layouts, each override backed by the store's runs (faster than the default
    there), the store as provenance; built and smoke-checked in MPICH. The same store refused for another build
    (--mpi openmpi into an empty catalog; a catalog of another build), the catalog kept byte for byte."""
    from test_tune import options

    from tunempi.catalog.store import Catalog
    from tunempi.store.results import Measurement, ResultStore
    from tunempi.tune.job import run_tune

    report = run_tune(options(tmp_path, "mpich", "allreduce", 2, 64))
    assert report.manifest is not None
    db, catalog = tmp_path / "results.sqlite", tmp_path / "catalog"
    refused = tunempi("catalog", "add", str(db), "--mpi", "openmpi", "--catalog", str(catalog))
    assert refused.returncode == 2 and "another library build" in refused.stderr, refused.stderr
    assert not (catalog / "catalog.json").exists()

    done = tunempi("catalog", "add", str(db), "--catalog", str(catalog))
    assert done.returncode == 0, done.stderr
    entries = Catalog.load(catalog).entries
    assert {e.cell for e in entries} == {row.cell for row in report.manifest.selection}
    assert {e.source for e in entries} == {str(db.resolve())}
    for entry in entries:
        assert entry.default_us is not None and entry.median_us is not None
        assert entry.algorithm == DEFAULT_ALGORITHM or entry.median_us < entry.default_us, entry
    built = tunempi("catalog", "build", "--out", str(tmp_path / "built"), "--catalog", str(catalog))
    assert built.returncode == 0, built.stderr
    assert [s.ok for s in Manifest.load(tmp_path / "built").smoke] == [True]

    # A store of another build (its runs copied under another fingerprint) into this catalog: refused.
    other = tmp_path / "other.sqlite"
    with ResultStore(db) as store, ResultStore(other) as copy:
        copy.add_many(Measurement(**{**{f: getattr(m, f) for f in m.__dataclass_fields__},
                                     "library_fingerprint": "another-build"}) for m in store)
    before = (catalog / "catalog.json").read_bytes()
    refused = tunempi("catalog", "add", str(other), "--catalog", str(catalog))
    assert refused.returncode == 2 and "another library build" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and (catalog / "catalog.json").read_bytes() == before


@pytest.mark.full
def test_catalog_module_sets_what_run_prints_under_the_real_module_command(tmp_path: Path) -> None:
    require_system("modules")
    catalog, out = tmp_path / "catalog", tmp_path / "built"
    assert tunempi("catalog", "add", str(tiny_tuning(tmp_path / "t2", 2, "recursive_doubling")),
                   "--catalog", str(catalog)).returncode == 0
    assert tunempi("catalog", "build", "--out", str(out), "--catalog", str(catalog)).returncode == 0
    modulefile = tmp_path / "modules" / "tunempi" / "site"
    done = tunempi("catalog", "module", "--tuning", str(out), "--out", str(modulefile))
    assert done.returncode == 0, done.stderr
    printed = tunempi("run", "--tuning", str(out), "--print-env").stdout
    expected = dict(line.removeprefix("export ").split("=", 1) for line in printed.splitlines())
    init = "/usr/share/modules/init/bash"
    names = " ".join(sorted(expected))
    script = (f"source {init} && module use {modulefile.parents[1]} && module load tunempi/site && "
              f"for v in {names}; do echo \"$v=${{!v}}\"; done && module unload tunempi/site && "
              f"echo unloaded=${{{sorted(expected)[0]}:-}}")
    shown = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                           env={k: v for k, v in os.environ.items() if not k.startswith(("MODULE", "LOADEDMODULES"))})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert dict(line.split("=", 1) for line in lines[:-1]) == expected
    assert lines[-1] == "unloaded="
    assert json.loads((out / "manifest.json").read_text())["strategy"] == "catalog"


@pytest.mark.full
def test_catalog_module_never_sets_intel_mpis_strings_and_sets_mpichs_and_open_mpis_files(tmp_path: Path) -> None:
    """A module is loaded before a job's layout is known. Intel MPI's I_MPI_ADJUST_<COLL> act at every size (the
    nearest condition's preset), so `catalog module` leaves them to `tunempi run` (which sets them only for a job
    in the measured layouts): here nothing else is left to set, so it refuses in one line, exit 2, no file
    written (before: a module forcing the 2-rank preset on every job). MPICH's and Open MPI's files bound
    themselves (comm_size and ppn keys, comm size sections): their module sets what `run --print-env` prints."""
    env = {k: v for k, v in os.environ.items() if k != "TUNEMPI_MPI"}
    intel = tmp_path / "modules" / "impi"
    done = tunempi("catalog", "module", "--tuning", str(tiny_tuning(tmp_path / "impi", 2, "preset_8", vendor="impi")),
                   "--out", str(intel), env=env)
    said = " ".join(done.stderr.split())  # the console wraps its lines
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "I_MPI_ADJUST_ALLREDUCE" in said and "tunempi run --tuning" in said and "2 ranks on 1 node" in said, said
    assert not intel.exists()
    for vendor, algorithm in (("mpich", "recursive_doubling"), ("openmpi", "recursive_doubling")):
        directory = tiny_tuning(tmp_path / vendor, 2, algorithm, vendor=vendor)
        modulefile = tmp_path / "modules" / vendor
        done = tunempi("catalog", "module", "--tuning", str(directory), "--out", str(modulefile), env=env)
        assert done.returncode == 0, done.stderr
        printed = tunempi("run", "--tuning", str(directory), "--print-env", env=env)
        exported = {line.removeprefix("export ").split("=", 1)[0] for line in printed.stdout.splitlines()}
        set_by_module = {line.split()[1] for line in modulefile.read_text().splitlines() if line.startswith("setenv ")}
        assert set_by_module == exported and exported, (vendor, exported)


def test_catalog_coverage_classifies_jobs_by_the_files_catalog_build_writes(tmp_path: Path) -> None:
    """4 ranks measured as 1x4 and 4x1 with different winners (MPICH): the built files key that size on processes
    per node, so a 2x2 job is the library's default in `coverage` as in the files (before, coverage built its
    own rule sets without ppn levels: 'measured at another ppn'), 1x4 and 4x1 measured."""
    catalog, out = tmp_path / "catalog", tmp_path / "built"
    for nodes, algorithm in ((1, "recursive_doubling"), (4, "reduce_scatter_allgather")):
        done = tunempi("catalog", "add", str(tiny_tuning(tmp_path / f"t{nodes}", 4, algorithm, nodes=nodes)),
                       "--catalog", str(catalog))
        assert done.returncode == 0, done.stderr
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("nodes,ppn,node_hours\n1,4,10\n4,1,20\n2,2,30\n")
    shown = tunempi("catalog", "coverage", "--jobs", str(jobs), "--catalog", str(catalog))
    assert shown.returncode == 0, shown.stderr
    rows = {m.group(1, 2): m.group(4) for m in map(ROW.match, shown.stdout.splitlines()) if m}
    assert rows == {("1", "4"): "measured", ("4", "1"): "measured", ("2", "2"): "library default"}
    assert "worth tuning next: 2x2 (4 ranks" in shown.stdout
    built = tunempi("catalog", "build", "--out", str(out), "--catalog", str(catalog), "--no-smoke")
    assert built.returncode == 0, built.stderr
    rule_set = Manifest.load(out).rule_sets["allreduce"]
    assert [rule_set.select(4, BYTES, ppn) for ppn in (4, 1, 2)] == [
        "recursive_doubling", "reduce_scatter_allgather", DEFAULT_ALGORITHM]


def test_catalog_coverage_reads_the_private_slurms_records_of_finished_jobs(tmp_path: Path) -> None:
    """Three finished sbatch jobs of the emulated cluster's Slurm (no slurmdbd: `sacct` refuses, slurmctld's job
    completion log has them), weighted by node-hours against a catalog measured at 1x2: that layout measured,
    2x2 (4 ranks) the library's default, and named first to tune next."""
    require_system("slurm")
    catalog = tmp_path / "catalog"
    assert tunempi("catalog", "add", str(tiny_tuning(tmp_path / "t2", 2, "recursive_doubling")),
                   "--catalog", str(catalog)).returncode == 0
    for cluster in emulated_cluster(tmp_path / "cluster", nodes=2, slots=2, slurm=True):
        env = {**os.environ, **cluster.environment()}
        for spec in (["-N", "2", "--ntasks-per-node=2"], ["-N", "1", "--ntasks-per-node=2"]):
            done = subprocess.run(["sbatch", "--wait", *spec, "-o", str(tmp_path / "job-%j.out"), "--wrap",
                                   "sleep 1"], capture_output=True, text=True, env=env, check=False)
            assert done.returncode == 0, done.stderr
        refused = tunempi("catalog", "coverage", "--sacct", "--catalog", str(catalog), env=env)
        assert refused.returncode == 2 and "--jobcomp" in refused.stderr, refused.stderr
        shown = tunempi("catalog", "coverage", "--jobcomp", str(cluster.jobcomp_log), "--catalog", str(catalog))
    assert shown.returncode == 0, shown.stderr
    rows = {m.group(1, 2, 3): m.group(4) for m in map(ROW.match, shown.stdout.splitlines()) if m}
    assert rows == {("1", "2", "2"): "measured", ("2", "2", "4"): "library default"}
    assert "worth tuning next: 2x2 (4 ranks" in shown.stdout


def test_a_campaign_job_on_the_private_slurm_tunes_verifies_and_adds_its_layout(tmp_path: Path) -> None:
    """`catalog campaign` over a site whose jobs ran at 1x2, with an empty catalog: coverage names 1x2, one batch
    job on the emulated cluster's Slurm tunes it (MPICH, allreduce up to 64 B), verifies and adds it. Waited for
    by its end (sbatch --wait), then read: the catalog's entries are that tuning's, with verify's figures, and
    slurmctld recorded the job as completed."""
    from tunempi.catalog.store import Catalog

    require_system("slurm")
    catalog, work = tmp_path / "catalog", tmp_path / "work"
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("nodes,ppn,node_hours\n1,2,10\n")
    for cluster in emulated_cluster(tmp_path / "cluster", nodes=1, slots=2, slurm=True):
        env = {**os.environ, **cluster.environment()}
        done = tunempi("catalog", "campaign", "--jobs", str(jobs), "--catalog", str(catalog), "--work", str(work),
                       "--top", "1", "--mpi", "mpich", "--db", str(tmp_path / "results.sqlite"),
                       "--tune-args", "--collectives allreduce --max-msg 64 --time-cap 20ms --timeout 60s --launches 1",
                       "--verify-args", "--repeats 2 --time-cap 20ms", "--wait", env=env)
        records = cluster.jobcomp_log.read_text()
    outputs = "".join(p.read_text() for p in (work / "1x2").glob("slurm-*.out"))
    assert done.returncode == 0, done.stdout + done.stderr + outputs
    assert "1x2: job " in done.stdout and " done" in done.stdout
    assert "Name=tunempi-1x2" in records and "JobState=COMPLETED" in records
    tuned = Manifest.load(work / "1x2" / "tuning")
    assert tuned.verify is not None
    entries = Catalog.load(catalog).entries
    assert {(e.cell, e.algorithm) for e in entries} == {(row.cell, row.algorithm) for row in tuned.selection}
    assert {e.source for e in entries} == {str((work / "1x2" / "tuning").resolve())}
    # verify's held-out figure on each cell it held out (none where the tune kept the library's default everywhere)
    assert {e.cell for e in entries if e.held_out} == {v.cell for v in tuned.verify.held_out}


@pytest.mark.full
def test_real_tunes_of_two_layouts_build_into_one_tuning_with_each_layouts_rules(tmp_path: Path) -> None:
    """Two real `tune` runs (MPICH, 4 then 2 ranks, test_tune's short options), added and built: at each measured
    size the built rules are that tune's own, and each cell's provenance names its tuning. A tune at 4 ranks
    measures its sub-scale 2 as well: where the two tunes' winners at 2 ranks differ (noise decides between
    near-equal algorithms), the second add is refused until --replace."""
    from test_tune import options

    from tunempi.tune.job import run_tune

    catalog, out = tmp_path / "catalog", tmp_path / "built"
    tunings = {}
    for ranks in (4, 2):
        report = run_tune(options(tmp_path / f"r{ranks}", "mpich", "allreduce", ranks, 64))
        assert report.manifest is not None
        tunings[ranks] = report.manifest
        done = tunempi("catalog", "add", str(report.manifest.directory), "--catalog", str(catalog))
        if done.returncode == 2:
            assert ranks == 2 and "another winner" in done.stderr, done.stderr
            done = tunempi("catalog", "add", str(report.manifest.directory), "--catalog", str(catalog), "--replace")
        assert done.returncode == 0, done.stderr
    built = tunempi("catalog", "build", "--out", str(out), "--catalog", str(catalog))
    assert built.returncode == 0, built.stderr
    manifest = Manifest.load(out)
    for ranks, tuned in tunings.items():
        for row in tuned.selection:
            if row.cell.ranks == ranks:
                assert manifest.rule_sets["allreduce"].select(ranks, row.cell.msg_bytes) == row.algorithm
    sources = {(p["ranks"], p["source"]) for p in manifest.strategy_params["provenance"]}
    assert sources == {(ranks, str(tuned.directory.resolve())) for ranks, tuned in tunings.items()}
    assert [s.ok for s in manifest.smoke] == [True, True]
