"""Peer check of tunempi's benchmark engine against Intel's own IMB-MPI1, on Intel MPI (issue 27).

The same forced presets and message sizes are measured by `tunempi bench` (bench.session.run_bench, one
launch per preset) and by IMB-MPI1 (`-msglen` with exactly these sizes, the preset forced through
I_MPI_ADJUST_<COLL>), interleaved: every round measures each (collective, preset) with both tools, in an
order drawn per round. Like for like: IMB times a loop of calls with no barrier between them and reports,
per size, the average call time of each rank (t_max: the slowest rank's); tunempi's engine then runs in its
back-to-back mode (`--back-to-back` calls per timed iteration, the time per call of the slowest rank, the
median over iterations). Per point, the ratio tunempi / IMB t_max of each round; the point's ratio is the
median over rounds; the script prints every point and the geometric mean (goal: within 0.9-1.1). With
--back-to-back 1 it compares tunempi's default (barrier before every call) instead.

Usage: .venv/bin/python bench/imb_peer.py [--presets allreduce=1,2,3,5 bcast=1,2] [--sizes 8,1KiB,64KiB]
                                          [--rounds 3] [--ranks 2]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tunempi.bench.engine import Layout, resolve_binding
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.session import BenchListener, BenchOptions, run_bench
from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.units import format_size, parse_size

#: IMB-MPI1's benchmark name per collective (its reductions use MPI_FLOAT; sizes are bytes, as tunempi's).
IMB_NAMES = {"allreduce": "Allreduce", "bcast": "Bcast", "reduce": "Reduce", "allgather": "Allgather",
             "alltoall": "Alltoall", "gather": "Gather", "scatter": "Scatter"}
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


class Medians(BenchListener):
    def __init__(self) -> None:
        self.by_size: dict[int, float] = {}

    def measured(self, point, outcome, measurement) -> None:  # noqa: ANN001 - BenchListener's signature
        if measurement.ok and measurement.median_us is not None:
            self.by_size[point.msg_bytes] = measurement.median_us


def tunempi_point(collective: str, preset: str, sizes: list[int], ranks: int, db: Path, back_to_back: int
                  ) -> dict[int, float]:
    listener = Medians()
    run_bench(BenchOptions(mpi="impi", collectives=collective, algorithms=preset,
                           sizes=",".join(str(s) for s in sizes), ranks=ranks, db=str(db), force=True,
                           settings=MeasureSettings(time_cap_s=0.5, back_to_back=back_to_back)), listener)
    return listener.by_size


def run_imb(library, binary: Path, benchmark: str, sizes: list[int], ranks: int, workdir: Path,  # noqa: ANN001
            env: dict[str, str] | None = None) -> str:
    """One launch of an IMB binary of the impi-rt wheel (IMB-MPI1, IMB-NBC) under `library`'s mpiexec, at
    exactly `sizes`, in `workdir` (Intel MPI writes files into the working directory); its stdout."""
    lengths = workdir / "msglen.txt"
    lengths.write_text("".join(f"{size}\n" for size in sizes))
    # Placed as the engine places its ranks (resolve_binding: bound to cores where they fit), through the
    # same launcher: unbound, MPICH's Hydra leaves placement to the scheduler, Intel MPI's pins by itself.
    spec = LaunchSpec(command=(str(binary), benchmark, "-npmin", str(ranks), "-msglen", str(lengths), "-time", "0.5"),
                      ranks=ranks, bind=resolve_binding("auto", Layout(ranks)))
    argv = list(launcher_for(library).command(spec).argv)
    # The wheel's IMB binaries carry no run path to libmpi (Intel's tools expect LD_LIBRARY_PATH): the
    # library's own lib directory goes first.
    paths = [str(library.prefix / "lib"), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    run_env = {**os.environ, **(env or {}), "LD_LIBRARY_PATH": ":".join(paths)}
    done = subprocess.run(argv, env=run_env, cwd=workdir, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{binary.name} failed ({done.returncode}): {' '.join(argv)}\n{done.stderr[-2000:]}")
    return done.stdout


def imb_point(library, env: dict[str, str], collective: str, sizes: list[int], ranks: int,  # noqa: ANN001
              workdir: Path) -> dict[int, float]:
    stdout = run_imb(library, library.prefix / "bin" / "IMB-MPI1", IMB_NAMES[collective], sizes, ranks, workdir,
                     env)
    found: dict[int, float] = {}
    for line in stdout.splitlines():
        match = _ROW.match(line)
        if match:
            found[int(match.group(1))] = float(match.group(4))  # t_max[usec]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["allreduce=1,2,3,5", "bcast=1,2"])
    parser.add_argument("--sizes", default="8,1KiB,64KiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--back-to-back", type=int, default=100)
    args = parser.parse_args()
    library = resolve_library("impi")
    adapter = adapter_for(library)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    points = [(c, f"preset_{p}") for c, ids in (spec.split("=") for spec in args.presets) for p in ids.split(",")]
    ratios: dict[tuple[str, str, int], list[float]] = {}
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for round_ in range(args.rounds):
            for collective, preset in points:
                env = adapter.force_env(collective, preset)
                tools = ["tunempi", "imb"]
                rng.shuffle(tools)
                got: dict[str, dict[int, float]] = {}
                for tool in tools:
                    got[tool] = (tunempi_point(collective, preset, sizes, args.ranks, work / "db.sqlite",
                                               args.back_to_back)
                                 if tool == "tunempi" else imb_point(library, env, collective, sizes, args.ranks, work))
                for size in sizes:
                    if size in got["tunempi"] and got["imb"].get(size):
                        ratios.setdefault((collective, preset, size), []).append(got["tunempi"][size] / got["imb"][size])
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{library.name}, {args.ranks} ranks, {args.rounds} interleaved rounds: tunempi bench median "
          f"(back_to_back={args.back_to_back}) / IMB-MPI1 t_max")
    print(f"{'collective':<10} {'preset':<10} {'size':>7} {'ratio':>7}  per round")
    point_ratios = []
    for (collective, preset, size), values in sorted(ratios.items()):
        ratio = statistics.median(values)
        point_ratios.append(ratio)
        print(f"{collective:<10} {preset:<10} {format_size(size):>7} {ratio:7.3f}  "
              + " ".join(f"{v:.3f}" for v in values))
    if not point_ratios:
        print("no point measured by both tools")
        return 1
    geo = math.exp(statistics.fmean(math.log(r) for r in point_ratios))
    print(f"geometric mean of {len(point_ratios)} per-point ratios: {geo:.3f} (goal 0.9-1.1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
