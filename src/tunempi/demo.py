"""`make demo`: tune, verify and report on this machine, with both embedded libraries, in a few minutes.

MPICH and Open MPI at 2 ranks, allreduce, bcast, allgather and alltoall up to TUNEMPI_DEMO_MAX_MSG (256KiB),
each library's tuning capped at TUNEMPI_DEMO_TIMEOUT (75s). Then the multi-node part: both across 2
emulated nodes x 1 rank (launch/cluster.py: named nodes under `unshare --uts`, loopback TCP between them),
where compositions become candidates too; it needs root and is skipped with a one-line reason otherwise.
Every layout gives each rank a core of its own: where ranks take turns on the cores (Open MPI at 4 ranks
here) a point's time is the scheduler's more than the algorithm's, and verify sent back up to 14 % of such
a demo's tuned cells (docs/tune.md "make demo"). Measurements go to the demo database
(TUNEMPI_DB, else demo.sqlite in tunempi's data directory): rerunning resumes from what is there. The
tuning directories are <tunempi data dir>/demo-tuning/<library> (TUNEMPI_DEMO_OUT overrides).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from tunempi.bench.protocol import MeasureSettings
from tunempi.config import data_dir
from tunempi.errors import TunempiError
from tunempi.launch.cluster import EmulatedCluster
from tunempi.launch.signals import run_stoppable
from tunempi.report.console import TuneProgress, VerifyProgress, output_console, print_verify_report
from tunempi.report.tuning import speedup_table, summary_lines, write_plots
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.verify_run import run_verify
from tunempi.units import parse_duration, parse_size


@dataclass(frozen=True)
class DemoRun:
    """One library tuned at one layout (nodes > 1: on emulated nodes)."""

    spec: str
    ranks: int
    nodes: int = 1
    collectives: str = "allreduce,bcast,allgather,alltoall"
    max_msg: int | None = None  # None: TUNEMPI_DEMO_MAX_MSG

    @property
    def name(self) -> str:
        return self.spec if self.nodes == 1 else f"{self.spec}-{self.nodes}x{self.ranks // self.nodes}"


DEMO_RUNS: tuple[DemoRun, ...] = (DemoRun("mpich", 2), DemoRun("openmpi", 2))
#: At 2 nodes x 1 rank (ranks <= cores keep MPICH's busy-polling timings meaningful): MPICH's two collectives
#: up to 64 KiB keep it to seconds; Open MPI over TCP is where its default leaves a gain (allreduce).
MULTINODE_RUNS: tuple[DemoRun, ...] = (DemoRun("mpich", 2, nodes=2, collectives="allreduce,bcast", max_msg=64 * 1024),
                                       DemoRun("openmpi", 2, nodes=2))
DEMO_SETTINGS = MeasureSettings(warmup=64, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.05)


def demo_db() -> Path:
    return Path(os.environ.get("TUNEMPI_DB") or data_dir() / "demo.sqlite")


def multinode_unavailable() -> str | None:
    """Why the emulated nodes cannot come up here (None: they can)."""
    if os.geteuid() != 0:
        return "emulated nodes need root (unshare --uts gives each node its own host name)"
    if shutil.which("unshare") is None:
        return "`unshare` not found (util-linux)"
    return None


@contextmanager
def emulated_nodes(nodes: int, slots: int) -> Iterator[EmulatedCluster]:
    """A private emulated cluster whose variables are set in this process while it runs; stopped after."""
    cluster = EmulatedCluster(tempfile.mkdtemp(prefix="tunempi-demo-cluster-"))
    saved = dict(os.environ)
    try:
        cluster.start(nodes, slots=slots)
        os.environ.update(cluster.environment())
        yield cluster
    finally:
        os.environ.clear()
        os.environ.update(saved)
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)


def tune_and_verify(run: DemoRun, out: Path, db: Path, max_msg: int, timeout_s: float, console: Console) -> list[str]:
    """Tune `run` into `out`, verify it, print the tables; the summary lines."""
    console.rule(f"tune {run.spec}, {run.ranks} ranks" + (f" on {run.nodes} emulated nodes" if run.nodes > 1 else ""))
    options = TuneOptions(out=out, collectives=run.collectives, mpi=run.spec, ranks=run.ranks if run.nodes == 1 else None,
                          nodes=run.nodes, ppn=run.ranks // run.nodes if run.nodes > 1 else None,
                          max_msg=run.max_msg or max_msg, timeout_s=timeout_s, db=db, settings=DEMO_SETTINGS)
    progress = TuneProgress(console)
    try:
        report = run_tune(options, progress)
    finally:
        progress.close()
    if report.manifest is None:  # interrupted
        raise KeyboardInterrupt
    console.rule(f"verify {run.name}")
    with VerifyProgress(console) as verify_progress:
        verified = run_verify(out, repeats=3, settings=DEMO_SETTINGS, listener=verify_progress)
    print_verify_report(console, verified)
    console.print(speedup_table(verified.manifest))
    plots = write_plots(verified.manifest, out / "report")
    return [*summary_lines(verified.manifest), "plots: " + ", ".join(str(p) for p in plots.values())]


def main() -> int:
    console = output_console()
    db = demo_db()
    out_root = Path(os.environ.get("TUNEMPI_DEMO_OUT") or data_dir() / "demo-tuning")
    max_msg = parse_size(os.environ.get("TUNEMPI_DEMO_MAX_MSG") or "256KiB")
    timeout_s = parse_duration(os.environ.get("TUNEMPI_DEMO_TIMEOUT") or "75s")
    failures = 0
    summaries: list[tuple[str, list[str]]] = []
    skipped = multinode_unavailable()
    runs = DEMO_RUNS + (() if skipped else MULTINODE_RUNS)
    try:
        for run in runs:
            try:
                if run.nodes > 1:
                    with emulated_nodes(run.nodes, slots=run.ranks // run.nodes):
                        lines = tune_and_verify(run, out_root / run.name, db, max_msg, timeout_s, console)
                else:
                    lines = tune_and_verify(run, out_root / run.name, db, max_msg, timeout_s, console)
                summaries.append((run.name, lines))
            except TunempiError as exc:
                failures += 1
                console.print(f"[red]{run.name}: {exc}[/]")
    except KeyboardInterrupt:
        console.print(f"interrupted: measured points are kept in {db}; rerun to resume")
        return 130
    console.rule("summary")
    for name, lines in summaries:
        console.print(f"[bold]{name}[/] ({out_root / name})")
        for line in lines:
            console.print(f"  {line}")
    if skipped:
        console.print(f"multi-node part skipped: {skipped}")
    console.print(f"apply: tunempi run --tuning {out_root}/<library> -- mpiexec -n N ./app   |   "
                  f"report: tunempi report --tuning {out_root}/<library> --html report.html")
    return 1 if failures else 0


if __name__ == "__main__":
    # SIGTERM, SIGINT, SIGHUP: the engines and the emulated nodes go, measured points stay (docs/launch.md).
    sys.exit(run_stoppable(main, name="tunempi demo"))
