"""`tunempi catalog add|build|coverage|module`: a site catalog of one library build's tunings (docs/catalog.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tunempi.cli.paths import directory_option
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP

catalog_app = typer.Typer(help="A site catalog: tunings of many layouts of one library build, built into one.",
                          no_args_is_help=True)
_out = Console(highlight=False)

CatalogOption = Annotated[Path | None, typer.Option(
    "--catalog", help="Catalog directory (env TUNEMPI_CATALOG; default $XDG_DATA_HOME/tunempi/catalog).",
    show_default=False, callback=directory_option)]


@catalog_app.command("add")
def add_command(
    source: Annotated[Path, typer.Argument(help="A tuning directory written by `tunempi tune` (and verify), or a "
                                                "results store (the SQLite file tune and bench write, --db).")],
    catalog: CatalogOption = None,
    replace: Annotated[bool, typer.Option(help="Let this tuning's winners replace cells the catalog measured "
                                               "with another winner (default: refuse).")] = False,
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"A store only: the library build whose runs to add "
                                            f"({SPEC_HELP}); default: the catalog's, else the default library.")]
    = None,
    system: Annotated[str, typer.Option(help="A store only: the system name its runs were stored under "
                                             "(tune --system).")] = "",
) -> None:
    """Add a tuning directory's measured cells, or tune's selection from a results store's runs of one library
    build, to the catalog (refused, nothing changed: another library build, an unreadable manifest or store, an
    empty store, a measured cell with another winner without --replace)."""
    from tunempi.catalog.store import add_store, add_tuning, catalog_dir

    directory = catalog_dir(catalog)

    def busy(lock: Path) -> None:
        _out.print(f"another catalog add holds {lock}: waiting for it")

    if not source.exists():
        raise UsageError(f"{source}: no such tuning directory or results store")
    if source.is_dir():
        if mpi is not None or system:
            raise UsageError("--mpi and --system are for a results store; a tuning directory names its library")
        result = add_tuning(directory, source, replace_conflicts=replace, on_busy=busy)
    else:
        result = add_store(directory, source, mpi=mpi, system=system, replace_conflicts=replace, on_busy=busy)
    library = result.catalog.library
    _out.print(f"catalog {directory} ({library.name if library else '?'}): {result.added} cells added, "
               f"{result.refreshed} measured again with the same winner, {len(result.replaced)} replaced; "
               f"{len(result.catalog.entries)} cells at {len(result.catalog.layouts())} layouts")
    for old, new in result.replaced:
        _out.print(f"  replaced {old.cell.collective} {old.cell.msg_bytes} B at {old.cell.ranks} ranks "
                   f"({old.cell.nodes}x{old.cell.ppn}): {old.algorithm} -> {new.algorithm}")


@catalog_app.command("build")
def build_command(
    out: Annotated[Path, typer.Option(help="The tuning directory to write.", callback=directory_option)],
    catalog: CatalogOption = None,
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}); default: the catalog's. "
                                            "It must be that build.")] = None,
    smoke: Annotated[bool, typer.Option(help="Smoke-check the files in the library before they count.")] = True,
) -> None:
    """Write one tuning directory from the catalog (files smoke-checked in the real library, as tune's)."""
    from tunempi.catalog.build import build_tuning
    from tunempi.catalog.store import Catalog, catalog_dir

    built = build_tuning(Catalog.load(catalog_dir(catalog)), out, mpi=mpi, smoke=smoke,
                         on_writing=lambda ranks: _out.print(
                             f"writing the files, smoke-checked at {', '.join(map(str, ranks))} ranks"))
    manifest = built.manifest
    _out.print(f"wrote {manifest.directory}: {manifest.tuned_cells()} tuned cells of {len(manifest.selection)} "
               f"at {len(manifest.scales)} layouts ({', '.join(f'{n}x{p}' for _, n, p in manifest.scales)}); "
               f"`tunempi run --tuning {manifest.directory} -- ...` applies it")
    for entry in built.shadowed:
        _out.print(f"  not in the files: {entry.cell.collective} {entry.cell.msg_bytes} B at {entry.cell.nodes}x"
                   f"{entry.cell.ppn} measured {entry.algorithm}; the files key on communicator size only, where "
                   "the fullest nodes' winner acts")


@catalog_app.command("coverage")
def coverage_command(
    catalog: CatalogOption = None,
    jobs: Annotated[Path | None, typer.Option(help="CSV of the site's jobs: nodes, ppn, node_hours.")] = None,
    sacct: Annotated[bool, typer.Option(help="Read finished jobs from Slurm's `sacct` (needs accounting "
                                             "storage).")] = False,
    jobcomp: Annotated[Path | None, typer.Option(help="Read finished jobs from slurmctld's job completion log "
                                                      "(JobCompType=jobcomp/filetxt), for Slurm without sacct.")]
    = None,
    top: Annotated[int, typer.Option(help="How many layouts to name as worth tuning next.")] = 5,
) -> None:
    """Each job layout measured, interpolated or left to the library's default, weighted by node-hours."""
    from tunempi.catalog.build import acting_entries
    from tunempi.catalog.coverage import coverage, read_jobs_csv
    from tunempi.catalog.jobs import read_jobcomp, read_sacct
    from tunempi.catalog.store import Catalog, catalog_dir
    from tunempi.tune.files import rule_sets_for, selection_table

    if sum((jobs is not None, sacct, jobcomp is not None)) != 1:
        raise UsageError("give exactly one of --jobs FILE.csv, --sacct, --jobcomp FILE")
    found = Catalog.load(catalog_dir(catalog))
    layouts = read_jobs_csv(jobs) if jobs is not None else read_jobcomp(jobcomp) if jobcomp else read_sacct()
    if not layouts:
        raise UsageError("no finished jobs found in the records given")
    acting, _ = acting_entries(found.entries)
    rule_sets = rule_sets_for(selection_table({e.cell: e.algorithm for e in acting})) if acting else {}
    report = coverage(layouts, found.layouts(), rule_sets)
    total = sum(c.layout.node_hours for c in report.layouts)
    _out.print(f"{len(report.layouts)} job layouts, {total:.1f} node-hours; catalog layouts "
               f"{', '.join(f'{n}x{p}' for _, n, p in found.layouts()) or 'none'}")
    _out.print(f"{'nodes':>6} {'ppn':>4} {'ranks':>6} {'node-hours':>11}  basis")
    for item in sorted(report.layouts, key=lambda c: (c.layout.ranks, c.layout.nodes)):
        job = item.layout
        _out.print(f"{job.nodes:>6} {job.ppn:>4} {job.ranks:>6} {job.node_hours:>11.2f}  {item.basis}")
    _out.print("node-hours: " + ", ".join(f"{basis} {share * 100:.1f} %" for basis, share in report.shares().items()))
    for item in report.next_to_tune(top):
        _out.print(f"worth tuning next: {item.layout.nodes}x{item.layout.ppn} ({item.layout.ranks} ranks, "
                   f"{item.layout.node_hours:.2f} node-hours, now {item.basis})")


@catalog_app.command("module")
def module_command(
    tuning: Annotated[Path, typer.Option(help="The tuning directory `catalog build` wrote.",
                                         callback=directory_option)],
    out: Annotated[Path, typer.Option(help="The modulefile to write (e.g. MODULEPATH/tunempi/site).")],
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}); default: the "
                                            "tuning's.")] = None,
) -> None:
    """Write a Tcl modulefile (Environment Modules, Lmod) setting what `tunempi run --print-env` prints."""
    from tunempi.catalog.module import modulefile_text, write_modulefile
    from tunempi.tune.apply import check_tuning_files, tuning_library
    from tunempi.tune.manifest import Manifest

    manifest = Manifest.load(tuning)
    library = tuning_library(manifest, mpi)
    check_tuning_files(manifest, library)
    env = manifest.activation_env()
    if not env:
        raise UsageError(f"{tuning}: its manifest activates no variables: nothing for a module to set")
    path = write_modulefile(out, modulefile_text(
        env, what=f"tunempi tuning {manifest.directory.resolve()} for {library.name}"))
    _out.print(f"wrote {path}: {len(env)} variables; `module use {path.parent}` then `module load {path.name}`")


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
