"""`make demo`: tune, verify and report on this machine, with both embedded libraries, in a few minutes.

MPICH at 2 ranks and Open MPI at 4 ranks (Open MPI copes with oversubscription on small machines, MPICH's
busy polling does not), allreduce, bcast, allgather and alltoall up to TUNEMPI_DEMO_MAX_MSG (256KiB), each
library's tuning capped at TUNEMPI_DEMO_TIMEOUT (75s). Measurements go to the demo database
(TUNEMPI_DB, else demo.sqlite in tunempi's data directory): rerunning resumes from what is there. The
tuning directories are <tunempi data dir>/demo-tuning/<library> (TUNEMPI_DEMO_OUT overrides).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tunempi.bench.protocol import MeasureSettings
from tunempi.config import data_dir
from tunempi.errors import TunempiError
from tunempi.report.console import TuneProgress, VerifyProgress, output_console, print_verify_report
from tunempi.report.tuning import speedup_table, summary_lines, write_plots
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.verify_run import run_verify
from tunempi.units import parse_duration, parse_size

DEMO_RUNS: tuple[tuple[str, int], ...] = (("mpich", 2), ("openmpi", 4))
DEMO_COLLECTIVES = "allreduce,bcast,allgather,alltoall"
DEMO_SETTINGS = MeasureSettings(warmup=2, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.05)


def demo_db() -> Path:
    return Path(os.environ.get("TUNEMPI_DB") or data_dir() / "demo.sqlite")


def main() -> int:
    console = output_console()
    db = demo_db()
    out_root = Path(os.environ.get("TUNEMPI_DEMO_OUT") or data_dir() / "demo-tuning")
    max_msg = parse_size(os.environ.get("TUNEMPI_DEMO_MAX_MSG") or "256KiB")
    timeout_s = parse_duration(os.environ.get("TUNEMPI_DEMO_TIMEOUT") or "75s")
    failures = 0
    summaries: list[tuple[str, list[str]]] = []
    for spec, ranks in DEMO_RUNS:
        console.rule(f"tune {spec}, {ranks} ranks")
        out = out_root / spec
        options = TuneOptions(out=out, collectives=DEMO_COLLECTIVES, mpi=spec, ranks=ranks, max_msg=max_msg,
                              timeout_s=timeout_s, db=db, settings=DEMO_SETTINGS)
        try:
            progress = TuneProgress(console)
            try:
                report = run_tune(options, progress)
            finally:
                progress.close()
            if report.manifest is None:  # interrupted
                return 130
            console.rule(f"verify {spec}")
            with VerifyProgress(console) as verify_progress:
                verified = run_verify(out, repeats=3, settings=DEMO_SETTINGS, listener=verify_progress)
            print_verify_report(console, verified)
            console.print(speedup_table(verified.manifest))
            plots = write_plots(verified.manifest, out / "report")
            summaries.append((spec, [*summary_lines(verified.manifest),
                                     "plots: " + ", ".join(str(p) for p in plots.values())]))
        except TunempiError as exc:
            failures += 1
            console.print(f"[red]{spec}: {exc}[/]")
        except KeyboardInterrupt:
            console.print(f"interrupted: measured points are kept in {db}; rerun to resume")
            return 130
    console.rule("summary")
    for spec, lines in summaries:
        console.print(f"[bold]{spec}[/] ({out_root / spec})")
        for line in lines:
            console.print(f"  {line}")
    console.print(f"apply: tunempi run --tuning {out_root}/<library> -- mpiexec -n N ./app   |   "
                  f"report: tunempi report --tuning {out_root}/<library> --html report.html")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
