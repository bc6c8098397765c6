"""Intel's own fast tuner (mpitune_fast, shipped in the impi-rt wheel) against `tunempi tune`, side by side on the
same layout and collectives (issue 27).

1. mpitune_fast tunes (its binary tuning file, read through I_MPI_TUNING_BIN); its wall time is taken.
2. `tunempi tune` tunes the same collectives up to --max-msg, then `tunempi verify`; both wall times are taken.
3. One interleaved benchmark judges both tunings: every round launches the engine once per arm (the library's
   default, mpitune_fast's file, tunempi's selection strings), in an order drawn per round, and measures the
   library's own choice (so whatever the arm's tuning selects) at every size of every collective. A cell's
   speedup of an arm is the median over rounds of default / arm; each arm's speedup is the geometric mean
   over cells.

Usage: .venv/bin/python bench/mpitune_fast_vs_tunempi.py [--collectives allreduce,bcast] [--max-msg 1MiB]
       [--rounds 5] [--nodes 1 --ppn 2 | --nodes 2 --ppn 1 --hostfile FILE] [--out DIR]
Across emulated nodes, give the cluster's hostfile (`tunempi cluster start --nodes 2`, then
`eval "$(tunempi cluster env)"`): mpitune_fast's own mpiexec starts through the cluster's agent.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tunempi.bench.engine import EngineSession, Layout
from tunempi.bench.protocol import MeasureSettings
from tunempi.bench.sweep import BenchPoint, measure_point, selection_for
from tunempi.launch.hosts import AGENT_VAR, NodeAllocation
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.tune.manifest import Manifest
from tunempi.tune.scope import message_sizes
from tunempi.units import format_size, parse_size

TUNEMPI = [sys.executable, "-m", "tunempi"]
SETTINGS = MeasureSettings(time_cap_s=0.2)


def timed(argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> float:
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, check=False, cwd=cwd)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}); see {log}")
    return time.monotonic() - started


def run_mpitune_fast(library, args: argparse.Namespace, out: Path) -> tuple[Path, float]:  # noqa: ANN001
    env = {**os.environ, "I_MPI_ROOT": str(library.prefix), "LD_LIBRARY_PATH": str(library.prefix / "lib"),
           "PATH": f"{library.prefix / 'bin'}:{os.environ.get('PATH', '')}"}
    if os.environ.get(AGENT_VAR):  # emulated nodes: its mpiexec must start them through the cluster's agent
        env.update(I_MPI_HYDRA_BOOTSTRAP="ssh", I_MPI_HYDRA_BOOTSTRAP_EXEC=os.environ[AGENT_VAR])
    directory = (out / "mpitune_fast").resolve()
    directory.mkdir(parents=True, exist_ok=True)
    hosts = ["-hosts", os.uname().nodename]
    if args.hostfile:  # mpitune_fast takes one host name per line
        names = (out / "mpitune_fast.hosts").resolve()
        names.write_text("".join(f"{host}\n" for host in NodeAllocation.from_hostfile(args.hostfile).hosts))
        hosts = ["-f", str(names)]
    argv = [str(library.prefix / "bin" / "mpitune_fast"), *hosts, "-n", str(args.nodes), "-ppn", str(args.ppn),
            "-c", args.collectives, "-d", str(directory)]
    # Run in its own directory: Intel MPI writes shm_msglens_<date>.txt into the working directory (one was
    # once committed at the repository root from a run of this script).
    wall = timed(argv, env, out / "mpitune_fast.log", cwd=directory)
    files = sorted(directory.glob("cluster_merged_*.dat"))
    if not files:
        raise SystemExit(f"mpitune_fast wrote no cluster_merged_*.dat; see {out / 'mpitune_fast.log'}")
    return files[-1], wall


def run_tunempi(args: argparse.Namespace, out: Path) -> tuple[Path, float, float]:
    tuning = out / "tunempi"
    env = {**os.environ, "TUNEMPI_DB": str(out / "results.sqlite")}
    layout = ["--ranks", str(args.ppn)] if args.nodes == 1 else ["--nodes", str(args.nodes), "--ppn", str(args.ppn)]
    hosts = ["--hostfile", args.hostfile] if args.hostfile else []
    tune = timed([*TUNEMPI, "tune", "--mpi", "impi", *layout, *hosts, "--collectives", args.collectives,
                  "--max-msg", args.max_msg, "--out", str(tuning)], env, out / "tune.log")
    verify = timed([*TUNEMPI, "verify", "--tuning", str(tuning), *hosts], env, out / "verify.log")
    return tuning, tune, verify


def measure_arm(library, adapter, layout: Layout, allocation, env: dict[str, str],  # noqa: ANN001
                cells: list[tuple[str, int]]) -> dict[tuple[str, int], float]:
    medians: dict[tuple[str, int], float] = {}
    counter = iter(range(1, 1 << 30))
    with EngineSession(library, layout, env={**adapter.launch_env(), **env}, allocation=allocation) as session:
        for collective, size in cells:
            point = BenchPoint(collective, "default", size)
            outcome = measure_point(session, point, selection_for(adapter, point, "mpit"), SETTINGS,
                                    next_id=lambda: next(counter), retries=2, says_not_usable=adapter.says_not_usable)
            if outcome.ok and outcome.statistics is not None:
                medians[(collective, size)] = outcome.statistics.median_us
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collectives", default="allreduce,bcast")
    parser.add_argument("--max-msg", default="1MiB")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--ppn", type=int, default=2)
    parser.add_argument("--hostfile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("mpitune-fast-vs-tunempi"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    library = resolve_library("impi")
    adapter = adapter_for(library)

    dat, fast_wall = run_mpitune_fast(library, args, args.out)
    print(f"mpitune_fast: {fast_wall:.1f} s -> {dat}", flush=True)
    tuning, tune_wall, verify_wall = run_tunempi(args, args.out)
    print(f"tunempi tune: {tune_wall:.1f} s, verify {verify_wall:.1f} s -> {tuning}", flush=True)

    arms = {"default": {}, "mpitune_fast": {"I_MPI_TUNING_BIN": str(dat.resolve())},
            "tunempi": Manifest.load(tuning).activation_env()}
    layout = Layout(ranks=args.nodes * args.ppn, nodes=args.nodes, ppn=args.ppn if args.nodes > 1 else None)
    allocation = NodeAllocation.given_or_found(args.hostfile) if args.nodes > 1 else None
    sizes = [s for s in message_sizes(parse_size(args.max_msg)) if s & (s - 1) == 0]  # the powers of two
    cells = [(c, s) for c in args.collectives.split(",") for s in sizes]
    rng = random.Random(args.seed)
    rounds: list[dict[str, dict[tuple[str, int], float]]] = []
    for number in range(args.rounds):
        order = list(arms)
        rng.shuffle(order)
        rounds.append({arm: measure_arm(library, adapter, layout, allocation, arms[arm], cells) for arm in order})
        print(f"round {number + 1}/{args.rounds}: {' '.join(order)}", file=sys.stderr, flush=True)

    print(f"\n{library.name}, {args.nodes} node(s) x {args.ppn}, {args.collectives}, 4 B..{args.max_msg}, "
          f"{args.rounds} interleaved rounds: speedup over the library's default (median over rounds)")
    print(f"{'collective':<10} {'size':>7} {'mpitune_fast':>13} {'tunempi':>9}")
    speedups: dict[str, list[float]] = {"mpitune_fast": [], "tunempi": []}
    for cell in cells:
        row = []
        for arm in speedups:
            ratios = [r["default"][cell] / r[arm][cell] for r in rounds if cell in r["default"] and cell in r[arm]]
            value = statistics.median(ratios) if ratios else float("nan")
            if ratios:
                speedups[arm].append(value)
            row.append(value)
        print(f"{cell[0]:<10} {format_size(cell[1]):>7} {row[0]:13.3f} {row[1]:9.3f}")
    for arm, values in speedups.items():
        geo = math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")
        wall = fast_wall if arm == "mpitune_fast" else tune_wall + verify_wall
        print(f"{arm}: geometric-mean speedup {geo:.3f} over {len(values)} cells; tuning wall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
