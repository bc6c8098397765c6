"""Overhead of the online mode pinned to the library's default algorithm: 8-byte allreduce loop at 2 ranks.

Not a test (timings on a shared machine are noisy). The loop program is bench/profile_overhead.c
(blocks of MPI_Allreduce through the interposer alternating, ABBA, with PMPI_Allreduce direct).
Variants, launched interleaved: "none" (no interposer) and "online" (online mode, the 8-byte cell's
probability of "default" = 1, so every call does the full draw but never switches: the cost of the
mode itself). Figures:

1. Launch level (the goal: < 3 %): median over launches of each launch's median ns per call.
2. In process, 2 ranks: MPI_ minus PMPI_ per ABBA quadruple inside the online launches (launch-to-launch
   noise removed). 3. The same at 1 rank: the intrinsic CPU cost of the hooks.

    .venv/bin/python bench/online_overhead.py [--mpi mpich|openmpi|PREFIX] [--launches 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from tunempi.launch import run_launch
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.online.cells import SizeRangeCell
from tunempi.online.run import open_state, rank_command
from tunempi.online.state import OnlineConfig, Probabilities
from tunempi.profile.build import build_interposer

sys.path.insert(0, str(Path(__file__).parent))
from profile_overhead import paired_differences  # noqa: E402

VARIANTS = ("none", "online")


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile)."""
    if len(values) < 2:
        return (values[0],) * 3 if values else (float("nan"),) * 3
    lo, mid, hi = statistics.quantiles(values, n=4, method="inclusive")
    return lo, mid, hi


def launch(argv: list[str], env: dict[str, str], library: MPILibrary, launcher_env: dict[str, str]
           ) -> tuple[dict[str, list[float]], list[tuple[str, float]]]:
    """Per-path block times (ns/call) and the blocks in the order they ran (for paired_differences)."""
    command = rank_command(argv, env, library)
    result = run_launch(command.argv, command.full_env({**os.environ, **launcher_env}), timeout=300)
    if not result.ok:
        raise SystemExit(f"{' '.join(command.argv)} failed: {result.reason}\n{result.stderr}")
    blocks: dict[str, list[float]] = {"mpi": [], "pmpi": []}
    order: list[tuple[str, float]] = []
    for line in result.stdout.splitlines():
        kind, _, value = line.partition(" ")
        if kind in ("mpi", "pmpi"):
            blocks[kind].append(float(value))
            order.append((kind, float(value)))
    return blocks, order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="mpich")
    parser.add_argument("--launches", type=int, default=8, help="launches per variant")
    parser.add_argument("--iters", type=int, default=5000, help="allreduce calls per block")
    parser.add_argument("--blocks", type=int, default=20, help="blocks of each path per launch")
    args = parser.parse_args()

    library = resolve_library(args.mpi)
    adapter = adapter_for(library)
    interposer = build_interposer(library)
    app = build_c(library, [Path(__file__).with_name("profile_overhead.c")], "profile-overhead")
    base = [str(library.mpiexec), "-n", "2"]
    base += ["-bind-to", "core"] if library.vendor == "mpich" else ["--bind-to", "core"]
    argv = base + [str(app), str(args.iters), str(args.blocks)]
    single = [str(library.mpiexec), "-n", "1"] + base[3:] + [str(app), str(args.iters), str(args.blocks)]
    launcher_env = adapter.launch_env()

    per_launch: dict[str, list[float]] = {v: [] for v in VARIANTS}
    in_process: list[float] = []
    intrinsic: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tunempi-online-overhead-") as tmp:
        state = open_state(Path(tmp) / "state", library, OnlineConfig(collectives=["allreduce"], min_probability=0))
        names = state.switches["allreduce"].names
        config = state.config
        pinned = {name: float(name == "default") for name in names}
        cells = {SizeRangeCell("allreduce", ranks, 1, ranks, config.sizes.index(8)).key: pinned for ranks in (1, 2)}
        state.save_probabilities(Probabilities(0, cells))
        table = state.write_table(1, 0, path=Path(tmp) / "table.txt")
        online_env = {"LD_PRELOAD": str(interposer), "TUNEMPI_MODE": "online", "TUNEMPI_ONLINE_TABLE": str(table),
                      "TUNEMPI_ONLINE_OUT": str(Path(tmp) / "records.csv"), **launcher_env}
        for i in range(args.launches):
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]  # no variant always runs first
            for variant in order:
                env = {} if variant == "none" else online_env
                blocks, ran = launch(argv, env, library, launcher_env)
                per_launch[variant].append(statistics.median(blocks["mpi"]))
                if variant == "online":
                    in_process += paired_differences(ran)
                    intrinsic += paired_differences(launch(single, env, library, launcher_env)[1])
                print(f"launch {i + 1}/{args.launches} {variant:8s} {per_launch[variant][-1]:8.1f} ns/call", flush=True)

    none = statistics.median(per_launch["none"])
    print(f"\n{library.name}, 2 ranks, 8-byte MPI_Allreduce, {args.launches} launches per variant, "
          f"{args.blocks} x {args.iters} calls per launch; online pinned to the default algorithm")
    for variant in VARIANTS:
        med = statistics.median(per_launch[variant])
        print(f"  {variant:8s} median {med:8.1f} ns/call  ({100 * (med - none) / none:+.2f} % vs none)")
    lo, mid, hi = quartiles(per_launch["none"])
    print(f"  launch-to-launch spread of 'none' (quartiles): {lo:.0f} / {mid:.0f} / {hi:.0f} ns/call")
    lo, wrapper, hi = quartiles(in_process)
    print(f"  in process, 2 ranks: MPI_ minus PMPI_ (median of {len(in_process)} ABBA pairs): {wrapper:+.1f} ns/call "
          f"(quartiles {lo:+.1f} / {hi:+.1f}) = {100 * wrapper / none:+.2f} % of a call")
    lo, cost, hi = quartiles(intrinsic)
    print(f"  in process, 1 rank (intrinsic cost of the online hooks, median of {len(intrinsic)} pairs): "
          f"{cost:+.1f} ns/call (quartiles {lo:+.1f} / {hi:+.1f})")


if __name__ == "__main__":
    main()
