"""`tunempi advise --profile FILE [--mpi SPEC] [--db PATH]`: what is worth tuning for this application."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tunempi.collectives import VECTOR_COLLECTIVES
from tunempi.config import resolve, resolve_db
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.vendor import ThresholdKnob, VendorAdapter
from tunempi.profile.advise import (
    TUNABLE_COLLECTIVES,
    Advice,
    Cell,
    PerformanceSource,
    PlanStep,
    advise,
    application_plan,
    count_shape_text,
    eager_search_space,
    eager_verdict,
    not_tunable,
    shares_caveat,
    tune_command,
    unselectable_here,
)
from tunempi.profile.nonblocking import ApplicationObjective, application_objective, nonblocking_uses
from tunempi.profile.reader import Profile, load_profile
from tunempi.report.console import output_console
from tunempi.units import format_size

_out = output_console()


def _us(value: float) -> str:
    return f"{value:.2f}us"


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f}s"
    return f"{value * 1e3:.2f}ms" if value >= 1e-3 else f"{value * 1e6:.2f}us"


def _source_text(source: str, log_std: float | None) -> str:
    if source == "predicted" and log_std is not None:
        return f"predicted (x/÷{min(pow(2.718281828, log_std), 99):.2f})"
    return source


def _unknown_text(collective: str) -> str:
    return "unknown: not measured" if collective in TUNABLE_COLLECTIVES else "not covered by tune"


def print_advice(advice: Advice, *, top: int, console: Console, min_saving: float) -> None:
    table = Table(title="Collectives the application uses (most predicted saving first)")
    for column in ("collective", "ranks", "nodes x ppn", "size", "calls/rank", "% of run", "library default",
                   "default", "best known", "source", "saving/run"):
        table.add_column(column, justify="left" if column in ("collective", "size", "library default",
                                                               "best known", "source") else "right",
                         no_wrap=column in ("collective", "source"))
    for cell in advice.cells[: top if top > 0 else None]:
        row = cell.usage
        perf = cell.performance
        scale = f"{row.nodes}x{row.ppn}" if row.nodes >= 1 else "?"
        table.add_row(
            row.collective, str(row.comm_size), scale, format_size(row.msg_size),
            f"{cell.calls_per_rank:.0f}", f"{100 * cell.share_of_run:.1f}%",
            (perf.default_algorithm if perf and perf.default_algorithm else "library default"),
            _us(perf.default_us) if perf else "-",
            (f"{perf.best_algorithm} {_us(perf.best_us)}" if perf else "-"),
            _source_text(perf.source, perf.log_std) if perf else _unknown_text(row.collective),
            _seconds(cell.saving_s) if perf else "-",
        )
    console.print(table)
    uncovered: dict[str, float] = {}
    for cell in advice.cells:
        if cell.usage.collective not in TUNABLE_COLLECTIVES:
            uncovered[cell.usage.collective] = uncovered.get(cell.usage.collective, 0.0) + cell.share_of_run
    if uncovered:
        console.print("not covered by `tunempi tune` (it benchmarks no algorithms for these): " + ", ".join(
            f"{name} ({100 * share:.1f}% of the run)" for name, share in sorted(uncovered.items(), key=lambda kv: -kv[1])))
    if advice.worth_tuning:
        savings = ", ".join(f"{name} {_seconds(advice.saving_by_collective[name])}" for name in advice.worth_tuning)
        console.print(f"worth tuning (predicted saving per run, at least {100 * min_saving:g}% of the run time): "
                      f"{savings}")
    else:
        console.print(f"no collective is worth tuning: the known savings are below {100 * min_saving:g}% of the "
                      "run time (or nothing is known about the cells it uses)")


def print_tune_command(advice: Advice, mpi_spec: str, db: str | None, console: Console,
                       profile: Path | None = None) -> None:
    command = tune_command(advice, mpi_spec, db=db, profile=str(profile) if profile is not None else None)
    if command is None:
        if advice.worth_tuning:
            console.print(f"  `tunempi tune` does not take {', '.join(advice.worth_tuning)} (barrier, which moves no "
                          "data, or a collective the bench engine cannot measure)")
        return
    console.print("  tune them, at the sizes and scales this application uses:")
    console.print(f"  [bold]{escape(command.text)}[/]", soft_wrap=True)
    if command.left_out:
        console.print(f"  (`tunempi tune` does not take {', '.join(command.left_out)})")


def eager_advice(profile: Profile, adapter: VendorAdapter, library: MPILibrary, space_out: Path | None,
                 console: Console) -> None:
    from tunempi.search.space import parse_toml

    verdict = eager_verdict(profile.p2p)
    share = f"{100 * verdict.fraction:.0f}% of point-to-point bytes are in 2KiB - 64KiB"
    if not verdict.search or verdict.busiest is None:
        console.print(f"eager limit: not worth searching ({share}; the rule asks for at least "
                      f"{100 * verdict.threshold:.0f}%)")
        return
    # Same-node knobs where some node hosted two ranks or more, cross-node ones where there were nodes.
    hosts = {str(h): int(n) for h, n in (profile.header.get("hosts") or {}).items()}
    multi_node = len(hosts) > 1 if hosts else int(profile.header.get("nodes") or 1) > 1
    shared_node = any(n >= 2 for n in hosts.values()) if hosts else True
    knobs: list[ThresholdKnob] = adapter.eager_threshold_knobs(intra_node=shared_node, inter_node=multi_node)
    console.print(f"eager limit: [bold]worth searching[/] ({share}; busiest {verdict.busiest.label}): "
                  f"search {format_size(verdict.low)} - {format_size(verdict.high)} on a log scale")
    if not knobs:
        console.print(f"  but tunempi knows no threshold knob for {library.name} ({library.device or 'transport unknown'})")
        return
    for knob in knobs:
        default = f"default {format_size(knob.default)}" if knob.default is not None else "default set by the transport"
        console.print(f"  {knob.name}: {knob.transport}, {knob.locality}, {default}")
    where = "on one node" if not multi_node else f"on {profile.header.get('nodes')} nodes"
    text = eager_search_space(verdict, knobs, library=library.name,
                              note=f"the application ran {where}: knobs of the transports it used")
    if text is None:
        console.print("  no knob can take the searched range within the library's limits: nothing to search")
        return
    parse_toml(text, str(space_out or "<advice>"))  # what we hand out must load
    if space_out is None:
        console.print("  search space (write it with --space-out FILE):")
        console.print(escape(text), soft_wrap=True)
        return
    space_out.parent.mkdir(parents=True, exist_ok=True)
    space_out.write_text(text)
    ranks = profile.header.get("ranks", "N")
    program = shlex.join(str(a) for a in profile.header.get("command", ["./app"]))
    console.print(f"  search space written to {space_out}; run it with")
    console.print(f"  [bold]{escape(f'tunempi search --space {space_out} -- mpiexec -n {ranks} {program}')}[/]",
                  soft_wrap=True)


def _store_source(db_path: Path, library: MPILibrary, adapter: VendorAdapter, collectives: set[str],
                  console: Console) -> PerformanceSource:
    from tunempi.profile.sources import MeasuredCells, MeasuredOrPredicted, PredictedCells
    from tunempi.store.results import ResultStore

    if not db_path.exists():
        raise UsageError(f"no results database at {db_path}; give --db PATH (or set TUNEMPI_DB), or measure "
                         "first with `tunempi tune`")
    with ResultStore(db_path) as store:
        # a non-blocking call's profiled time runs from its start to its completion: its latency points (not
        # those measured for --objective time or overlap, whose figures include or exclude a computation)
        records = store.query(status="ok", collective=sorted(collectives), distribution="uniform",
                              objective="latency")
    own = [m for m in records if m.library_fingerprint == library.fingerprint]
    label = f"this build of {library.name}"
    if not own:  # e.g. the same version installed elsewhere, or imported from a dataset file
        own = [m for m in records if m.library == library.name]
        label = f"{library.name} (other builds or imports: {len({m.library_fingerprint for m in own})})"
    systems = sorted({m.system for m in own if m.system})
    console.print(f"measurements from {db_path}: {len(own)} runs of {label}"
                  + (f" on {', '.join(systems)}" if systems else ""))

    def default_choice(cell: Cell) -> str | None:
        return adapter.default_choice(cell.collective, cell.msg_bytes, cell.ranks, cell.nodes)

    return MeasuredOrPredicted(MeasuredCells(own, default_choice), PredictedCells(own, default_choice=default_choice))


def advise_command(
    profile: Path = typer.Option(..., "--profile", help="A profile written by `tunempi profile`."),
    mpi: str | None = typer.Option(None, "--mpi", help=f"MPI library the application runs with: {SPEC_HELP} "
                                   "(env TUNEMPI_MPI; default: the library the profile was recorded with)."),
    db: str | None = typer.Option(None, "--db", help="Results database (env TUNEMPI_DB; default a per-user file)."),
    dataset: Path | None = typer.Option(
        None, "--dataset", help="Use a benchmark dataset (CSV/CSV.gz) instead of the database; env TUNEMPI_DATASET."),
    space_out: Path | None = typer.Option(
        None, "--space-out", help="Write the eager-limit search space (TOML for `tunempi search`) here."),
    min_saving: float = typer.Option(0.01, "--min-saving", help="Worth tuning from this fraction of the run time."),
    top: int = typer.Option(25, "--top", help="Rows of the table (0: all)."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Also write the advice as JSON here: the non-blocking collectives' computation between "
        "start and wait and the objective that fits, what is not tunable, the plan."),
) -> None:
    """For every collective, size and scale the application uses: its share of the run, the library default,
    the best known algorithm (measured, or predicted by the model), the saving per run; what is worth
    tuning and the `tunempi tune` command for it; whether the eager limit is worth searching."""
    from tunempi.mpi.discovery import adapter_for, library_for_version_string

    if not 0 <= min_saving < 1:
        raise UsageError(f"--min-saving must be in [0, 1), got {min_saving}")
    app_profile = load_profile(profile)
    library = library_for_version_string(str(app_profile.header.get("library", "")), resolve(mpi, "MPI"))
    _out.print(f"library: {library.name} ({library.prefix})")
    adapter = adapter_for(library)
    collectives = {row.collective for row in app_profile.usage()}
    dataset_path = resolve(str(dataset) if dataset else None, "DATASET")
    if dataset_path is not None:
        from tunempi.profile.advise import DatasetSource
        from tunempi.store.dataset import iter_dataset

        rows = list(iter_dataset(dataset_path))
        source: PerformanceSource | None = DatasetSource(rows)
        measured_with = sorted({f"{row.library} ({row.system})" for row in rows})
        _out.print(f"measurements from {dataset_path}: {', '.join(measured_with) or 'none'}; "
                   f"advice for {library.name}: they apply only if they were measured with it")
    elif not resolve_db(db).exists():
        _out.print(f"no measurements yet (no results database at {resolve_db(db)}): the plan below is from the "
                   "profile alone")
        source = None
    else:
        source = _store_source(resolve_db(db), library, adapter, collectives, _out)
    spec = mpi or library.spec
    if source is not None:
        result = advise(app_profile, source, min_saving_fraction=min_saving)
        print_advice(result, top=top, console=_out, min_saving=min_saving)
        print_tune_command(result, spec, db if db else None, _out, profile)
    reasons = unselectable_here(adapter, library.name, collectives)
    for left in not_tunable(app_profile, reasons):
        _out.print(f"not tunable: {escape(left.text)}")
    for name, shapes in app_profile.count_shapes().items():  # what tune --from-profile measures them with
        measured = ("tune --from-profile measures it so" if name in VECTOR_COLLECTIVES
                    else "tune measures it with equal counts only")
        _out.print(f"count shape: {escape(count_shape_text(name, shapes))}; {measured}")
    implied = print_nonblocking(app_profile, _out)
    eager_advice(app_profile, adapter, library, space_out, _out)
    caveat = shares_caveat(app_profile)
    if caveat:
        _out.print(f"[yellow]caution:[/] {escape(caveat)}")
    plan = application_plan(app_profile, str(profile), spec, switches_per_call=adapter.switches_at_run_time(),
                            library_reasons=reasons)
    print_plan(plan, _out)
    if json_out is not None:
        document = {"profile": str(profile), "library": library.name,
                    "nonblocking": {"objective": implied.objective, "reason": implied.reason,
                                    "cells": [use.to_dict() for use in implied.uses]},
                    "not_tunable": [left.text for left in not_tunable(app_profile, reasons)], "caveat": caveat,
                    "plan": [{"kind": step.kind, "worth": step.worth, "why": step.why,
                              "commands": list(step.commands)} for step in plan]}
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(document, indent=1) + "\n")
        _out.print(f"advice written to {json_out}")


def print_nonblocking(profile: Profile, console: Console) -> ApplicationObjective:
    """One line per non-blocking cell of the profile: its computation between start and wait and the objective
    that fits it; then the objective `tune --from-profile` takes (profile/nonblocking.py)."""
    implied = application_objective(nonblocking_uses(profile))
    for use in implied.uses:
        console.print(f"non-blocking: {escape(use.text)}", soft_wrap=True, highlight=False)
    if implied.uses:
        taken = implied.objective or "time with the library default's latency as the computation (tune's default)"
        console.print(f"objective for the non-blocking collectives: {taken}: {escape(implied.reason)}; "
                      "`tune --from-profile` measures them so, each time cell with the application's own "
                      "computation (--objective overrides)", soft_wrap=True, highlight=False)
    return implied


def print_plan(steps: list[PlanStep], console: Console) -> None:
    """Which of tune / online / search is worth it for this application, and the commands, then compare."""
    console.print("[bold]plan for this application[/] (what each kind of tuning can act on, from the profile):")
    for step in steps:
        mark = "[green]worth it[/]" if step.worth else "[dim]not worth it[/]"
        if step.kind == "compare":
            mark = "[bold]then[/]" if step.worth else "[dim]nothing to compare[/]"
        console.print(f"  {step.kind}: {mark}: {escape(step.why)}")
        if step.worth:
            for command in step.commands:
                console.print(f"    [bold]{escape(command)}[/]", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_command)
