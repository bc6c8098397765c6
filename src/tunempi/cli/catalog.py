"""`tunempi catalog add|build|coverage|campaign|module`: a site catalog of one library build's tunings (docs/catalog.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from tunempi.cli.paths import directory_option
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP

if TYPE_CHECKING:
    from tunempi.catalog.campaign import CampaignJob
    from tunempi.catalog.coverage import CoverageReport
    from tunempi.catalog.store import Catalog

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


JobsOption = Annotated[Path | None, typer.Option(help="CSV of the site's jobs: nodes, ppn, node_hours.")]
SacctOption = Annotated[bool, typer.Option(help="Read finished jobs from Slurm's `sacct` (needs accounting "
                                                "storage).")]
JobcompOption = Annotated[Path | None, typer.Option(help="Read finished jobs from slurmctld's job completion log "
                                                         "(JobCompType=jobcomp/filetxt), for Slurm without sacct.")]


def site_coverage(catalog: Path | None, jobs: Path | None, sacct: bool, jobcomp: Path | None,
                  mpi: str | None, top: int) -> tuple[Catalog, CoverageReport]:
    """The catalog and the coverage of the site's job layouts (from exactly one of the three sources) by the
    rule sets `catalog build` writes for it; `top` (how many to name next) checked with the rest."""
    from tunempi.catalog.coverage import catalog_coverage, read_jobs_csv
    from tunempi.catalog.jobs import read_jobcomp, read_sacct
    from tunempi.catalog.store import Catalog, catalog_dir

    if sum((jobs is not None, sacct, jobcomp is not None)) != 1:
        raise UsageError("give exactly one of --jobs FILE.csv, --sacct, --jobcomp FILE")
    if top < 1:
        raise UsageError(f"--top must be at least 1 (the layouts to name as worth tuning next), got {top}")
    found = Catalog.load(catalog_dir(catalog))
    layouts = read_jobs_csv(jobs) if jobs is not None else read_jobcomp(jobcomp) if jobcomp else read_sacct()
    if not layouts:
        raise UsageError("no finished jobs found in the records given")
    return found, catalog_coverage(found, layouts, mpi=mpi)


@catalog_app.command("coverage")
def coverage_command(
    catalog: CatalogOption = None,
    jobs: JobsOption = None,
    sacct: SacctOption = False,
    jobcomp: JobcompOption = None,
    top: Annotated[int, typer.Option(help="How many layouts to name as worth tuning next.")] = 5,
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}); default: the catalog's. "
                                            "It must be that build: its files decide what the rules reach.")]
    = None,
) -> None:
    """Each job layout measured, interpolated, extended or left to the library's default by the files `catalog
    build` writes, weighted by node-hours."""
    found, report = site_coverage(catalog, jobs, sacct, jobcomp, mpi, top)
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


@catalog_app.command("campaign")
def campaign_command(
    work: Annotated[Path, typer.Option(help="Directory of the jobs: WORK/NxP holds a layout's script, Slurm's "
                                            "output and its tuning.", callback=directory_option)],
    catalog: CatalogOption = None,
    jobs: JobsOption = None,
    sacct: SacctOption = False,
    jobcomp: JobcompOption = None,
    top: Annotated[int, typer.Option(help="How many of the layouts worth tuning next to submit.")] = 5,
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}) the jobs tune, and whose "
                                            "files coverage reads (it must be the catalog's build); default: the "
                                            "catalog's (its mpicc in every script), tune's for an empty "
                                            "catalog.")] = None,
    db: Annotated[Path | None, typer.Option(help="Results database the jobs' tunes write (default: "
                                                 "$TUNEMPI_DB in the job, else a per-user file).")] = None,
    tune_args: Annotated[str, typer.Option(help="More options for each job's `tunempi tune`, as one shell string "
                                                "(e.g. '--collectives allreduce,bcast --timeout 20m').")] = "",
    verify_args: Annotated[str, typer.Option(help="More options for each job's `tunempi verify`, as one shell "
                                                  "string (e.g. '--repeats 4').")] = "",
    sbatch_option: Annotated[list[str] | None, typer.Option(
        "--sbatch-option", help="An #SBATCH line for every job (repeatable), e.g. --sbatch-option=--time=1:00:00 "
        "--sbatch-option=--partition=batch.")] = None,
    replace: Annotated[bool, typer.Option(help="Each job's `catalog add --replace`.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the batch scripts; submit nothing.")] = False,
    wait: Annotated[bool, typer.Option(help="Wait for every job to end (sbatch --wait); exit 1 if one "
                                            "failed.")] = False,
) -> None:
    """Submit the layouts `catalog coverage` names as worth tuning next as Slurm batch jobs, each running tune,
    verify and catalog add into this catalog (docs/catalog.md, 'campaign')."""
    from tunempi.catalog.campaign import TUNE_SET, VERIFY_SET, batch_script, jobs_library, split_args, submit
    from tunempi.catalog.store import catalog_dir

    tune_argv = split_args(tune_args, "--tune-args", TUNE_SET)
    verify_argv = split_args(verify_args, "--verify-args", VERIFY_SET)
    # the catalog's own build unless --mpi names one (then it must be that build: its adds would refuse another)
    found, report = site_coverage(catalog, jobs, sacct, jobcomp, mpi, top)
    layouts = [item.layout for item in report.next_to_tune(top)]
    if not layouts:
        _out.print("every job layout is measured or interpolated by the catalog: nothing to tune")
        return
    library = jobs_library(found, mpi)  # the catalog's build, not tune's default library
    made = [batch_script(layout, work=work, catalog=catalog_dir(catalog), tune_args=tune_argv,
                         verify_args=verify_argv, mpi=library, db=db, replace=replace, sbatch_options=sbatch_option or ())
            for layout in layouts]
    check_command_args(made[0], tune_argv, verify_argv)
    if dry_run:
        for job in made:
            _out.print(f"# {job.script_path}", soft_wrap=True)
            _out.print(job.script, end="", soft_wrap=True, markup=False)
        return
    failed = 0
    for done in submit(made, wait=wait):
        if not done.job_id:
            failed += 1
            _out.print(f"{done.job.name}: sbatch refused {done.job.script_path} (exit {done.returncode}): "
                       f"{done.message}", markup=False)
        elif done.returncode is None:
            _out.print(f"{done.job.name}: submitted job {done.job_id} ({done.job.script_path})")
        else:
            failed += done.returncode != 0
            _out.print(f"{done.job.name}: job {done.job_id} "
                       f"{'done' if done.returncode == 0 else f'failed (exit {done.returncode})'}: see "
                       f"{done.job.directory}/slurm-{done.job_id}.out")
    if failed:
        raise typer.Exit(1)


def check_command_args(job: CampaignJob, tune_argv: list[str], verify_argv: list[str]) -> None:
    """UsageError unless `tunempi tune` and `verify` parse the options a job gives them (nothing is run): a typo
    found now, not in every batch job."""
    import typer.main

    from tunempi.catalog.campaign import layout_args
    from tunempi.cli.tune import tune_command
    from tunempi.cli.verify import verify_command

    tuning = str(job.directory / "tuning")
    for name, function, argv in (("tune", tune_command, ["--out", tuning, *layout_args(job.layout), *tune_argv]),
                                 ("verify", verify_command, ["--tuning", tuning, *verify_argv])):
        app = typer.Typer(add_completion=False)
        app.command(name)(function)
        try:  # an app of one command is that command
            typer.main.get_command(app).make_context(name, argv)
        except Exception as exc:  # click's parse errors; their message says what is wrong
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            raise UsageError(f"--{name}-args: `tunempi {name}` would refuse it: {message}") from None


@catalog_app.command("module")
def module_command(
    tuning: Annotated[Path, typer.Option(help="The tuning directory `catalog build` wrote.",
                                         callback=directory_option)],
    out: Annotated[Path, typer.Option(help="The modulefile to write (e.g. MODULEPATH/tunempi/site).")],
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library ({SPEC_HELP}); default: the "
                                            "tuning's.")] = None,
) -> None:
    """Write a Tcl modulefile (Environment Modules, Lmod) setting what `tunempi run --print-env` prints, less the
    variables a module cannot bound to the layouts measured (Intel MPI's I_MPI_ADJUST_<COLL>, Open MPI's
    coll/libnbc values: `tunempi run` sets those per job)."""
    from tunempi.catalog.module import left_out_text, module_env, modulefile_text, write_modulefile
    from tunempi.mpi.discovery import adapter_for
    from tunempi.tune.apply import check_tuning_files, tuning_library
    from tunempi.tune.manifest import Manifest

    manifest = Manifest.load(tuning)
    library = tuning_library(manifest, mpi)
    check_tuning_files(manifest, library)
    env, left = module_env(manifest, adapter_for(library))
    if not env:
        raise UsageError(f"{tuning}: no module written, it would set nothing: " + (
            left_out_text(manifest, left) if left else "its manifest activates no variables"))
    notes = [left_out_text(manifest, left)] if left else []
    path = write_modulefile(out, modulefile_text(
        env, what=f"tunempi tuning {manifest.directory.resolve()} for {library.name}", notes=notes))
    for note in notes:
        _out.print(note, markup=False)
    _out.print(f"wrote {path}: {len(env)} variables; `module use {path.parent}` then `module load {path.name}`")


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
