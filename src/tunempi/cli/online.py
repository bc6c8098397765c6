"""`tunempi online run|update|show|best`: online tuning inside application runs."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.table import Table

from tunempi.cli.paths import directory_option
from tunempi.collectives import parse_collectives
from tunempi.config import directory_setting, resolve
from tunempi.errors import MPIError, UsageError
from tunempi.online.state import DEFAULT_STATE_DIR, OnlineConfig
from tunempi.report.console import output_console

online_app = typer.Typer(
    no_args_is_help=True,
    help="Online tuning inside application runs: every collective call draws its algorithm from per-cell "
    "probabilities, batches of runs update them.\n\n"
    "tunempi online run -- mpiexec -n 8 ./app   (x10)   tunempi online update   tunempi online show",
)
_out = output_console()
_err = output_console(stderr=True)

_STATE_HELP = f"State directory (env TUNEMPI_ONLINE_STATE; default ./{DEFAULT_STATE_DIR})."
_MPI_HELP = "MPI library: install prefix, or 'mpich'/'openmpi' (embedded); env TUNEMPI_MPI."


def _state_dir(flag: str | None) -> Path:
    return directory_setting(resolve(flag, "ONLINE_STATE", DEFAULT_STATE_DIR) or DEFAULT_STATE_DIR, "--state")


def _library(mpi: str | None):
    from tunempi.mpi.discovery import resolve_library

    return resolve_library(mpi)


def _warnings_to_console() -> None:
    """Library warnings (corrupt probabilities, foreign records) shown to the user."""

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            _err.print(f"[yellow]warning:[/] {record.getMessage()}", highlight=False)

    logger = logging.getLogger("tunempi.online")
    if not any(isinstance(h, _Handler) for h in logger.handlers):
        logger.addHandler(_Handler(level=logging.WARNING))
        logger.propagate = False


def _parse_ranks(text: str) -> str:
    text = text.strip()
    if text == "all":
        return text
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ranks = []
    if not ranks or min(ranks) < 0:
        raise UsageError(f"--record-ranks {text!r}: valid: all, or world ranks like 0,4,8")
    return ",".join(str(r) for r in ranks)


def _from_profile(path: str, collectives: str | None, mpi: str | None) -> tuple[str, str, dict]:
    """(--collectives, --mpi, what the profile says of the non-blocking ones) from a profile: the collectives it
    calls that online switches, most time first, and the library it ran with (flags given as well win); the
    objective that fits its non-blocking collectives and their computations between start and wait
    (profile/nonblocking.py; OnlineConfig's fields)."""
    from tunempi.collectives import ONLINE_SWITCHABLE
    from tunempi.mpi.discovery import library_for_version_string
    from tunempi.profile.reader import load_profile

    profile = load_profile(path)
    library = library_for_version_string(str(profile.header.get("library", "")), resolve(mpi, "MPI"))
    used = [name for name, _, _ in profile.time_by_collective() if name in ONLINE_SWITCHABLE]
    if not used and not collectives:
        raise UsageError(f"{path}: the application calls none of the collectives online switches "
                         f"({', '.join(ONLINE_SWITCHABLE)})")
    from tunempi.profile.nonblocking import application_objective, computation_rows, nonblocking_uses

    chosen = collectives or ",".join(used)
    uses = nonblocking_uses(profile, parse_collectives(chosen))
    implied = application_objective(uses)
    nonblocking = {"objective": implied.objective or "", "objective_from": f"profile {path}" if implied.objective
                   else "", "computations": computation_rows(uses, path) if implied.objective == "time" else []}
    for use in uses:
        _out.print(f"  {use.text}", soft_wrap=True, highlight=False)
    return chosen, mpi or library.spec, nonblocking


def _say_nonblocking(config: OnlineConfig, switched: list[str], library_name: str) -> None:
    """What online's records of the non-blocking collectives measure, and which it cannot switch per call here."""
    from tunempi.collectives import is_nonblocking

    asked = [c for c in config.collectives if is_nonblocking(c)]
    if not asked:
        return
    started = [c for c in asked if c in switched]
    if started:
        fits = (f"the profile's objective: {config.objective}" if config.objective else
                "no profile: online best takes the computation from the records, which hold the waits' time")
        _out.print(f"  {', '.join(started)}: switched at their start; each call's record runs from the start to "
                   "the wait or test that completes it, i.e. start + the application's own computation + wait: the "
                   f"time objective with the application's computation, its latency where it waits right after "
                   f"starting ({fits})", soft_wrap=True, highlight=False)
    left = [c for c in asked if c not in switched]
    if left:
        _out.print(f"  not switched per call by {library_name}: {', '.join(left)} (the library offers no "
                   "algorithm choice for it at run time: its calls run the library's own)", soft_wrap=True,
                   highlight=False)


@online_app.command("run", context_settings={"allow_interspersed_args": False})
def run(
    command: list[str] = typer.Argument(..., help="The launch command, after --: mpiexec -n 8 ./app args"),
    state: str | None = typer.Option(None, "--state", help=_STATE_HELP),
    mpi: str | None = typer.Option(None, "--mpi", help=_MPI_HELP),
    collectives: str | None = typer.Option(
        None, "--collectives", help="Collectives to switch (comma list; new state only). Default: "
        "allreduce,bcast,allgather,alltoall,reduce,barrier."),
    sizes: str | None = typer.Option(None, "--sizes", help="Message-size range upper bounds, e.g. 64,4K,256K "
                                     "(new state only; default powers of 8 from 8 B to 8 MiB)."),
    layouts: list[str] = typer.Option([], "--layout", help="Extra cells to predict: RANKSxNODESxPPN or "
                                      "NODESxPPN (repeatable; new state only)."),
    record_ranks: str | None = typer.Option(None, "--record-ranks", help="Ranks that record: all, or 0,4,... "
                                            "(default 0)."),
    max_records: int | None = typer.Option(None, "--max-records", help="Records per run (default 10000)."),
    batch_runs: int | None = typer.Option(None, "--batch", help="Runs per batch (default 10)."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the shared random stream (new state only)."),
    runs: int = typer.Option(1, "--runs", min=1, help="Run the command this many times."),
    auto_update: bool = typer.Option(False, "--update", help="Run `online update` whenever a batch is full."),
    timeout: float | None = typer.Option(None, "--timeout", help="Kill a run after this many seconds."),
    from_profile: str | None = typer.Option(None, "--from-profile", help="A profile from `tunempi profile`: switch "
                                            "the collectives the application uses (new state only), with the "
                                            "library it ran with."),
) -> None:
    """Run the application with online tuning (creates the state directory on first use)."""
    from tunempi.online.cells import SizeRanges, parse_layouts
    from tunempi.online.run import CannotSwitch, open_state, run_online, run_untouched
    from tunempi.online.state import OnlineConfig, OnlineState
    from tunempi.online.update import update_state

    _warnings_to_console()
    if not command:
        raise UsageError("give the command after --, e.g. `tunempi online run -- mpiexec -n 8 ./app`")
    nonblocking: dict = {}
    if from_profile is not None:
        collectives, mpi, nonblocking = _from_profile(from_profile, collectives, mpi)
    from tunempi.mpi.discovery import launch_line_library

    library = launch_line_library(mpi, command)  # as every command resolves a launch line's library
    directory = _state_dir(state)
    existing = OnlineState(directory)
    config = existing.config if existing.exists() else OnlineConfig()
    if not existing.exists():
        if collectives:
            config.collectives = parse_collectives(collectives)
        if sizes:
            config.bounds = list(SizeRanges.parse(sizes).bounds)
        if layouts:
            config.layouts = parse_layouts(layouts)
        if seed is not None:
            config.seed = seed
        if nonblocking:
            config.objective = nonblocking["objective"]
            config.objective_from = nonblocking["objective_from"]
            config.computations = nonblocking["computations"]
    else:
        asked = {"--collectives": (parse_collectives(collectives) if collectives else None, config.collectives),
                 "--sizes": (list(SizeRanges.parse(sizes).bounds) if sizes else None, config.bounds),
                 "--layout": ([list(x) for x in parse_layouts(layouts)] if layouts else None,
                              [list(x) for x in config.layouts]),
                 "--seed": (seed, config.seed)}
        changed = [flag for flag, (new, old) in asked.items() if new is not None and new != old]
        if changed:
            raise UsageError(f"{directory} exists with other {', '.join(changed)}: these only apply to a new "
                             "state directory (use another --state)")
    if record_ranks is not None:
        config.record_ranks = _parse_ranks(record_ranks)
    if max_records is not None:
        config.max_records = max_records
    if batch_runs is not None:
        config.batch_runs = batch_runs
    try:
        online_state = open_state(directory, library, config)
    except CannotSwitch as exc:
        _err.print(f"[yellow]warning:[/] {exc}; running the command untouched", highlight=False)
        status = run_untouched(library, command, timeout=timeout)
        if status:
            raise typer.Exit(status) from None
        return
    switches = online_state.switches
    _out.print(f"online tuning of {', '.join(switches)} with {library.name}; state {directory}", highlight=False)
    _say_nonblocking(online_state.config, list(switches), library.name)
    status = 0
    for _ in range(runs):
        result = run_online(online_state, library, command, timeout=timeout)
        done = online_state.runs_in_batch
        what = "records written" if result.written else "[red]no records written[/]"
        _out.print(f"batch {result.batch} run {result.run} ({done}/{online_state.config.batch_runs}): exit "
                   f"{result.returncode}, {result.duration_s:.2f} s, {what}", highlight=False)
        if result.returncode != 0:
            status = result.returncode
            break
        if auto_update and done >= online_state.config.batch_runs:
            update = update_state(online_state)
            _out.print(f"updated: batch {update.probabilities.batch} from {update.records_used} records "
                       f"({update.cells_measured} cells measured, {update.cells_predicted} predicted)")
    if status:
        raise typer.Exit(status)


@online_app.command("update")
def update(
    state: str | None = typer.Option(None, "--state", help=_STATE_HELP),
    force: bool = typer.Option(False, "--force", help="Update even if the batch is not complete."),
    min_probability: float | None = typer.Option(None, "--min-prob", help="Floor for every algorithm "
                                                 "(default 0.03)."),
    max_probability: float | None = typer.Option(None, "--max-prob", help="Ceiling (default 0.94)."),
    settled_probability: float | None = typer.Option(None, "--settled-prob", help="Floor of a loser the runs "
                                                     "show clearly slower than the leader (default 0.01; "
                                                     "= --min-prob: the paper's behaviour)."),
    trim: float | None = typer.Option(None, "--trim", help="Leave this fraction of the slowest calls out of "
                                      "the estimates (default 0: stalls are real costs)."),
    estimator: str | None = typer.Option(None, "--estimator", help="Expected time per call of an algorithm: "
                                         "run_median (median over runs of each run's mean; default) or mean."),
) -> None:
    """Fit the per-algorithm models on the records and set the next batch's probabilities."""
    from tunempi.online.state import OnlineState
    from tunempi.online.update import update_state

    _warnings_to_console()
    online_state = OnlineState(_state_dir(state))
    changes = (min_probability, max_probability, settled_probability, trim, estimator)
    if any(change is not None for change in changes):
        config = online_state.config
        config.trim = config.trim if trim is None else trim
        config.estimator = config.estimator if estimator is None else estimator
        config.min_probability = config.min_probability if min_probability is None else min_probability
        config.max_probability = config.max_probability if max_probability is None else max_probability
        if settled_probability is not None:
            config.settled_probability = settled_probability
        online_state.set_config(config)
    result = update_state(online_state, force=force)
    _out.print(f"batch {result.probabilities.batch}: {len(result.probabilities.cells)} cells from "
               f"{result.records_used} records in {result.files_used} runs ({result.cells_measured} measured, "
               f"{result.cells_predicted} predicted by the model)")


def _seconds(ns: float | None) -> str:
    if ns is None:
        return "-"
    return f"{ns / 1e3:.2f}us" if ns < 1e6 else f"{ns / 1e6:.2f}ms"


@online_app.command("show")
def show(
    state: str | None = typer.Option(None, "--state", help=_STATE_HELP),
    cell: str | None = typer.Option(None, "--cell", help="Only cells whose key contains this (e.g. allreduce/8/)."),
    png: str | None = typer.Option(None, "--png", help="Write the plot here (default DIR/probabilities.png)."),
    max_cells: int = typer.Option(12, "--max-cells", help="Panels in the PNG."),
) -> None:
    """Probabilities per cell over the batches: a table and a PNG."""
    from tunempi.online.report import cell_histories, cell_label, plot_histories
    from tunempi.online.state import OnlineState

    _warnings_to_console()
    online_state = OnlineState(_state_dir(state))
    sizes = online_state.config.sizes
    histories = cell_histories(online_state, cell)
    _out.print(f"{online_state.library_name}: batch {online_state.batch}, {online_state.runs_in_batch} run(s) "
               "in it", highlight=False)
    if not histories:
        _out.print("no cells yet: all draws are uniform (run a batch, then `tunempi online update`)")
        return
    table = Table(title="Most likely algorithm per cell; its probability over the batches")
    for column in ("cell", "favourite", "p over batches", "est. time", "default"):
        table.add_column(column, justify="left" if column in ("cell", "favourite", "p over batches") else "right")
    for h in histories:
        name, _ = h.favourite
        trail = " > ".join(f"{p.get(name, 0):.2f}" for p in h.probabilities)
        table.add_row(cell_label(h.cell, sizes), name, trail, _seconds(h.estimates_ns.get(name)),
                      _seconds(h.estimates_ns.get("default")))
    _out.print(table)
    path = plot_histories(histories, sizes, Path(png) if png else online_state.dir / "probabilities.png",
                          max_cells=max_cells)
    _out.print(f"plot: {path}")


@online_app.command("best")
def best(
    out: str = typer.Option(..., "--out", help="Directory for the tuning files.",
                              callback=directory_option),
    state: str | None = typer.Option(None, "--state", help=_STATE_HELP),
    mpi: str | None = typer.Option(None, "--mpi", help=_MPI_HELP),
) -> None:
    """Write the best algorithm per cell with the tuning-file writers (and an env file, and a manifest: `run`,
    `report`, `verify` and `compare` take the directory like one `tune` writes)."""
    from tunempi.online.report import BestChoice, cell_label, write_best
    from tunempi.online.state import OnlineState

    _warnings_to_console()
    online_state = OnlineState(_state_dir(state))
    library = _library(mpi)
    choices, written = write_best(online_state, library, out)
    sizes = online_state.config.sizes
    table = Table(title="Best algorithm per cell (estimates; vs default: the same runs, paired)")
    for column in ("cell", "best", "time", "default", "vs default"):
        table.add_column(column, justify="left" if column in ("cell", "best", "vs default") else "right")
    versus = online_state.probabilities().versus_default

    def evidence(c: BestChoice) -> str:
        if not c.measured:
            return "predicted"
        found = versus.get(c.cell.key, {}).get(c.algorithm)
        if found is None:
            return "(default)" if c.algorithm == "default" else ""
        return f"{found['ratio']:.2f}x, p={found['p']:.2g}, {int(found['runs'])} runs"

    for c in choices:
        table.add_row(cell_label(c.cell, sizes), c.algorithm, _seconds(c.time_ns), _seconds(c.default_ns),
                      evidence(c))
    _out.print(table)
    for kind, path in written.files.items():
        _out.print(f"{kind}: {path}", highlight=False)
    for note in written.notes:
        _err.print(f"[yellow]note:[/] {note}", highlight=False)
    if not written.files:
        raise MPIError("nothing written")


def register(app: typer.Typer) -> None:
    app.add_typer(online_app, name="online")
