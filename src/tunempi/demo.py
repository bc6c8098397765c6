"""`make demo` for now: a small sweep of every algorithm on both embedded libraries, and what is fastest.

MPICH at 2 ranks and Open MPI at 4 ranks (oversubscribed on small machines; Open MPI copes, MPICH's
busy polling does not), allreduce, bcast, allgather and alltoall at a few sizes, into a demo database
(TUNEMPI_DB, else demo.sqlite in tunempi's data directory). Rerunning resumes: measured points are kept.
A later issue turns the demo into the tuner.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tunempi.bench.protocol import MeasureSettings
from tunempi.cli.bench import BenchOptions, run_bench, wide_console
from tunempi.config import data_dir
from tunempi.errors import TunempiError

DEMO_RUNS: tuple[tuple[str, int], ...] = (("mpich", 2), ("openmpi", 4))
DEMO_COLLECTIVES = "allreduce,bcast,allgather,alltoall"
DEMO_SIZES = "8,1KiB,64KiB"
DEMO_SETTINGS = MeasureSettings(warmup=2, min_iters=10, max_iters=1000, rel_ci=0.05, time_cap_s=0.2)


def demo_db() -> Path:
    return Path(os.environ.get("TUNEMPI_DB") or data_dir() / "demo.sqlite")


def main() -> int:
    console = wide_console()
    db = demo_db()
    failures = 0
    for spec, ranks in DEMO_RUNS:
        console.rule(f"{spec}, {ranks} ranks")
        options = BenchOptions(
            mpi=spec, collectives=DEMO_COLLECTIVES, algorithms="all", sizes=DEMO_SIZES, ranks=ranks, db=str(db),
            settings=DEMO_SETTINGS,
        )
        try:
            run_bench(options, console)
        except TunempiError as exc:
            failures += 1
            console.print(f"[red]{spec}: {exc}[/]")
        except KeyboardInterrupt:
            console.print(f"measured points are kept in {db}")
            return 130
    console.print(f"results: {db} (export with `tunempi export --db {db}`)")
    return 1 if failures == len(DEMO_RUNS) else 0


if __name__ == "__main__":
    sys.exit(main())
