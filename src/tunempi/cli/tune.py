"""`tunempi tune`: tune collective algorithm selection on this allocation and write tuning files."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated

import typer

from tunempi.bench.protocol import MeasureSettings
from tunempi.cli.paths import directory_option
from tunempi.collectives import (
    DEFAULT_OBJECTIVE,
    DISTRIBUTIONS,
    OBJECTIVES,
    VECTOR_COLLECTIVES,
    check_distributions,
    parse_distributions,
)
from tunempi.config import resolve
from tunempi.errors import UsageError
from tunempi.mpi.discovery import SPEC_HELP
from tunempi.mpi.restrictions import COMMUTATIVE_OPS, CONTIGUOUS_DATATYPES, SAME_COUNTS
from tunempi.profile.reader import Profile
from tunempi.report.console import TuneProgress, output_console
from tunempi.strategy import DEFAULT_STRATEGY, STRATEGIES
from tunempi.tune.job import (
    DEFAULT_LAUNCHES,
    TUNE_SETTINGS,
    TuneOptions,
    plan_tune,
    run_tune,
)
from tunempi.tune.objective import ApplicationComputation
from tunempi.tune.plan import Prediction
from tunempi.units import parse_duration, parse_size


def tune_command(
    out: Annotated[Path, typer.Option(help="Directory for the tuning files and manifest.json.",
                                          callback=directory_option)],
    mpi: Annotated[str | None, typer.Option("--mpi", help=f"MPI library: {SPEC_HELP} (env TUNEMPI_MPI).")] = None,
    collectives: Annotated[str | None, typer.Option(
        help="Collectives, comma list (default allreduce,bcast,allgather,alltoall; the non-blocking iallreduce, "
             "ibcast, ialltoall, iallgather too).")] = None,
    objective: Annotated[str | None, typer.Option(
        help=f"What is minimised for a non-blocking collective: {', '.join(OBJECTIVES)} (time: start + a "
             "computation as long as the library default's latency in that cell + MPI_Wait, the same computation for "
             "every algorithm; latency: start + MPI_Wait; overlap: the time not hidden behind a computation as long "
             "as the algorithm's own latency). Default time; with --from-profile, the profile's: time with the "
             "application's own computation between start and wait, or latency where it waits right after "
             "starting (given here, this wins). Blocking collectives ignore it. Recorded in the manifest; verify "
             "compares under the same.")] = None,
    distribution: Annotated[list[str] | None, typer.Option(
        "--distribution", help="COLLECTIVE=DISTRIBUTION (repeatable or a comma list): how a vector collective's "
        f"blocks differ between ranks around the mean block where tune measures it: {', '.join(DISTRIBUTIONS)} "
        "(default uniform; docs/bench.md). Every point and verify's are measured so; recorded in the "
        "manifest.")] = None,
    nodes: Annotated[int | None, typer.Option(
        help="Nodes of the allocation (several need Slurm/PBS or TUNEMPI_HOSTFILE; default 1).")] = None,
    ppn: Annotated[int | None, typer.Option(help="Processes per node.")] = None,
    hostfile: Annotated[Path | None, typer.Option(
        help="Hosts of a multi-node tune, as mpirun/mpiexec take them (default: the Slurm/PBS allocation, else "
             "TUNEMPI_HOSTFILE).")] = None,
    ranks: Annotated[int | None, typer.Option(help="Processes (one node): tunes 2, 4, ... up to this.")] = None,
    max_msg: Annotated[str | None, typer.Option(help="Largest message size (OSU convention), e.g. 1MiB "
                                                "(default 1MiB).")] = None,
    min_msg: Annotated[str | None, typer.Option(help="Smallest message size (default 4).")] = None,
    from_profile: Annotated[Path | None, typer.Option(
        "--from-profile", help="A profile from `tunempi profile`: tune the collectives the application uses, at "
        "its layout and sizes, for the library it ran with (flags given as well win).")] = None,
    strategy: Annotated[str | None, typer.Option(
        help=f"Strategy: {', '.join(STRATEGIES)} (env TUNEMPI_STRATEGY; default {DEFAULT_STRATEGY}).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the strategy.")] = 0,
    timeout: Annotated[str, typer.Option(help="Stop tuning after this long (e.g. 10m) even if not converged.")]
    = "10m",
    topology: Annotated[str | None, typer.Option(
        help="serial (one benchmark at a time), local (all at once, one machine), slurm (Slurm's switches), "
             "pattern:REGEX (network "
             "groups from node names) or a file of 'node group' lines (env TUNEMPI_TOPOLOGY).")] = None,
    db: Annotated[str | None, typer.Option(help="Results database (default: $TUNEMPI_DB, else a per-user file).")]
    = None,
    time_cap: Annotated[str, typer.Option(help="Measuring time per point at most.")] = "100ms",
    rel_ci: Annotated[float, typer.Option(help="Stop a point when its median's 95% CI is within +-this.")] = 0.05,
    point_timeout: Annotated[str | None, typer.Option(help="Kill a launch when a point hangs this long.")] = None,
    smoke: Annotated[bool, typer.Option(help="Load the files into the library before reporting success.")] = True,
    launches: Annotated[int, typer.Option(
        "--launches", min=1, help="Launches every cell's contenders are measured in against the library's default "
        "before an override is written; undecided cells keep the default and are reported as ties (1: the "
        "exploring launch alone; docs/tune.md, 'Launches as blocks').")] = DEFAULT_LAUNCHES,
    assume_contiguous_datatypes: Annotated[bool, typer.Option(
        "--assume-contiguous-datatypes", envvar="TUNEMPI_ASSUME_CONTIGUOUS_DATATYPES",
        help="The application passes only contiguous datatypes (predefined, or without gaps, lower bounds 0) "
             "to collectives: let the files select the algorithms that are wrong for other datatypes "
             "(docs/conformance.md). Recorded in the manifest.")] = False,
    assume_same_counts: Annotated[bool, typer.Option(
        "--assume-same-counts", envvar="TUNEMPI_ASSUME_SAME_COUNTS",
        help="Every rank passes the same count of same-size datatypes to each collective call (no root "
             "sending 512 ints that others receive as one derived element): let the files select the "
             "algorithms that split a message by element counts (docs/conformance.md). Recorded in the "
             "manifest.")] = False,
    plan: Annotated[bool, typer.Option(
        "--plan", help="Print the tune's predicted wall time, engine launches and runs for the layout asked for "
        "(--nodes, --ppn/--ranks, --collectives, sizes), from this library's runs in the results store (or "
        "--plan-from's), and launch nothing (docs/tune.md, 'Plan'). --out is not written.")] = False,
    plan_from: Annotated[Path | None, typer.Option(
        "--plan-from", help="With --plan: a dataset CSV (e.g. data/ornl-peak.csv.gz) whose latencies give the "
        "runs' costs instead of the store's.")] = None,
    assume_commutative_ops: Annotated[bool, typer.Option(
        "--assume-commutative-ops", envvar="TUNEMPI_ASSUME_COMMUTATIVE_OPS",
        help="Every MPI_Op the application reduces with is commutative (all predefined ones are): let the files "
             "select the algorithms that are wrong for a non-commutative one (Open MPI's ring allreduce; "
             "docs/conformance.md). With --from-profile, a profile whose every reduction passed a commutative "
             "op vouches for it. Recorded in the manifest.")] = False,
) -> None:
    """Tune collective algorithms at every sub-scale of the allocation; write smoke-checked tuning files."""
    try:
        settings = MeasureSettings(warmup=TUNE_SETTINGS.warmup, min_iters=TUNE_SETTINGS.min_iters,
                                   max_iters=TUNE_SETTINGS.max_iters, rel_ci=rel_ci,
                                   time_cap_s=parse_duration(time_cap))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    profile_distributions: dict[str, str] = {}
    objective_from = "--objective" if objective is not None else "default"
    computations: tuple[ApplicationComputation, ...] = ()
    if from_profile is not None:
        from tunempi.mpi.discovery import adapter_for, library_for_version_string
        from tunempi.profile.advise import not_tunable, tune_scope, vouched_evidence
        from tunempi.profile.reader import load_profile

        profile = load_profile(from_profile)
        library = library_for_version_string(str(profile.header.get("library", "")), resolve(mpi, "MPI"))
        mpi = mpi or library.spec
        # what the library cannot select for (Open MPI's gatherv/scatterv: coll/tuned has no algorithm) is left
        # out and named, as advise does
        scope = tune_scope(profile, adapter_for(library), library.name, nodes=nodes, ranks=ranks, ppn=ppn)
        if not scope.collectives and not collectives:
            raise UsageError(f"{from_profile}: {library.name} can select an algorithm for none of its collectives: "
                             + "; ".join(f"{c}: {why}" for c, why in sorted(scope.left_out.items())))
        collectives = collectives or ",".join(scope.collectives)
        nodes, ranks, ppn = scope.nodes, scope.ranks, scope.ppn
        min_msg = min_msg or str(scope.min_msg)
        max_msg = max_msg or str(scope.max_msg)
        left = not_tunable(profile, scope.left_out)
        untunable = ("; not tuned: " + "; ".join(n.text for n in left)) if left else (
            f"; not taken by tune: {', '.join(scope.untunable)}" if scope.untunable else "")
        output_console().print(f"from {from_profile}: {collectives} at {ranks or ppn} ranks"
                               f"{f' per node on {nodes} nodes' if (nodes or 1) > 1 else ''}, {min_msg}..{max_msg} "
                               f"bytes, {library.name}{untunable}")
        profile_distributions = _profile_distributions(scope.count_shapes, collectives.split(","), distribution)
        objective, objective_from, computations = _profile_objective(profile, from_profile, collectives.split(","),
                                                                     objective)
        vouched = scope.vouched_flags()
        assume_commutative_ops = assume_commutative_ops or "--assume-commutative-ops" in vouched
        assume_contiguous_datatypes = assume_contiguous_datatypes or "--assume-contiguous-datatypes" in vouched
        assume_same_counts = assume_same_counts or "--assume-same-counts" in vouched
        evidence = vouched_evidence(profile)
        for flag in vouched:  # taken on its own: say which of the profile's calls vouch for it
            output_console().print(f"tuning as with {flag}: {evidence.get(flag, 'the profile vouches for it')}",
                                   soft_wrap=True, highlight=False)
    nodes = nodes or 1
    if ranks is None and ppn is None and nodes == 1:
        ranks = 2
    options = TuneOptions(
        out=out, collectives=collectives or "allreduce,bcast,allgather,alltoall", mpi=mpi, nodes=nodes, ppn=ppn,
        hostfile=hostfile,
        ranks=ranks, max_msg=parse_size(max_msg or "1MiB"), min_msg=parse_size(min_msg or "4"),
        strategy=resolve(strategy, "STRATEGY", DEFAULT_STRATEGY) or DEFAULT_STRATEGY, seed=seed,
        timeout_s=parse_duration(timeout), topology=resolve(topology, "TOPOLOGY", "serial") or "serial",
        db=Path(db) if db else None, settings=settings,
        point_timeout_s=parse_duration(point_timeout) if point_timeout else None, smoke=smoke,
        assume=tuple(sorted((CONTIGUOUS_DATATYPES if assume_contiguous_datatypes else frozenset())
                            | (SAME_COUNTS if assume_same_counts else frozenset())
                            | (COMMUTATIVE_OPS if assume_commutative_ops else frozenset()))), launches=launches,
        objective=objective or DEFAULT_OBJECTIVE, objective_from=objective_from, computations=computations,
        distributions={**profile_distributions,
                                            **parse_distributions(",".join(distribution or ()))},
    )
    if plan_from is not None and not plan:
        raise UsageError("--plan-from goes with --plan")
    if plan:
        planned = plan_tune(options, plan_from)
        output_console().print(f"plan: {plan_line(planned.predicted)} (costs: {planned.costs_from}; docs/tune.md "
                               "'Plan')", soft_wrap=True, highlight=False)
        return
    progress = TuneProgress(output_console())
    try:
        report = run_tune(options, progress)
    finally:
        progress.close()
    record = report.manifest.plan if report.manifest is not None else None
    if record is not None and record.actual is not None:
        errors = ", ".join(f"{name} {e:+.0%}" for name in ("wall_s", "launches", "runs")
                           if (e := record.error(name)) is not None)
        output_console().print(f"planned {plan_line(record.predicted)}; took {plan_line(record.actual)} "
                               f"(error: {errors})", soft_wrap=True, highlight=False)
    if report.outcome.stop_reason == "interrupted":
        sys.exit(130)


def plan_line(prediction: Prediction) -> str:
    at_most = (f" (up to {prediction.wall_s + prediction.state_s:.0f} s if the machine changes speed during it: "
               "tune then adds deciding blocks for its state)" if prediction.state_s else "")
    return f"{prediction.wall_s:.0f} s{at_most}, {prediction.launches} engine launches, {prediction.runs} runs"


def _profile_objective(profile: Profile, path: Path, collectives: Sequence[str], given: str | None,
                       ) -> tuple[str | None, str, tuple[ApplicationComputation, ...]]:
    """(objective, where it came from, the application's computations) for the non-blocking collectives tuned
    from a profile (profile/nonblocking.py): --objective when given, else the profile's; says which it took."""
    from tunempi.profile.nonblocking import (
        application_objective,
        chosen_objective,
        computation_rows,
        nonblocking_uses,
    )

    uses = nonblocking_uses(profile, collectives)
    if not uses:
        return given, "--objective" if given else "default", ()
    implied = application_objective(uses)
    objective, source = chosen_objective(implied, given, str(path))
    computations = tuple(ApplicationComputation(**row) for row in computation_rows(uses, str(path)))
    console = output_console()
    for use in uses:
        console.print(f"  {use.text}", soft_wrap=True, highlight=False)
    if given is not None:
        console.print(f"  --objective {given} given (the profile's: {implied.objective or 'not known'})"
                      + ("; the application's computations size the time cells" if given == "time" and computations
                         else ""), highlight=False)
    elif objective is None:
        console.print(f"  objective: {DEFAULT_OBJECTIVE} with the library default's latency as the computation "
                      f"(the default): {implied.reason}", soft_wrap=True, highlight=False)
    else:
        console.print(f"  objective from the profile: {objective}; {implied.reason}; --objective overrides it",
                      soft_wrap=True, highlight=False)
    return objective, source, computations if objective == "time" else ()


def _profile_distributions(shapes: Mapping[str, str], collectives: Sequence[str],
                           distribution: Sequence[str] | None) -> dict[str, str]:
    """The count distribution of each vector collective tuned from a profile: the dominant shape of its calls'
    counts the profile recorded (`shapes`), unless --distribution names the collective; says which it took."""
    named = {part.partition("=")[0].strip().lower() for part in ",".join(distribution or ()).split(",")
             if part.strip()}
    vector = [c for c in collectives if c in VECTOR_COLLECTIVES]
    taken = {c: shapes[c] for c in vector if c in shapes and c not in named}
    console = output_console()
    if taken:
        console.print("  count distributions from the profile (the shape most calls' counts had): "
                      + ", ".join(f"{c} {d}" for c, d in taken.items())
                      + "; --distribution COLL=DIST measures them otherwise")
    overridden = [c for c in vector if c in shapes and c in named]
    if overridden:
        console.print("  --distribution given for " + ", ".join(f"{c} (the profile's: {shapes[c]})" for c in overridden))
    unknown = [c for c in vector if c not in shapes and c not in named]
    if unknown:  # a version 1 profile, or calls on intercommunicators only
        console.print(f"  {', '.join(unknown)}: measured with equal counts on every rank (the profile records "
                      "no count shapes for them); --distribution COLL=skewed|sparse measures them otherwise")
    return check_distributions(taken)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune_command)
