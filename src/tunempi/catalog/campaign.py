"""`catalog campaign`: the layouts `catalog coverage` names as worth tuning next, as Slurm batch jobs.

Each job asks Slurm for its layout (nodes x ppn) and runs, inside that allocation, `tunempi tune` of the layout
(one node: `--ranks`; several: `--nodes --ppn`, the hosts from Slurm), `tunempi verify` of the tuning it wrote and
`tunempi catalog add` of it, in that order, stopping at the first that fails (`set -e`). The jobs of one campaign
run at once and finish in any order: `catalog add` takes the catalog's lock (store.catalog_lock), so no job's
entries are lost. A `--dry-run` prints the scripts and submits nothing.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tunempi.catalog.coverage import JobLayout
from tunempi.catalog.store import Catalog, make_directory
from tunempi.errors import UsageError

#: Options the campaign sets itself per job (the layout, where the tuning goes): not in --tune-args/--verify-args.
TUNE_SET = ("--out", "--nodes", "--ppn", "--ranks", "--hostfile", "--plan", "--plan-from")
VERIFY_SET = ("--tuning", "--hostfile")
SCRIPT_NAME = "job.sh"


@dataclass(frozen=True)
class CampaignJob:
    """One layout's batch job: its directory (`WORK/NxP`: the script, Slurm's output, the tuning) and script."""

    layout: JobLayout
    directory: Path
    script: str

    @property
    def name(self) -> str:
        return f"{self.layout.nodes}x{self.layout.ppn}"

    @property
    def script_path(self) -> Path:
        return self.directory / SCRIPT_NAME


@dataclass(frozen=True)
class Submitted:
    job: CampaignJob
    job_id: str  # "": sbatch refused the script (returncode is sbatch's, message why)
    returncode: int | None  # the job's exit status where the campaign waited for it (sbatch --wait), else None
    message: str = ""  # what sbatch said on its standard error (why a submission or job failed)


def split_args(text: str, option: str, reserved: Sequence[str]) -> list[str]:
    """`text` as the shell would split it; UsageError for unbalanced quotes or an option the campaign sets."""
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{option} {text!r}: {exc}") from None
    taken = sorted({a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in reserved})
    if taken:
        raise UsageError(f"{option} gives {', '.join(taken)}, which the campaign sets for each layout")
    return args


def jobs_library(catalog: Catalog, mpi: str | None = None) -> str | None:
    """The `--mpi` every job's tune and verify take: `mpi` as given, else the catalog's build (its library's
    mpicc, found as `catalog coverage` finds it). Left to tune's default library, a catalog of another build
    (Debian's MPICH beside the embedded one) would refuse every job's `catalog add`. None for a catalog with
    no tuning yet: its first add sets its build."""
    from tunempi.catalog.build import catalog_library

    if mpi is not None or catalog.library is None:
        return mpi
    library, _ = catalog_library(catalog)
    return str(library.mpicc)


def layout_args(layout: JobLayout) -> list[str]:
    """tune's options for one layout: one node `--ranks P` (tune's sub-scales 2, 4, ... P there), else
    `--nodes N --ppn P` (the hosts from the job's Slurm allocation)."""
    if layout.nodes == 1:
        return ["--ranks", str(layout.ppn)]
    return ["--nodes", str(layout.nodes), "--ppn", str(layout.ppn)]


def batch_script(layout: JobLayout, *, work: Path, catalog: Path, tune_args: Sequence[str] = (),
                 verify_args: Sequence[str] = (), mpi: str | None = None, db: Path | None = None,
                 replace: bool = False, sbatch_options: Sequence[str] = (), python: str | None = None) -> CampaignJob:
    """The batch job of one layout (paths made absolute: the job runs wherever Slurm starts it)."""
    directory = (work / f"{layout.nodes}x{layout.ppn}").resolve()
    tuning = directory / "tuning"
    tunempi = [python or sys.executable, "-m", "tunempi"]
    library = ["--mpi", mpi] if mpi else []
    tune = [*tunempi, "tune", "--out", str(tuning), *layout_args(layout), *library,
            *(["--db", str(db.resolve())] if db is not None else []), *tune_args]
    verify = [*tunempi, "verify", "--tuning", str(tuning), *library, *verify_args]
    add = [*tunempi, "catalog", "add", str(tuning), "--catalog", str(catalog.resolve()),
           *(["--replace"] if replace else [])]
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name=tunempi-{layout.nodes}x{layout.ppn}",
             f"#SBATCH --nodes={layout.nodes}",
             f"#SBATCH --ntasks-per-node={layout.ppn}",
             f"#SBATCH --output={directory}/slurm-%j.out",
             *(f"#SBATCH {option}" for option in sbatch_options),
             f"# tunempi catalog campaign: {layout.ranks} ranks, {layout.node_hours:.2f} node-hours of the site's jobs",
             "set -euo pipefail",
             shlex.join(tune), shlex.join(verify), shlex.join(add)]
    return CampaignJob(layout, directory, "\n".join(lines) + "\n")


def submit(jobs: Sequence[CampaignJob], *, wait: bool = False, sbatch: str = "sbatch") -> list[Submitted]:
    """Write each job's script into its directory and submit it (`sbatch --parsable`), all at once. With `wait`,
    sbatch --wait returns when its job ends, with the job's exit status; the jobs still run side by side."""
    if shutil.which(sbatch) is None:
        raise UsageError(f"{sbatch} not found: a campaign submits Slurm batch jobs (--dry-run prints them)")
    for job in jobs:  # every script written before any is submitted: a WORK that cannot be written submits none
        make_directory(job.directory)
        try:
            job.script_path.write_text(job.script, encoding="utf-8")
            job.script_path.chmod(0o755)
        except OSError as exc:
            raise UsageError(f"cannot write {job.script_path}: {exc.strerror or exc}") from None
    started = []
    for job in jobs:
        argv = [sbatch, "--parsable", *(["--wait"] if wait else []), str(job.script_path)]
        started.append((job, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    submitted = []
    for job, process in started:  # every one waited for, so no sbatch --wait is left behind
        out, err = process.communicate()
        job_id = out.strip().split(";", 1)[0]
        submitted.append(Submitted(job, job_id, process.returncode if wait or not job_id else None, err.strip()))
    return submitted
