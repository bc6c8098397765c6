"""Overhead of the profiling interposer: 8-byte allreduce loop at 2 ranks, with and without it
(`--collective alltoallv`: an alltoallv of one int per peer, a vector collective whose counts profile mode
classifies).

Not a test (timings on a shared machine are noisy). Two figures:

1. Launch level (the goal: < 2 % in profile mode): PAIRS of launches of the same program, one
   without the interposer ("none") and one with it ("profile", or "off": preloaded but disabled), run
   back to back in alternating order (none-first, then profile-first, ...) so slow drifts of the machine
   hit both sides alike. Each launch times blocks of MPI_Allreduce calls and is summarised twice: by the
   median block and by the fastest block (the one least disturbed by other jobs: on a shared node a
   preempted busy-polling rank makes blocks slower, never faster). Each pair gives the ratio with /
   without; the figure is the median ratio over pairs with a percentile bootstrap 95 % confidence
   interval (pairs resampled, seeded).
2. In process: inside each "profile" launch the program alternates blocks of MPI_Allreduce (through
   the interposer) and PMPI_Allreduce (direct) in ABBA order; each quadruple gives one paired
   difference; the median over all of them is the wrapper's cost without launch-to-launch noise. The
   same at 1 rank (`--single-rank-launches`; no partner to wait for) is the wrapper's intrinsic CPU cost.

Launches go through tunempi.launch (the library's own launcher, ranks bound to cores, a whole-job
timeout); the machine's load average is printed before and after, since other jobs on a shared node
preempt busy-polling ranks.

    .venv/bin/python bench/profile_overhead.py [--mpi mpich|openmpi|SPEC] [--pairs 30] [--mode profile|off]
                                               [--collective allreduce|alltoallv]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np

from tunempi.launch import LaunchSpec, launcher_for, run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.profile.build import build_interposer


def launch(library: MPILibrary, program: list[str], env: dict[str, str], base_env: dict[str, str],
           ranks: int = 2) -> list[tuple[str, float]]:
    """One launch; the (path, ns per call) of every block rank 0 printed."""
    spec = LaunchSpec(tuple(program), ranks, bind="core", env={**base_env, **env})
    command = launcher_for(library).command(spec)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_") or k == "TUNEMPI_CACHE"}
    result = run_launch(command.argv, command.full_env(clean), timeout=300)
    if not result.ok:
        raise SystemExit(f"{' '.join(command.argv)}: {result.reason}\n{result.stdout}\n{result.stderr}")
    blocks = []
    for line in result.stdout.splitlines():
        kind, _, value = line.partition(" ")
        if kind in ("mpi", "pmpi"):
            blocks.append((kind, float(value)))
    return blocks


def paired_differences(blocks: list[tuple[str, float]]) -> list[float]:
    """(A + A') / 2 - (B + B') / 2 for each ABBA quadruple (A: MPI_, B: PMPI_), in ns per call."""
    order = [value for _, value in blocks]
    return [(order[i] + order[i + 3]) / 2 - (order[i + 1] + order[i + 2]) / 2 for i in range(0, len(order) - 3, 4)]


def bootstrap_median_ci(values: list[float], *, seed: int, resamples: int = 10_000,
                        level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the median."""
    rng = np.random.default_rng(seed)
    data = np.asarray(values, dtype=float)
    medians = np.median(data[rng.integers(0, len(data), size=(resamples, len(data)))], axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich", help="MPI library SPEC (mpich, openmpi, a prefix, an mpicc)")
    parser.add_argument("--pairs", type=int, default=30, help="pairs of launches (with / without)")
    parser.add_argument("--mode", choices=("profile", "off"), default="profile", help="interposer mode measured")
    parser.add_argument("--iters", type=int, default=1000, help="calls per block")
    parser.add_argument("--collective", choices=("allreduce", "alltoallv"), default="allreduce",
                        help="the call measured: 8-byte allreduce, or alltoallv of one int per peer")
    parser.add_argument("--blocks", type=int, default=40, help="blocks of each path per launch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument("--single-rank-launches", type=int, default=5,
                        help="1-rank launches for the intrinsic in-process cost (0: none)")
    args = parser.parse_args()

    library = resolve_library(args.mpi)
    # Same variables for both sides; on one node Open MPI starts ~1 s faster without its libfabric btl.
    base_env = adapter_for(library).single_node_env()
    interposer = build_interposer(library)
    app = build_c(library, [Path(__file__).with_name("profile_overhead.c")], "profile-overhead")
    program = [str(app), str(args.iters), str(args.blocks), args.collective]
    load_before = os.getloadavg()

    ratios: list[float] = []  # median blocks
    fastest_ratios: list[float] = []  # fastest blocks
    none_ns: list[float] = []
    with_ns: list[float] = []
    in_process: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tunempi-overhead-") as tmp:
        tool_env = {"LD_PRELOAD": str(interposer), "TUNEMPI_MODE": args.mode,
                    "TUNEMPI_PROFILE_OUT": str(Path(tmp) / "p.json")}
        for i in range(args.pairs):
            order = ("none", args.mode) if i % 2 == 0 else (args.mode, "none")
            measured: dict[str, float] = {}
            fastest: dict[str, float] = {}
            for variant in order:
                blocks = launch(library, program, {} if variant == "none" else tool_env, base_env)
                measured[variant] = statistics.median(value for kind, value in blocks if kind == "mpi")
                fastest[variant] = min(value for kind, value in blocks if kind == "mpi")
                if variant == "profile":
                    in_process += paired_differences(blocks)
            none_ns.append(measured["none"])
            with_ns.append(measured[args.mode])
            ratios.append(measured[args.mode] / measured["none"])
            fastest_ratios.append(fastest[args.mode] / fastest["none"])
            print(f"pair {i + 1:3d}/{args.pairs} ({order[0]} first): median blocks none {measured['none']:8.1f} "
                  f"{args.mode} {measured[args.mode]:8.1f} ns/call (ratio {ratios[-1]:.4f}); fastest blocks "
                  f"{fastest['none']:7.1f} {fastest[args.mode]:7.1f} (ratio {fastest_ratios[-1]:.4f})", flush=True)
        intrinsic: list[float] = []
        if args.mode == "profile":
            for _ in range(args.single_rank_launches):
                intrinsic += paired_differences(launch(library, program, tool_env, base_env, ranks=1))
    load_after = os.getloadavg()

    call = "8-byte MPI_Allreduce" if args.collective == "allreduce" else "MPI_Alltoallv of one int per peer"
    print(f"\n{library.name}, 2 ranks bound to cores, {call}, {args.pairs} interleaved launch pairs, "
          f"{args.blocks} x {args.iters} calls per path per launch; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after")
    for label, values in (("median blocks", ratios), ("fastest blocks", fastest_ratios)):
        median_ratio = statistics.median(values)
        low, high = bootstrap_median_ci(values, seed=args.seed)
        print(f"  {args.mode} / none, {label}, median over pairs: {median_ratio:.4f} "
              f"({100 * (median_ratio - 1):+.2f} %), bootstrap 95 % CI [{100 * (low - 1):+.2f} %, "
              f"{100 * (high - 1):+.2f} %]")
    q = statistics.quantiles(none_ns, n=4)
    print(f"  ns/call without the interposer: median {statistics.median(none_ns):.0f} "
          f"(quartiles over launches {q[0]:.0f} / {q[2]:.0f}); with: median {statistics.median(with_ns):.0f}")
    if in_process:
        q = statistics.quantiles(in_process, n=4)
        wrapper = statistics.median(in_process)
        print(f"  in process (MPI_ minus PMPI_ blocks, median of {len(in_process)} ABBA quadruples): "
              f"{wrapper:+.1f} ns/call (quartiles {q[0]:+.1f} / {q[2]:+.1f}) = "
              f"{100 * wrapper / statistics.median(none_ns):+.2f} % of a call")
    if intrinsic:
        q = statistics.quantiles(intrinsic, n=4)
        print(f"  in process, 1 rank (intrinsic wrapper cost, median of {len(intrinsic)} quadruples): "
              f"{statistics.median(intrinsic):+.1f} ns/call (quartiles {q[0]:+.1f} / {q[2]:+.1f})")


if __name__ == "__main__":
    main()
