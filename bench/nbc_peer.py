"""Peer check of tunempi's non-blocking figures against Intel's IMB-NBC (issue 41), interleaved rounds.

IMB-NBC ships in the impi-rt wheel (.venv/opt/impi/bin/IMB-NBC). Per collective and size every rank
measures its own t_pure (the mean of start + MPI_Wait), then computes for that time of its own between start
and wait: t_CPU (the computation) and t_ovrl (start, computation, MPI_Wait), means over iterations. The row it
prints is the rank with the longest t_ovrl, with that rank's own figures and overlap % = 100 (t_pure + t_CPU -
t_ovrl) / max(t_pure, t_CPU), clipped to 0-100 (IMB_output.c, IMB_display_times). tunempi's engine measures
the same two things (docs/bench.md, "Non-blocking collectives"): the latency (nb=latency; here in its
back-to-back mode, `--back-to-back` calls per timed iteration, as IMB loops without a barrier) and, in a
second run, the overlap (nb=overlap: one call per iteration; each rank computes for its own pure time, the
median of its own start + wait, and its overlap % = 100 (1 - median(own overlapped - own compute) / own
pure); the figure is the mean over ranks, OSU's averaging); with the computation as long as the pure time the
two formulas agree. Each rank's own overlap is printed too (the median over rounds, by rank), and `slowest`:
the own overlap of the tunempi rank with the longest own overlapped time (the rank IMB-NBC prints) minus
IMB-NBC's, median over rounds: how far the two would be apart if tunempi chose IMB's rank instead of the mean;
and `pure`: that rank's own pure time (one call between MPI_Barrier calls, the median) / IMB-NBC's t_pure (one
call between barriers too, that rank's mean): the latency timed as IMB times it.

Every round measures each collective with both tools in an order drawn per round. Per point: the latency
ratio tunempi / IMB t_pure and the overlap difference (tunempi - IMB, points), each the median over rounds
with a 95 % interval of that median (order statistics, as the engine's) (single rounds at a few points move by tens of points);
printed per point, then the verdict read like for like (the goals: `pure`'s geometric mean 0.9-1.1,
`slowest` within 10 points), then tunempi's own aggregates (back-to-back latency, mean over ranks), which
differ from IMB-NBC's figures by method (docs/bench.md, "Against a peer").

The wheel's IMB-NBC is built against Intel MPI's libmpi.so.12; MPICH 5.0.2 has the same ABI, so
`--mpi mpich` runs the very same binary on MPICH's library and launcher (the library's default algorithms).

Usage: .venv/bin/python bench/nbc_peer.py [--mpi impi|mpich] [--collectives iallreduce,ibcast]
                                          [--sizes 8,1KiB,64KiB] [--rounds 3] [--ranks 2]
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import sys
import tempfile
from pathlib import Path

from tunempi.bench.protocol import MeasureSettings, PointReply
from tunempi.bench.session import BenchListener, BenchOptions, run_bench
from tunempi.bench.stats import median_confidence_interval
from tunempi.mpi.discovery import resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.report.tuning import geo_mean
from tunempi.units import format_size, parse_size

sys.path.insert(0, str(Path(__file__).resolve().parent))
from imb_peer import Medians, run_imb  # noqa: E402 - the same listener and IMB launch

IMB_NAMES = {"iallreduce": "Iallreduce", "ibcast": "Ibcast", "ialltoall": "Ialltoall", "iallgather": "Iallgather"}
#: #bytes #repetitions t_ovrl t_pure t_CPU overlap[%]
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


class RankOverlaps(BenchListener):
    """Each rank's own overlap % of the nb=overlap points (the engine's overlap_pct_ranks), by size."""

    def __init__(self) -> None:
        self.by_size: dict[int, tuple[float, ...]] = {}
        self.slowest: dict[int, float] = {}
        self.slowest_pure: dict[int, float] = {}  # that rank's own pure time (us), as IMB-NBC's t_pure

    def measured(self, point, outcome, measurement) -> None:  # noqa: ANN001 - BenchListener's signature
        if outcome.ok and outcome.reply is not None and outcome.reply.overlap_pct_ranks:
            self.by_size[point.msg_bytes] = outcome.reply.overlap_pct_ranks
            self.slowest[point.msg_bytes] = _slowest_rank_s(outcome.reply)
            self.slowest_pure[point.msg_bytes] = _slowest_rank_pure(outcome.reply)


def _slowest_rank_s(reply: PointReply) -> float:
    """The own overlap % of the rank with the longest own overlapped time: the rank IMB-NBC would print."""
    times = reply.overlapped_us_ranks
    if len(times) != len(reply.overlap_pct_ranks):
        return math.nan
    return reply.overlap_pct_ranks[max(range(len(times)), key=times.__getitem__)]


def _slowest_rank_pure(reply: PointReply) -> float:
    """The own pure time (us) of the rank with the longest own overlapped time: IMB-NBC's t_pure is that rank's."""
    times, pure = reply.overlapped_us_ranks, reply.pure_us_ranks
    if not times or len(times) != len(pure):
        return math.nan
    return pure[max(range(len(times)), key=times.__getitem__)]


def median_ci(values: list[float]) -> tuple[float, float]:
    """The 95 % interval of the median over rounds (the engine's own, by order statistics): single rounds at
    a few points move by tens of points, so whether a median gap lies within the goal's 10 points is read
    with its interval."""
    return median_confidence_interval(values) if len(values) >= 2 else (math.nan, math.nan)


def tunempi_point(mpi: str, collective: str, sizes: list[int], ranks: int, db: Path, back_to_back: int
                  ) -> tuple[dict[int, float], dict[int, float], RankOverlaps]:
    """(size -> latency in us, size -> overlap %, each rank's own overlap % by size): two engine runs, the
    library's default algorithm."""
    listener, by_rank = Medians(), RankOverlaps()

    def options(settings: MeasureSettings, overlap: bool) -> BenchOptions:
        return BenchOptions(mpi=mpi, collectives=collective, algorithms="default", ranks=ranks, db=str(db),
                            sizes=",".join(str(s) for s in sizes), force=True, overlap=overlap, settings=settings)

    run_bench(options(MeasureSettings(time_cap_s=0.5, back_to_back=back_to_back), False), listener)
    report = run_bench(options(MeasureSettings(time_cap_s=0.5), True), by_rank)
    return listener.by_size, {row.msg_bytes: row.overlap_pct for row in report.overlap}, by_rank


def imb_point(library: MPILibrary, imb: Path, collective: str, sizes: list[int], ranks: int, workdir: Path
              ) -> tuple[dict[int, float], dict[int, float]]:
    """(size -> t_pure in us, size -> overlap %) from one IMB-NBC launch under `library`'s mpiexec."""
    stdout = run_imb(library, imb, IMB_NAMES[collective], sizes, ranks, workdir)
    pure: dict[int, float] = {}
    overlap: dict[int, float] = {}
    for line in stdout.splitlines():
        if match := _ROW.match(line):
            size = int(match.group(1))
            pure[size], overlap[size] = float(match.group(4)), float(match.group(6))
    return pure, overlap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpi", default="impi", choices=["impi", "mpich"])
    parser.add_argument("--collectives", default=",".join(IMB_NAMES))
    parser.add_argument("--sizes", default="8,1KiB,64KiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--back-to-back", type=int, default=100)
    args = parser.parse_args()
    library = resolve_library(args.mpi)
    imb = resolve_library("impi").prefix / "bin" / "IMB-NBC"
    collectives = [c for c in args.collectives.split(",") if c]
    unknown = [c for c in collectives if c not in IMB_NAMES]
    if unknown:
        parser.error(f"IMB-NBC has no {', '.join(unknown)}; valid: {', '.join(IMB_NAMES)}")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    latency: dict[tuple[str, int], list[float]] = {}
    overlap: dict[tuple[str, int], list[float]] = {}
    ranks_overlap: dict[tuple[str, int], list[tuple[float, ...]]] = {}  # tunempi, each rank's own
    imb_overlap: dict[tuple[str, int], list[float]] = {}
    slowest_gap: dict[tuple[str, int], list[float]] = {}  # tunempi's slowest rank's own overlap - IMB-NBC's
    pure_ratio: dict[tuple[str, int], list[float]] = {}  # that rank's own pure time / IMB-NBC's t_pure
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for round_ in range(args.rounds):
            for collective in collectives:
                tools = ["tunempi", "imb"]
                rng.shuffle(tools)
                mine = RankOverlaps()
                got: dict[str, tuple[dict[int, float], dict[int, float]]] = {}
                for tool in tools:
                    if tool == "tunempi":
                        lat, ovl, mine = tunempi_point(args.mpi, collective, sizes, args.ranks,
                                                       work / "db.sqlite", args.back_to_back)
                        got[tool] = (lat, ovl)
                    else:
                        got[tool] = imb_point(library, imb, collective, sizes, args.ranks, work)
                for size in sizes:
                    ours, theirs = got["tunempi"], got["imb"]
                    if size in mine.by_size:
                        ranks_overlap.setdefault((collective, size), []).append(mine.by_size[size])
                    if size in mine.slowest and size in theirs[1]:
                        slowest_gap.setdefault((collective, size), []).append(mine.slowest[size] - theirs[1][size])
                    if size in mine.slowest_pure and theirs[0].get(size) and not math.isnan(mine.slowest_pure[size]):
                        pure_ratio.setdefault((collective, size), []).append(mine.slowest_pure[size] / theirs[0][size])
                    if size in ours[0] and theirs[0].get(size):
                        latency.setdefault((collective, size), []).append(ours[0][size] / theirs[0][size])
                    if size in ours[1] and size in theirs[1]:
                        overlap.setdefault((collective, size), []).append(ours[1][size] - theirs[1][size])
                        imb_overlap.setdefault((collective, size), []).append(theirs[1][size])
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{library.name}, {args.ranks} ranks, {args.rounds} interleaved rounds, the library's default: "
          f"tunempi latency (back_to_back={args.back_to_back}) / IMB-NBC t_pure; overlap tunempi - IMB-NBC")
    print("overlap: tunempi's (mean over ranks) - IMB-NBC's; IMB: IMB-NBC's; by rank: each tunempi rank's own; "
          "slowest: the own overlap of tunempi's rank with the longest overlapped time (IMB's choice) - IMB's; "
          "pure: that rank's own pure time / IMB-NBC's t_pure (one call between barriers, as IMB times it)")
    print("[low, high]: a 95 % interval of the median over rounds (order statistics)")
    print(f"{'collective':<11} {'size':>7} {'latency':>8} {'overlap':>8} {'[low, high]':>15} {'IMB':>5} {'by rank':>11} "
          f"{'slowest':>8} {'[low, high]':>15} {'pure':>6}  per round (latency | overlap | slowest)")
    ratios, gaps, slows, pures = [], [], [], []
    for key in sorted(set(latency) | set(overlap)):
        ratio = statistics.median(latency[key]) if key in latency else math.nan
        gap = statistics.median(overlap[key]) if key in overlap else math.nan
        ratios += [ratio] if key in latency else []
        gaps += [gap] if key in overlap else []
        imb_pct = statistics.median(imb_overlap[key]) if key in imb_overlap else math.nan
        by_rank = "/".join(f"{statistics.median(r):.0f}" for r in zip(*ranks_overlap.get(key, []), strict=True))
        slow = statistics.median(slowest_gap[key]) if key in slowest_gap else math.nan
        slows += [slow] if key in slowest_gap else []
        pure = statistics.median(pure_ratio[key]) if key in pure_ratio else math.nan
        pures += [pure] if key in pure_ratio else []
        gap_low, gap_high = median_ci(overlap.get(key, []))
        slow_low, slow_high = median_ci(slowest_gap.get(key, []))
        print(f"{key[0]:<11} {format_size(key[1]):>7} {ratio:8.3f} {gap:+8.1f} {f'[{gap_low:+.1f}, {gap_high:+.1f}]':>15} "
              f"{imb_pct:5.1f} {by_rank or '-':>11} {slow:+8.1f} {f'[{slow_low:+.1f}, {slow_high:+.1f}]':>15} {pure:6.3f}  "
              + " ".join(f"{v:.3f}" for v in latency.get(key, [])) + " | "
              + " ".join(f"{v:+.1f}" for v in overlap.get(key, [])) + " | "
              + " ".join(f"{v:+.1f}" for v in slowest_gap.get(key, [])))
    missing = [f"{c} {format_size(s)}" for c in collectives for s in sizes if (c, s) not in latency]
    if missing:
        print(f"not measured by both tools in any round: {', '.join(missing)}")
    if not ratios:
        print("no point measured by both tools")
        return 1
    geo = geo_mean(ratios) or math.nan
    geo_pure = geo_mean(pures) or math.nan
    # The goals are read like for like: the same rank's figures as IMB-NBC prints, its latency timed as IMB
    # times it (one call between MPI_Barrier calls). tunempi's own aggregates follow: the mean over ranks
    # (OSU's averaging) differs from IMB's one rank by tens of points where the ranks of a rooted collective
    # differ, and back-to-back calls pipeline where IMB's barrier-separated ones do not.
    print(f"like for like (the rank IMB-NBC prints): latency {geo_pure:.3f} (geometric mean of {len(pures)}; "
          f"goal 0.9-1.1), largest overlap difference {max(slows, key=abs, default=math.nan):+.1f} points "
          f"(goal within 10)")
    print(f"tunempi's own aggregates: latency back to back {geo:.3f} (geometric mean of {len(ratios)}), "
          f"overlap mean over ranks: largest difference {max(gaps, key=abs, default=math.nan):+.1f} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
