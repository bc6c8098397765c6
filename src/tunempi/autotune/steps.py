"""The real steps: each is the library call its own command makes (docs/autotune.md).

profile: profile.run.run_profiled; plan: profile.advise.application_plan; tune: tune.job.run_tune (the scope of
`tune --from-profile`); verify: tune.verify_run.run_verify; online: online.run (run_online, update_state) then
online.report.write_best; search: search.session (`--space auto`); compare: compare.session; report:
autotune/report.py. Results are JSON (the work state records them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunempi.autotune.gain import expected_gain, measured_cells
from tunempi.autotune.pipeline import AutotuneOutcome, Context, StepRunner
from tunempi.autotune.plan import TUNE_PART, next_run_fits, runs_for
from tunempi.collectives import DEFAULT_ALGORITHM, check_distributions
from tunempi.errors import TunempiError, UsageError

if TYPE_CHECKING:
    from tunempi.mpi.library import MPILibrary
    from tunempi.profile.reader import Profile
    from tunempi.space import Cell
    from tunempi.tune.launch_blocks import CellDecision
    from tunempi.tune.manifest import Manifest

#: The directories and files of a work directory.
PROFILE = "profile.json"
#: The profiled run's stdout and stderr (miniAMR's ran to 24,000 lines), and the lines of it a failure shows.
PROFILE_LOG = "profile-run.log"
PROFILE_TAIL_LINES = 20
TUNED = "tuned"
ONLINE_STATE = "online-state"
ONLINE_BEST = "online-best"
SEARCH = "search"
REPORT = "report.html"
#: Batches of online runs (the probabilities are updated after each).
ONLINE_BATCHES = 3
#: Repetitions of verify (its default).
VERIFY_REPEATS = 3
#: Runs of search's verification of its best against the default (its default: 5 pairs).
SEARCH_VERIFY_RUNS = 10


def tuning_sets_something(manifest: Manifest) -> bool:
    """A tuning directory that selects an algorithm other than the library's own somewhere (or a composition):
    one that selects the default everywhere would compare the default with itself."""
    return any(row.algorithm != DEFAULT_ALGORITHM for row in manifest.selection) \
        or bool(manifest.compositions.chosen())


def at_application_sizes(profile: Profile, medians: Mapping[tuple[Cell, str], float],
                         selection: Mapping[Cell, str], top: int = 6,
                         decisions: Mapping[Cell, CellDecision] | None = None) -> list[dict[str, Any]]:
    """What tune measured where the application spends its time: for the `top` sizes of the tuned
    collectives with the most time in the profile, the measured cell nearest in size (same collective and
    communicator size): the library's default there, the fastest other algorithm, and what the tuning
    chose. It says from measurements why a tuning changed nothing (the default already the fastest there).
    `decisions` (tune's, across launches): the cell's contender against the default across launches, so a
    median that one loaded launch made look faster reads as the tie it was."""
    mpi = profile.mpi_s or 1.0
    defaults = sorted({cell for cell, algorithm in medians if algorithm == DEFAULT_ALGORITHM},
                      key=lambda c: (c.collective, c.ranks, c.msg_bytes))
    rows: list[dict[str, Any]] = []
    for usage in sorted(profile.usage(), key=lambda r: -r.time_s):
        near = [c for c in defaults if c.collective == usage.collective and c.ranks == usage.comm_size]
        if not near:
            continue
        cell = min(near, key=lambda c: abs(math.log(max(c.msg_bytes, 1) / max(usage.msg_size, 1))))
        others = {a: v for (c, a), v in medians.items() if c == cell and a != DEFAULT_ALGORITHM}
        best = min(others, key=lambda a: others[a]) if others else None
        rows.append({"collective": usage.collective, "ranks": usage.comm_size, "size": usage.msg_size,
                     "calls": usage.calls, "mpi_share": usage.time_s / mpi, "measured_size": cell.msg_bytes,
                     "default_us": medians[(cell, DEFAULT_ALGORITHM)], "best": best,
                     "best_us": others.get(best) if best else None,
                     "chosen": selection.get(cell, DEFAULT_ALGORITHM),
                     **across_launches((decisions or {}).get(cell))})
        if len(rows) >= top:
            break
    return rows


def expected_of(profile: Profile, cells: Sequence[Mapping[str, Any]], manifest: Manifest,
                collectives: Sequence[str]) -> dict[str, Any]:
    """autotune.gain.expected_gain of a tuning directory's selection (docs/autotune.md, "Expected gain")."""
    return expected_gain(profile, cells, {row.cell: row.algorithm for row in manifest.selection}, collectives)


def nonblocking_advice(profile: Profile) -> dict[str, Any]:
    """What the profile says of the non-blocking collectives (as advise --json): each cell's computation between
    start and wait, and the objective that fits (profile/nonblocking.py)."""
    from tunempi.profile.nonblocking import application_objective, nonblocking_uses

    implied = application_objective(nonblocking_uses(profile))
    return {"objective": implied.objective, "reason": implied.reason,
            "cells": [use.to_dict() for use in implied.uses]}


def observed_run_s(durations: Sequence[float]) -> dict[str, float]:
    """{run_s: the median of the application runs' seconds} (the steps after size their runs by it), or {}."""
    return {"run_s": round(float(sorted(durations)[len(durations) // 2]), 3)} if durations else {}


def across_launches(decision: CellDecision | None) -> dict[str, Any]:
    """{across: outcome (tuned / tie / default), speedup, low, high, launches, figures} of tune's decision in a
    cell: the chosen algorithm (a tie's or a default's: the contender that came closest) against the default
    across launches, as a ratio default / contender with its interval, on the cell's own figures (figures:
    "cell"; issue 58: its range's are another cell's gain as well) or, where the cell has none, its range's
    (figures: "range"); {} where no decision was made there."""
    if decision is None:
        return {}
    found: dict[str, Any] = {"across": decision.outcome}
    c, whose = (decision.own, "cell") if decision.own is not None else (decision.comparison, "range")
    if c is not None:
        found.update(speedup=round(c.speedup, 4), low=round(c.low, 4), high=round(c.high, 4), launches=c.pairs,
                     figures=whose)
    return found


class LibrarySteps(StepRunner):
    """The steps as tunempi's library calls. `clock`: what online's and verify's shares are timed with (tests
    pass theirs)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._library: MPILibrary | None = None
        self.clock = clock

    # -- shared -------------------------------------------------------------------------------------
    def library(self, ctx: Context) -> MPILibrary:
        """The launch line's library as every command resolves it (mpi.discovery.launch_line_library: a bare
        mpiexec is the library's own); after the profile, the library it recorded."""
        from tunempi.mpi.discovery import launch_line_library, resolve_library

        if self._library is None:
            recorded = ctx.results.get("profile", {}).get("library")
            self._library = resolve_library(recorded) if recorded \
                else launch_line_library(ctx.request.mpi, ctx.request.command)
        return self._library

    @staticmethod
    def load_profile(ctx: Context) -> Profile:
        from tunempi.profile.reader import load_profile

        return load_profile(ctx.results["profile"]["profile"])

    @staticmethod
    def run_s(ctx: Context) -> float:
        """One application run's seconds, as the steps after it size their runs: the profiled run's, or the
        median of online's runs where those took longer (the machine got busier: LAMMPS' PPPM at 2x1 ran
        4 s profiled and 2-20 s in online's runs, on a machine shared with other jobs)."""
        profiled = float(ctx.results.get("profile", {}).get("run_s") or 1.0)
        return max(profiled, float(ctx.results.get("online", {}).get("run_s") or 0.0))

    # -- the steps ----------------------------------------------------------------------------------
    def profile(self, ctx: Context) -> dict[str, Any]:
        from tunempi.profile.build import build_interposer
        from tunempi.profile.reader import load_profile
        from tunempi.profile.run import run_profiled

        library = self.library(ctx)
        path = ctx.directory / PROFILE
        build_interposer(library)  # compiled on first use: not part of the run's time
        log = ctx.directory / PROFILE_LOG
        log.unlink(missing_ok=True)
        ctx.listener.note(f"the application's output goes to {log}")
        started = time.monotonic()
        run = run_profiled(ctx.request.command, library, path, log=log)
        run_s = time.monotonic() - started
        if not run.written or run.returncode != 0:
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            tail = "".join(f"\n  {line}" for line in lines[-PROFILE_TAIL_LINES:])
            raise TunempiError(f"the profiled run failed (exit status {run.returncode}): the application must "
                               f"reach MPI_Finalize under {library.name} ({library.prefix}); fix the launch line. "
                               f"The end of its output (its whole output is in {log}):{tail or ' (none)'}")
        profile = load_profile(run.output)
        wall = profile.wall_s or 1.0
        return {"profile": str(run.output), "log": str(log), "run_s": round(run_s, 3), "library": library.spec,
                "library_name": library.name, "ranks": profile.header.get("ranks"),
                "nodes": profile.header.get("nodes"), "elapsed_s": profile.elapsed_s,
                "mpi_share": profile.mpi_s / wall, "collective_share": profile.collective_s / wall,
                "p2p_share": profile.p2p_s / wall,
                "by_collective": [[name, calls, seconds, seconds / wall]
                                  for name, calls, seconds in profile.time_by_collective()]}

    def plan(self, ctx: Context) -> dict[str, Any]:
        from tunempi.mpi.discovery import adapter_for
        from tunempi.profile.advise import application_plan, not_tunable, shares_caveat, unselectable_here

        profile = self.load_profile(ctx)
        library = self.library(ctx)
        adapter = adapter_for(library)
        reasons = unselectable_here(adapter, library.name, {row.collective for row in profile.usage()})
        steps = application_plan(profile, ctx.results["profile"]["profile"], library.spec,
                                 switches_per_call=adapter.switches_at_run_time(), library_reasons=reasons)
        return {"plan": [{"kind": s.kind, "worth": s.worth, "why": s.why, "commands": list(s.commands)}
                         for s in steps],
                "not_tunable": [n.text for n in not_tunable(profile, reasons)],
                "caveat": shares_caveat(profile), "nonblocking": nonblocking_advice(profile)}

    def tune(self, ctx: Context) -> dict[str, Any]:
        from tunempi.collectives import DEFAULT_OBJECTIVE
        from tunempi.mpi.discovery import adapter_for
        from tunempi.mpi.restrictions import ASSUME_FLAGS
        from tunempi.profile.advise import tune_scope, vouched_evidence
        from tunempi.profile.nonblocking import (
            application_objective,
            chosen_objective,
            computation_rows,
            nonblocking_uses,
        )
        from tunempi.tune.job import TuneOptions, run_tune
        from tunempi.tune.objective import ApplicationComputation

        request, library = ctx.request, self.library(ctx)
        profile = self.load_profile(ctx)
        # as `tune --from-profile`: what the library cannot select for is left out (named in the plan's step)
        scope = tune_scope(profile, adapter_for(library), library.name, nodes=request.nodes,
                           ranks=request.ranks, ppn=request.ppn)
        taken = list(scope.collectives)
        if not taken:
            return {"skipped": f"{library.name} can select an algorithm for none of its collectives: "
                               + "; ".join(f"{c}: {why}" for c, why in sorted(scope.left_out.items())),
                    "variant": None}
        out = ctx.directory / TUNED
        timeout = max(30.0, TUNE_PART * (ctx.share_s or 0.0))
        # the non-blocking collectives for what the application does with them (as `tune --from-profile`): the
        # profile's objective and, for time, its own computation between start and wait; --objective wins
        path = str(ctx.results.get("profile", {}).get("profile", "the profile"))
        uses = nonblocking_uses(profile, taken)
        implied = application_objective(uses)
        objective, objective_from = chosen_objective(implied, request.objective, path)
        computations = tuple(ApplicationComputation(**row) for row in computation_rows(uses, path)) \
            if (objective or DEFAULT_OBJECTIVE) == "time" else ()
        if uses:
            ctx.listener.note(f"non-blocking collectives measured for their {objective or DEFAULT_OBJECTIVE} "
                              f"(from {objective_from}): {implied.reason}")
        options = TuneOptions(out=out, collectives=",".join(taken), mpi=library.spec, nodes=scope.nodes,
                              ppn=scope.ppn, ranks=scope.ranks, hostfile=request.hostfile, max_msg=scope.max_msg,
                              min_msg=scope.min_msg, seed=request.seed, timeout_s=timeout, db=request.db_path,
                              distributions=check_distributions(scope.count_shapes),
                              objective=objective or DEFAULT_OBJECTIVE, objective_from=objective_from,
                              computations=computations,
                              # what the profile's calls vouch for (commutative ops, predefined datatypes)
                              assume=tuple(sorted(set().union(*(ASSUME_FLAGS[f] for f in scope.vouched_flags())))))
        evidence = vouched_evidence(profile)
        for flag in scope.vouched_flags():  # taken on its own: say which of the profile's calls vouch for it
            ctx.listener.note(f"tuning as with {flag}: {evidence.get(flag, 'the profile vouches for it')}")
        shapes = "".join(f", {c} with {d} counts" for c, d in options.distributions.items())
        ctx.listener.note(f"tuning {', '.join(taken)} at the profile's layout and sizes "
                          f"({scope.min_msg}..{scope.max_msg} bytes{shapes}) for at most {timeout:.0f} s")
        report = run_tune(options, ctx.listener.tune_events())
        if report.outcome.stop_reason == "interrupted" or report.manifest is None:
            raise KeyboardInterrupt  # the measured points are in the store: the rerun resumes them
        manifest = report.manifest
        tuned = manifest.tuned_cells()  # what the files select (tune's decisions can differ)
        medians = report.outcome.measured_medians()
        at_sizes = at_application_sizes(profile, medians,
                                        {row.cell: row.algorithm for row in manifest.selection},
                                        decisions=report.outcome.decisions)
        cells = measured_cells(medians, report.outcome.decisions)
        return {"directory": str(out), "variant": str(out) if tuning_sets_something(manifest) else None,
                "collectives": taken, "cells": len(manifest.selection), "tuned_cells": tuned,
                "stop_reason": report.outcome.stop_reason, "at_application_sizes": at_sizes,
                "measured_cells": cells, "expected": expected_of(profile, cells, manifest, taken),
                "objective": manifest.objective, "objective_from": manifest.objective_from,
                "assumed": {flag: evidence.get(flag, "") for flag in scope.vouched_flags()}}

    def verify(self, ctx: Context) -> dict[str, Any]:
        from tunempi.tune.verify_run import run_verify

        directory = Path(ctx.results["tune"]["directory"])
        # within what tune left of its share: no launch pair begins that would end past it (issue 58)
        deadline = self.clock() + ctx.share_s if ctx.share_s is not None else None
        if deadline is not None:
            ctx.listener.note(f"verifying for at most {ctx.share_s:.0f} s (what tune left of its share)")
        report = run_verify(directory, repeats=VERIFY_REPEATS, mpi=self.library(ctx).spec,
                            listener=ctx.listener.verify_listener(), hostfile=ctx.request.hostfile,
                            deadline=deadline, clock=self.clock)
        if report.stopped is not None:  # in the terminal too, not only in the report's verify lines
            ctx.listener.note("verify " + report.stopped.line())
        manifest = report.manifest
        tuned = ctx.results["tune"]
        # what the files verify left can save, at tune's measurements (a rule verify sent back saves nothing)
        expected = {"expected": expected_of(self.load_profile(ctx), tuned["measured_cells"], manifest,
                                            tuned.get("collectives", manifest.collectives))} \
            if "measured_cells" in tuned else {}
        return {"directory": str(directory),
                "variant": str(directory) if tuning_sets_something(manifest) else None,
                "lines": report.lines(), "replaced": report.replaced,
                "tuned_cells": manifest.tuned_cells(), **expected,
                **({"stopped": report.stopped.to_dict()} if report.stopped is not None else {})}

    def online(self, ctx: Context) -> dict[str, Any]:
        from tunempi.collectives import ONLINE_SWITCHABLE
        from tunempi.online.report import cell_label, write_best
        from tunempi.online.run import CannotSwitch, open_state, run_online
        from tunempi.online.state import OnlineConfig
        from tunempi.online.update import update_state

        profile = self.load_profile(ctx)
        library = self.library(ctx)
        used = [name for name, _, _ in profile.time_by_collective() if name in ONLINE_SWITCHABLE]  # as --from-profile
        if not used:
            return {"skipped": f"the application calls none of the collectives online switches "
                               f"({', '.join(ONLINE_SWITCHABLE)})", "variant": None}
        run_s = self.run_s(ctx)
        batch = max(2, math.ceil(runs_for(ctx.share_s or 0.0, run_s) / ONLINE_BATCHES))
        runs = ONLINE_BATCHES * batch  # whole batches: every run's records go into an update
        directory = ctx.directory / ONLINE_STATE
        # what the application does with its non-blocking collectives (as `online run --from-profile`): online
        # best's manifest records it, so verify measures them for what the online records measured
        from tunempi.collectives import is_nonblocking
        from tunempi.profile.nonblocking import application_objective, computation_rows, nonblocking_uses

        path = str(ctx.results.get("profile", {}).get("profile", "the profile"))
        uses = nonblocking_uses(profile, used) if any(is_nonblocking(c) for c in used) else ()
        implied = application_objective(uses)
        config = OnlineConfig(collectives=used, batch_runs=batch, seed=ctx.request.seed + 1,
                              objective=implied.objective or "",
                              objective_from=f"profile {path}" if implied.objective else "",
                              computations=computation_rows(uses, path) if implied.objective == "time" else [])
        try:
            state = open_state(directory, library, config)
        except CannotSwitch as exc:
            return {"skipped": str(exc), "variant": None}
        done = len(list((directory / "runs").glob("batch-*/run-*.json")))  # runs that ended (a resumed step)
        # Its share bounds it in time as well: the runs were counted from the profiled run's time, and on a
        # busy machine they take longer. Once the next run would end past the share, the runs of the batch
        # begun are fitted (a forced update) and online stops there.
        deadline = self.clock() + ctx.share_s if ctx.share_s else None
        durations: list[float] = []
        while True:
            typical = float(sorted(durations)[len(durations) // 2]) if durations else run_s
            out_of_time = not next_run_fits(self.clock(), deadline, typical) and done < runs
            if state.runs_in_batch >= state.config.batch_runs or (out_of_time and state.runs_in_batch > 0):
                update = update_state(state, force=True)
                ctx.listener.note(f"online: batch {update.probabilities.batch} from {update.records_used} records")
            if done >= runs or out_of_time:
                if out_of_time:
                    ctx.listener.note(f"online: its share ({ctx.share_s:.0f} s) spent after {done} of {runs} runs")
                break
            result = run_online(state, library, ctx.request.command, timeout=max(60.0, 10 * run_s), echo=False)
            done += 1
            durations.append(result.duration_s)
            ctx.listener.note(f"online run {done}/{runs}: exit {result.returncode}, {result.duration_s:.1f} s")
            if result.returncode != 0:
                raise TunempiError(f"the application failed in online run {done} (exit status {result.returncode}"
                                   f"{', timed out' if result.timed_out else ''}); its records are in {directory}")
        try:
            choices, written = write_best(state, library, ctx.directory / ONLINE_BEST)
        except UsageError as exc:
            return {"skipped": str(exc), "variant": None, "runs": done, **observed_run_s(durations)}
        chosen = [c for c in choices if c.algorithm != DEFAULT_ALGORITHM]
        best = ctx.directory / ONLINE_BEST
        return {"variant": str(best) if chosen else None, "directory": str(best), "runs": done,
                **observed_run_s(durations),
                "cells": len(choices), "chosen": [[cell_label(c.cell, state.config.sizes), c.algorithm] for c in chosen],
                "notes": list(written.notes)}

    def search(self, ctx: Context) -> dict[str, Any]:
        from tunempi.search.session import SearchRequest, prepare_search, run_application_search

        trials = max(4, runs_for(ctx.share_s or 0.0, self.run_s(ctx)) - SEARCH_VERIFY_RUNS)
        out = ctx.directory / SEARCH
        request = SearchRequest(list(ctx.request.command), "auto", budget=trials, out=str(out),
                                mpi=self.library(ctx).spec, db=str(ctx.request.db_path), seed=ctx.request.seed)
        listener = ctx.listener.search_listener()
        session = prepare_search(request, listener)
        outcome = run_application_search(session, listener)
        return {"variant": str(out / "best.env") if outcome.recommended else None, "trials": len(outcome.trials),
                "verdict": outcome.verdict.reason if outcome.verdict is not None else None,
                "recommended": outcome.recommended}

    def compare(self, ctx: Context, variants: Sequence[str]) -> dict[str, Any]:
        from tunempi.compare.results import DEFAULT_TOLERANCE
        from tunempi.compare.session import CompareRequest, prepare_compare, run_compare
        from tunempi.evidence import MIN_PAIRS

        request = ctx.request
        # At least the blocks a verdict needs, whatever the share (the budget is checked between blocks).
        floor = MIN_PAIRS * (1 + len(variants)) * self.run_s(ctx) * 1.5
        compare = CompareRequest(
            list(request.command), list(variants), self.library(ctx).spec, results=tuple(request.results),
            result_command=request.result_command,
            tolerance=DEFAULT_TOLERANCE if request.tolerance is None else request.tolerance,
            min_runs=request.min_runs, max_runs=request.max_runs, budget_s=max(floor, ctx.share_s or floor),
            seed=request.seed, db=str(request.db_path))
        session = prepare_compare(compare)
        outcome = run_compare(session, ctx.listener.compare_listener())
        return {"outcome": outcome.to_dict(), "check": session.check.describe(), "metric": outcome.metric}

    def report(self, ctx: Context, outcome: AutotuneOutcome) -> dict[str, Any]:
        from tunempi.autotune.report import write_report

        return {"path": str(write_report(ctx.request, outcome, ctx.directory / REPORT))}
