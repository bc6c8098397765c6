"""The site's finished jobs as layouts with node-hours, from Slurm's records.

`sacct` needs accounting storage (slurmdbd, or a site's `AccountingStorageType`); a cluster without it (the
emulated one: `accounting_storage/none`) still writes slurmctld's job completion log when slurm.conf sets
`JobCompType=jobcomp/filetxt` and `JobCompLoc` (the emulated cluster does): one `Key=value` line per finished
job. Both give nodes and the CPUs asked for, not tasks: ppn is CPUs per node, the job's processes per node where
it runs one rank per CPU (what `--ntasks-per-node` jobs do; not a hybrid job's `--cpus-per-task`).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from tunempi.catalog.coverage import JobLayout, combine
from tunempi.errors import UsageError

#: sacct's parsable output (-P: '|'-separated, -n: no header, -X: one line per allocation); ReqCPUS, not NCPUS,
#: which counts every CPU of exclusive nodes (see asked_cpus)
SACCT_ARGV = ("sacct", "-P", "-n", "-X", "--allusers", "--state=CD,F,TO,CA",
              "--format=JobID,NNodes,ReqCPUS,ElapsedRaw")


def _layout(nodes: int, cpus: int, seconds: float) -> JobLayout | None:
    if nodes < 1 or cpus < nodes:
        return None
    return JobLayout(nodes, cpus // nodes, nodes * seconds / 3600.0)


def parse_sacct(text: str) -> list[JobLayout]:
    """`JobID|NNodes|ReqCPUS|ElapsedRaw` lines -> layouts (rows it cannot read, e.g. a job never started, skipped)."""
    jobs = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4:
            continue
        try:
            job = _layout(int(fields[1]), int(fields[2]), float(fields[3]))
        except ValueError:
            continue
        if job is not None:
            jobs.append(job)
    return combine(jobs)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def asked_cpus(fields: dict[str, str]) -> int:
    """The CPUs a job asked for: Tres's cpu= (ProcCnt counts every CPU of exclusive nodes: a 2-node job of one
    task per node showed ProcCnt=4, Tres cpu=2 on 2-CPU nodes), else ProcCnt."""
    for item in fields.get("Tres", "").split(","):
        if item.startswith("cpu="):
            return int(item.removeprefix("cpu="))
    return int(fields["ProcCnt"])


def parse_jobcomp(text: str) -> list[JobLayout]:
    """slurmctld's jobcomp/filetxt lines (JobId=.. NodeCnt=.. ProcCnt=.. StartTime=.. EndTime=..) -> layouts."""
    jobs = []
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in shlex.split(line) if "=" in word)
        try:
            seconds = (_time(fields["EndTime"]) - _time(fields["StartTime"])).total_seconds()
            job = _layout(int(fields["NodeCnt"]), asked_cpus(fields), max(seconds, 0.0))
        except (KeyError, ValueError):
            continue
        if job is not None:
            jobs.append(job)
    return combine(jobs)


def read_sacct(argv: Sequence[str] = SACCT_ARGV, env: dict[str, str] | None = None) -> list[JobLayout]:
    """Run sacct; UsageError naming what it said where it cannot (no accounting storage: use --jobcomp)."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=120, check=False)
    except FileNotFoundError:
        raise UsageError("sacct is not installed here: give --jobs FILE.csv or --jobcomp FILE") from None
    if done.returncode != 0:
        raise UsageError(f"sacct failed ({done.stderr.strip() or done.returncode}); without accounting storage "
                         "give slurmctld's job completion log (JobCompType=jobcomp/filetxt) with --jobcomp FILE")
    return parse_sacct(done.stdout)


def read_jobcomp(path: Path) -> list[JobLayout]:
    try:
        return parse_jobcomp(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
