"""Overhead of the profiling interposer: 8-byte allreduce loop at 2 ranks, with and without it.

Not a test (timings on a shared machine are noisy). Two figures:

1. Launch level (the issue's goal, < 2 %): alternating launches of the same program without the
   interposer ("none"), with it in profile mode ("profile") and preloaded but disabled ("off"); each
   launch reports the median ns per call of its MPI_Allreduce blocks; the medians over launches are
   compared.
2. In process: inside each "profile" launch the program alternates blocks of MPI_Allreduce (through
   the interposer) and PMPI_Allreduce (direct), so the wrapper's own cost is measured with the
   launch-to-launch noise removed.

    .venv/bin/python bench/profile_overhead.py [--mpi mpich|openmpi|PREFIX] [--launches 8]
"""

from __future__ import annotations

import argparse
import os
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
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **extra})
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
    blocks: dict[str, list[float]] = {"mpi": [], "pmpi": []}
    for line in result.stdout.splitlines():
        kind, _, value = line.partition(" ")
        if kind in blocks:
            blocks[kind].append(float(value))
    return blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich")
    parser.add_argument("--launches", type=int, default=8, help="launches per variant")
    parser.add_argument("--iters", type=int, default=20000, help="allreduce calls per block")
    parser.add_argument("--blocks", type=int, default=10, help="blocks of each path per launch")
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

    per_launch: dict[str, list[float]] = {v: [] for v in VARIANTS}
    in_process: list[float] = []
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
                    in_process.append(statistics.median(blocks["mpi"]) - statistics.median(blocks["pmpi"]))
                print(f"launch {i + 1}/{args.launches} {variant:8s} {per_launch[variant][-1]:8.1f} ns/call",
                      flush=True)

    none = statistics.median(per_launch["none"])
    print(f"\n{library.name}, 2 ranks, 8-byte MPI_Allreduce, {args.launches} launches per variant, "
          f"{args.blocks} x {args.iters} calls per launch")
    for variant in VARIANTS:
        med = statistics.median(per_launch[variant])
        print(f"  {variant:8s} median {med:8.1f} ns/call  ({100 * (med - none) / none:+.2f} % vs none)")
    wrapper = statistics.median(in_process)
    print(f"  in-process wrapper cost (MPI_ minus PMPI_ blocks, profile mode): {wrapper:+.1f} ns/call "
          f"({100 * wrapper / none:+.2f} % of a call)")


if __name__ == "__main__":
    main()
