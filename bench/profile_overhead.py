"""Overhead of the profiling interposer: 8-byte allreduce loop at 2 ranks, with and without it.

Not a test (timings on a shared machine are noisy). Two figures:

1. Launch level (the issue's goal, < 2 %): alternating launches of the same program without the
   interposer ("none"), with it in profile mode ("profile") and preloaded but disabled ("off"); each
   launch reports the median ns per call of its MPI_Allreduce blocks; the medians over launches are
   compared.
2. In process: inside each "profile" launch the program alternates blocks of MPI_Allreduce (through
   the interposer) and PMPI_Allreduce (direct) in ABBA order; each quadruple gives one paired
   difference, and the median over all quadruples of all launches is the wrapper's cost with the
   launch-to-launch noise removed. The same at 1 rank (no partner to wait for) gives the wrapper's
   intrinsic CPU cost.

    .venv/bin/python bench/profile_overhead.py [--mpi mpich|openmpi|PREFIX] [--launches 8]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
from pathlib import Path

from tunempi.mpi.build import build_c
from tunempi.profile.build import build_interposer
from tunempi.profile.stopgap import inject_env, resolve_library

VARIANTS = ("none", "profile", "off")


def launch(argv: list[str], env: dict[str, str], vendor: str) -> dict[str, list[float]]:
    command, extra = inject_env(argv, env, vendor) if env else (argv, {})
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **extra}, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank
        proc.communicate()
        raise SystemExit(f"{' '.join(command)} timed out") from None
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stdout}\n{stderr}")
    blocks: dict[str, list[float]] = {"mpi": [], "pmpi": [], "order": []}
    for line in stdout.splitlines():
        kind, _, value = line.partition(" ")
        if kind in ("mpi", "pmpi"):
            blocks[kind].append(float(value))
            blocks["order"].append(float(value))
    return blocks


def paired_differences(order: list[float]) -> list[float]:
    """(A + A') / 2 - (B + B') / 2 for each ABBA quadruple (A: MPI_, B: PMPI_), in ns per call."""
    return [(order[i] + order[i + 3]) / 2 - (order[i + 1] + order[i + 2]) / 2 for i in range(0, len(order) - 3, 4)]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0], q[1], q[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich")
    parser.add_argument("--launches", type=int, default=8, help="launches per variant")
    parser.add_argument("--iters", type=int, default=5000, help="allreduce calls per block")
    parser.add_argument("--blocks", type=int, default=20, help="blocks of each path per launch")
    args = parser.parse_args()

    library = resolve_library(args.mpi)
    interposer = build_interposer(library)
    app = build_c(library, [Path(__file__).with_name("profile_overhead.c")], "profile-overhead")
    base = [str(library.mpiexec), "-n", "2"]
    if library.vendor == "mpich":
        base += ["-bind-to", "core"]
    else:
        base += ["--allow-run-as-root", "--bind-to", "core"]
    argv = base + [str(app), str(args.iters), str(args.blocks)]
    single = [str(library.mpiexec), "-n", "1"] + base[3:] + [str(app), str(args.iters), str(args.blocks)]

    per_launch: dict[str, list[float]] = {v: [] for v in VARIANTS}
    in_process: list[float] = []
    intrinsic: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tunempi-overhead-") as tmp:
        for i in range(args.launches):
            order = VARIANTS[i % 3:] + VARIANTS[: i % 3]  # rotate: no variant always runs first
            for variant in order:
                env = {} if variant == "none" else {
                    "LD_PRELOAD": str(interposer), "TUNEMPI_MODE": variant,
                    "TUNEMPI_PROFILE_OUT": str(Path(tmp) / "p.json")}
                blocks = launch(argv, env, library.vendor)
                per_launch[variant].append(statistics.median(blocks["mpi"]))
                if variant == "profile":
                    in_process += paired_differences(blocks["order"])
                    intrinsic += paired_differences(launch(single, env, library.vendor)["order"])
                print(f"launch {i + 1}/{args.launches} {variant:8s} {per_launch[variant][-1]:8.1f} ns/call",
                      flush=True)

    none = statistics.median(per_launch["none"])
    print(f"\n{library.name}, 2 ranks, 8-byte MPI_Allreduce, {args.launches} launches per variant, "
          f"{args.blocks} x {args.iters} calls per launch")
    for variant in VARIANTS:
        med = statistics.median(per_launch[variant])
        print(f"  {variant:8s} median {med:8.1f} ns/call  ({100 * (med - none) / none:+.2f} % vs none)")
    lo, spread_med, hi = quartiles(per_launch["none"])
    print(f"  launch-to-launch spread of 'none' (quartiles): {lo:.0f} / {spread_med:.0f} / {hi:.0f} ns/call")
    lo, wrapper, hi = quartiles(in_process)
    direct = statistics.median(per_launch["none"])
    print(f"  in process, 2 ranks: MPI_ minus PMPI_ (median of {len(in_process)} ABBA pairs): {wrapper:+.1f} ns/call "
          f"(quartiles {lo:+.1f} / {hi:+.1f}) = {100 * wrapper / direct:+.2f} % of a call")
    lo, cost, hi = quartiles(intrinsic)
    print(f"  in process, 1 rank (intrinsic wrapper cost, median of {len(intrinsic)} pairs): {cost:+.1f} ns/call "
          f"(quartiles {lo:+.1f} / {hi:+.1f})")


if __name__ == "__main__":
    main()
