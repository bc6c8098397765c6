"""`tunempi catalog campaign` (issue 57 part 3): the layouts coverage names as worth tuning next, as Slurm batch
scripts that tune, verify and add to the catalog; the dry run; submission (a stand-in `sbatch` here: the real one
runs on the private Slurm in tests/integration/test_catalog_mpi.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_catalog import catalog_cli, stub_library, tuning

from tunempi.catalog.campaign import TUNE_SET, batch_script, split_args, submit
from tunempi.catalog.coverage import JobLayout
from tunempi.catalog.store import add_tuning
from tunempi.errors import UsageError


def commands(script: str) -> list[list[str]]:
    return [shlex.split(line) for line in script.splitlines() if line and not line.startswith(("#", "set "))]


def test_each_layout_is_a_batch_job_that_tunes_verifies_and_adds_in_its_allocation(tmp_path: Path) -> None:
    work, catalog = tmp_path / "work", tmp_path / "my catalog"
    job = batch_script(JobLayout(2, 4, 30.0), work=work, catalog=catalog, mpi="mpich",
                       tune_args=["--collectives", "allreduce", "--max-msg", "64"], verify_args=["--repeats", "2"],
                       db=tmp_path / "results.sqlite", replace=True, sbatch_options=["--time=1:00:00"],
                       python="/opt/py")
    lines = job.script.splitlines()
    assert lines[0] == "#!/bin/bash" and "set -euo pipefail" in lines
    directory = (work / "2x4").resolve()
    assert job.directory == directory and job.script_path == directory / "job.sh"
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=tunempi-2x4", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4",
        f"#SBATCH --output={directory}/slurm-%j.out", "#SBATCH --time=1:00:00"]
    tuning_dir = str(directory / "tuning")
    assert commands(job.script) == [
        ["/opt/py", "-m", "tunempi", "tune", "--out", tuning_dir, "--nodes", "2", "--ppn", "4", "--mpi", "mpich",
         "--db", str((tmp_path / "results.sqlite").resolve()), "--collectives", "allreduce", "--max-msg", "64"],
        ["/opt/py", "-m", "tunempi", "verify", "--tuning", tuning_dir, "--mpi", "mpich", "--repeats", "2"],
        ["/opt/py", "-m", "tunempi", "catalog", "add", tuning_dir, "--catalog", str(catalog.resolve()),
         "--replace"]]
    # One node: tune's one-node form (its sub-scales 2, 4, ... up to the ppn on that node).
    one = batch_script(JobLayout(1, 8, 1.0), work=work, catalog=catalog)
    assert commands(one.script)[0][3:8] == ["tune", "--out", str((work / "1x8" / "tuning").resolve()), "--ranks", "8"]
    assert subprocess.run(["bash", "-n"], input=job.script, text=True, check=False).returncode == 0


def test_options_the_campaign_sets_itself_or_broken_quoting_are_refused() -> None:
    assert split_args("--collectives 'allreduce,bcast' --timeout=5m", "--tune-args", TUNE_SET) == [
        "--collectives", "allreduce,bcast", "--timeout=5m"]
    with pytest.raises(UsageError, match="--nodes, --out, which the campaign sets"):
        split_args("--out x --nodes=2", "--tune-args", TUNE_SET)
    with pytest.raises(UsageError, match="--tune-args .*quotation"):
        split_args("--collectives 'allreduce", "--tune-args", TUNE_SET)


def tunempi(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunempi", *args], capture_output=True, text=True, check=False,
                          env=env)


def test_dry_run_prints_the_scripts_of_the_layouts_worth_tuning_next_and_submits_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub_library(monkeypatch)  # coverage asks the catalog's library what its files hold
    catalog, work = tmp_path / "catalog", tmp_path / "work"
    add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"}))  # 1x2 measured: not worth tuning again
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("nodes,ppn,node_hours\n1,2,100\n2,2,30\n4,8,50\n1,16,1\n")
    output = catalog_cli("campaign", "--jobs", str(jobs), "--catalog", str(catalog), "--work", str(work),
                         "--top", "2", "--tune-args", "--collectives allreduce --launches 2", "--dry-run")
    shown = [line for line in output.splitlines() if line.startswith("#SBATCH --nodes=")
             or line.startswith("#SBATCH --ntasks-per-node=")]
    assert shown == ["#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=8", "#SBATCH --nodes=2",
                     "#SBATCH --ntasks-per-node=2"]  # most node-hours first
    assert "--launches 2" in output and f"--catalog {catalog.resolve()}" in output
    assert not work.exists()


def test_tune_or_verify_options_their_command_would_refuse_exit_2_before_anything_is_written(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("nodes,ppn,node_hours\n1,2,1\n")
    for option, text, expected in (("--tune-args", "--launches two", "`tunempi tune` would refuse it"),
                                   ("--verify-args", "--repetas 2", "`tunempi verify` would refuse it"),
                                   ("--tune-args", "--ranks 4", "which the campaign sets")):
        done = tunempi("catalog", "campaign", "--jobs", str(jobs), "--catalog", str(tmp_path / "c"), "--work",
                       str(tmp_path / "work"), option, text, "--dry-run")
        assert done.returncode == 2 and expected in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "work").exists()


def test_submit_writes_each_script_and_hands_it_to_sbatch_all_at_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in sbatch (the real one: the integration test): it logs its arguments, answers `id;cluster` and,
    with --wait, the job's exit status: 1x2's job fails; 2x2's script is refused outright."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "sbatch.log"
    (bin_dir / "sbatch").write_text(f"""#!/bin/bash
