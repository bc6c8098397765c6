"""A resumed tune with and without the launch-aware confirmation, verified side by side.

A rerun of `tune` reads the store's earlier runs back. Runs of different launches are not always
comparable (a shared machine in another state; Open MPI's 4 ranks on 2 cores placed differently), and a
rule chosen by comparing an algorithm measured now with a default measured in an earlier launch can be
slower than the library. The tuner now measures such pairs again in its own launch and keeps the
library's choice where they disagree (`tune.driver.keep_default_where_this_launch_disagrees`).

This script: (1) one tune into a fresh store (the earlier launch; `--earlier DB` uses a store you already
have instead, e.g. the demo's after several runs); (2) from copies of that store, a resumed tune with the
confirmation ("new") and one without it ("old": earlier runs treated as this launch's, as before), each
followed by `verify` (3 interleaved pairs per tuned cell). Printed per run: runs the resumed tune measured,
tuned cells, their geo-mean speedup over the default as verify measured it before replacing anything,
cells slower than the default beyond noise, and the speedup over all cells after verify.

    .venv/bin/python bench/resume_confirmation.py --mpi openmpi --ranks 4
    .venv/bin/python bench/resume_confirmation.py --mpi mpich --ranks 2 --earlier ~/.local/share/tunempi/demo.sqlite
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import tunempi.tune.driver as driver
from tunempi.demo import DEMO_SETTINGS
from tunempi.space import Cell
from tunempi.strategy import Strategy
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.verify_run import run_verify
from tunempi.units import parse_size


def _no_earlier_runs(strategy: Strategy) -> set[tuple[Cell, str]]:
    return set()


def tune_and_verify(db: Path, mpi: str, ranks: int, max_msg: int) -> tuple[int, dict]:
    out = Path(tempfile.mkdtemp(prefix="resume-confirmation-"))
    report = run_tune(TuneOptions(out=out, collectives="allreduce,bcast,allgather,alltoall", mpi=mpi, ranks=ranks,
                                  max_msg=max_msg, timeout_s=120, db=db, settings=DEMO_SETTINGS))
    assert report.manifest is not None
    verified = run_verify(out, repeats=3, settings=DEMO_SETTINGS)
    return report.manifest.run.measured, verified.summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="openmpi")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--max-msg", default="256KiB")
    parser.add_argument("--earlier", type=Path, default=None, help="a store to resume from (default: tune one now)")
    parser.add_argument("--rounds", type=int, default=2, help="old/new pairs to run")
    args = parser.parse_args()
    max_msg = parse_size(args.max_msg)
    work = Path(tempfile.mkdtemp(prefix="resume-confirmation-"))
    earlier = work / "earlier.sqlite"
    if args.earlier is not None:
        shutil.copy(args.earlier, earlier)
    else:
        tune_and_verify(earlier, args.mpi, args.ranks, max_msg)
    real = driver._earlier_runs
    print("| round | tuner | runs measured | tuned cells | geo speedup of the tuned cells (verify, before) "
          "| slower beyond noise | all cells after verify |")
    print("|---|---|---|---|---|---|---|")
    try:
        for round_ in range(args.rounds):
            for mode in ("old", "new"):
                # "old": no run counts as an earlier launch's, so neither the confirmation nor the check applies.
                driver._earlier_runs = real if mode == "new" else _no_earlier_runs
                db = work / f"{round_}-{mode}.sqlite"
                shutil.copy(earlier, db)
                measured, s = tune_and_verify(db, args.mpi, args.ranks, max_msg)
                print(f"| {round_} | {mode} | {measured} | {s['compared']} | {s['geo_mean_speedup_compared_before']:.3f} "
                      f"| {s['slower_beyond_noise_before']} | {s['geo_mean_speedup_all_cells']:.3f} |", flush=True)
    finally:
        driver._earlier_runs = real
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
