"""A real run of `tunempi search` on an MPI program whose speed depends on a transport threshold.

    .venv/bin/python bench/search_threshold.py [--space focused|auto|both] [--budget N] [--repeats K]
                                               [--pairs P] [--bytes B] [--rounds R] [--out DIR]

1. Builds bench/search_threshold.c with the embedded MPICH (bursts of BYTES-byte messages both ways
   between 2 ranks; by default 12 KiB, just above MPICH ch4's 8 KiB single-copy CMA threshold).
2. Runs `tunempi search` on it at 2 ranks (`mpiexec -n 2 -bind-to core`), objective the program's own
   `Time in seconds`, with a focused space (the CMA threshold, the shared-memory cell size, the pack buffer
   size) and/or `--space auto`. Each search verifies its best against the defaults (`--repeats` ABBA pairs,
   95% one-sided t-test) and says "recommend" or "keep the defaults".
3. Measures the recommendation again, side by side with the defaults (`--pairs` more interleaved pairs
   through the same launcher path), and prints every pair and the ratio default/best.

Prints the exact commands it ran. Results go to DIR (default ./tunempi-bench-search), one database for all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tunempi.launch import HydraLauncher, run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "search_threshold.c"
METRIC = r"Time in seconds = (\S+)"

FOCUSED_SPACE = textwrap.dedent("""
    # MPICH ch4 intra-node point-to-point: single-copy (CMA) rendezvous from the threshold on, eager copies
    # through shared-memory cells below it. MPICH 5.0.2 aborts in MPI_Init if the cell exceeds the pack buffer.
    [space]
    constraints = ["MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE <= MPIR_CVAR_CH4_PACK_BUFFER_SIZE"]

    [[param]]
    name = "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD"
    range = "4K:*2:128K"
    default = 8192

    [[param]]
    name = "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"
    range = "4K:*2:64K"
    default = 8192

    [[param]]
    name = "MPIR_CVAR_CH4_PACK_BUFFER_SIZE"
    range = "16K:*2:64K"
    default = 16384
""")


def run_search(space: str, args: argparse.Namespace, program: Path, mpiexec: Path, out: Path) -> dict:
    argv = [sys.executable, "-m", "tunempi", "search", "--space", space, "--mpi", "mpich", "--strategy",
            args.strategy, "--budget", str(args.budget), "--repeats", str(args.repeats), "--seed", str(args.seed),
            "--timeout", "120", "--metric", METRIC, "--db", str(args.out / "search.sqlite"), "--out", str(out),
            "--", str(mpiexec), "-n", "2", "-bind-to", "core", str(program), str(args.bytes), str(args.rounds),
            str(args.burst)]
    print(f"\n$ {shlex.join(['tunempi', *argv[3:]])}", flush=True)
    started = time.monotonic()
    done = subprocess.run(argv, text=True, capture_output=True)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.stdout.write(done.stderr)
        raise SystemExit(f"tunempi search failed with exit status {done.returncode}")
    summary = json.loads((out / "summary.json").read_text())
    summary["seconds"] = time.monotonic() - started
    failed = len(re.findall(r"\[(?:FAILED|TIMEOUT)\]", done.stderr))
    summary["failed_trials"] = failed
    return summary


def measure(program: Path, mpiexec: Path, env: dict[str, str], args: argparse.Namespace) -> float:
    spec_args = HydraLauncher(mpiexec).env_args(env)
    argv = [str(mpiexec), *spec_args, "-n", "2", "-bind-to", "core", str(program), str(args.bytes),
            str(args.rounds), str(args.burst)]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MPIR_CVAR_", "UCX_"))}
    result = run_launch(argv, {**base, **env}, timeout=120)
    match = re.search(METRIC, result.stdout)
    if not result.ok or match is None:
        raise SystemExit(f"measurement failed: {result.reason}\n{result.stdout}{result.stderr}")
    return float(match.group(1))


def side_by_side(name: str, summary: dict, program: Path, mpiexec: Path, args: argparse.Namespace) -> None:
    best_env = summary["recommended_env"] or summary["best_env"]
    label = "recommended" if summary["recommended_env"] else "search's best (NOT recommended)"
    print(f"\n{name}: {summary['verdict']['reason'] if summary['verdict'] else 'no verdict'}")
    print(f"  {summary['trials']} trials ({summary['failed_trials']} failed) in {summary['seconds']:.0f} s")
    print(f"  {label}: {' '.join(f'{k}={v}' for k, v in best_env.items())}")
    print(f"  side by side, {args.pairs} interleaved pairs (ABBA), seconds of exchange per run:")
    print(f"  {'pair':>4}  {'default':>9}  {'best':>9}  {'default/best':>12}")
    ratios = []
    for pair in range(args.pairs):
        order = ("default", "best") if pair % 2 == 0 else ("best", "default")
        times = {role: measure(program, mpiexec, best_env if role == "best" else {}, args) for role in order}
        ratios.append(times["default"] / times["best"])
        print(f"  {pair:>4}  {times['default']:>9.4f}  {times['best']:>9.4f}  {ratios[-1]:>12.3f}")
    geo = math.exp(statistics.fmean(math.log(r) for r in ratios))
    print(f"  geometric mean default/best = {geo:.3f}; median {statistics.median(ratios):.3f}; "
          f"min {min(ratios):.3f}; max {max(ratios):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", choices=("focused", "auto", "both"), default="both")
    parser.add_argument("--strategy", default="bayes")
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bytes", type=int, default=12288)
    parser.add_argument("--rounds", type=int, default=4000)
    parser.add_argument("--burst", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("tunempi-bench-search"))
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)

    library = resolve_library("mpich")
    program = build_c(library, [SOURCE], "search_threshold", werror=True)
    print(f"{library.name} ({library.device}), program {program}, {args.bytes}-byte messages, "
          f"{args.rounds} rounds of {args.burst} each way")
    spaces = {"focused": None, "auto": "auto"} if args.space == "both" else {args.space: None}
    for name in spaces:
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        space = "auto"
        if name == "focused":
            space = str(out / "space.toml")
            Path(space).write_text(FOCUSED_SPACE)
        summary = run_search(space, args, program, library.mpiexec, out)
        side_by_side(f"--space {name}", summary, program, library.mpiexec, args)


if __name__ == "__main__":
    main()