echo "$@" >> {log}
case "${{@: -1}}" in
  */2x2/job.sh) echo "sbatch: error: Batch job submission failed: Invalid node count" >&2; exit 1;;
  */1x2/job.sh) echo "41;site"; exit 3;;
  *) echo "42;site"; exit 0;;
esac
""")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "work"
    jobs = [batch_script(JobLayout(n, p, 1.0), work=work, catalog=tmp_path / "c") for n, p in ((1, 2), (2, 2), (4, 1))]
    done = {s.job.name: s for s in submit(jobs, wait=True)}
    assert {name: (s.job_id, s.returncode) for name, s in done.items()} == {
        "1x2": ("41", 3), "2x2": ("", 1), "4x1": ("42", 0)}
    assert "Invalid node count" in done["2x2"].message
    for job in jobs:
        assert job.script_path.read_text() == job.script and os.access(job.script_path, os.X_OK)
    assert sorted(log.read_text().splitlines()) == sorted(f"--parsable --wait {job.script_path}" for job in jobs)
    # Without wait: the job ids, no exit status (the jobs run on); no sbatch at all: a usage error.
    assert [s.returncode for s in submit(jobs[2:])] == [None]
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match="sbatch not found"):
        submit(jobs)


def test_a_work_directory_that_cannot_be_written_submits_nothing(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """WORK below a file: one line, exit 2, and no sbatch run (before: a traceback, after earlier layouts' jobs
    had been submitted)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "sbatch.log"
    (bin_dir / "sbatch").write_text(f"#!/bin/bash\necho \"$@\" >> {log}\necho 42\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "file").write_text("")
    jobs = [batch_script(JobLayout(n, p, 1.0), work=tmp_path / "file" / "w", catalog=tmp_path / "c")
            for n, p in ((1, 2), (2, 2))]
    with pytest.raises(UsageError, match=r"cannot create .*/file/w/1x2: .*/file is a file, not a directory"):
        submit(jobs)
    assert not log.exists()


def test_every_job_tunes_the_catalogs_build_unless_mpi_names_one(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --mpi the scripts name the catalog's build (its library's mpicc, as coverage resolves it), not tune's
    default library: a catalog of another build (Debian's MPICH) would refuse every job's `catalog add` (before:
    no --mpi in the scripts). A --mpi given is passed as it is (it must be that build: coverage checks)."""
    stub_library(monkeypatch)  # the catalog's build: a library whose mpicc is /nonexistent/bin/mpicc
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"}))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("nodes,ppn,node_hours\n2,2,30\n1,4,5\n")
    for given, expected in (((), "/nonexistent/bin/mpicc"), (("--mpi", "/usr/bin/mpicc.x"), "/usr/bin/mpicc.x")):
        output = catalog_cli("campaign", "--jobs", str(jobs), "--catalog", str(catalog), "--work",
                             str(tmp_path / "work"), *given, "--dry-run")
        ran = [command for command in commands(output) if command[2:3] == ["tunempi"]]
        assert [command[3] for command in ran] == ["tune", "verify", "catalog"] * 2, output
        for command in ran[:2] + ran[3:5]:  # tune and verify of both jobs; catalog add takes the tuning's build
            assert command[command.index("--mpi") + 1] == expected, command
