"""The manifest of a tuning directory (`manifest.json`): what was tuned, the files, how to apply them.

A frozen, typed record (`Manifest`), written by `tune`, replaced by `verify`, read by `run` and `report`.
On disk it is versioned JSON, one document per tuning directory. File variables are stored by file name
and resolved against the directory when read, so a tuning directory can be moved or copied to another
machine with the same library.

Keys (version 1):
    kind, version, created, library{name, vendor, version, fingerprint, prefix, mpicc}, system, preferred_ppn,
    collectives, scales[[ranks, nodes, ppn]], sizes, strategy, seed, strategy_params,
    run{stop_reason, wall_s, bench_s, measured, resumed, failed, launches, decided_across, decisions{outcome: cells}},
    files{role: name}, env_files{VAR: name}, env{VAR: value}, env_file, needs_file,
    excluded{collective: {algorithm: reason}} (what no tuning file of the library can select, and why),
    assumes[requirement] (what the user vouched every call meets: files may select algorithms needing it),
    objective (what was minimised for non-blocking collectives, collectives.OBJECTIVES; verify measures the
    same; absent: latency), compute_us[{collective, ranks, nodes, ppn, msg_bytes, compute_us}] (objective time:
    each non-blocking cell's computation between start and wait, the same in verify; each row's `from`: where it
    came from, e.g. a profile's row, "the library default's latency"), objective_from ("--objective",
    "profile PATH", "default"; absent: not recorded), distributions{collective: distribution} (how a vector collective's blocks differed
    between ranks where tune and verify measure it, collectives.DISTRIBUTIONS; absent: uniform),
    machine_probe_us[{ranks, nodes, ppn, probe_us}] (the fastest machine-state probe of tune's points at each
    layout: verify judges rules in the fastest state it and tune met, tune/machine_state.py),
    one_choice{collective: how} (where the library's files cannot choose the collective's
    algorithm by message size: "per communicator size" or "for every call", e.g. Open MPI's libnbc),
    selection[{collective, ranks, nodes, ppn, msg_bytes, algorithm, median_us, default_us, replaced_from?}],
    rule_sets{collective: RuleSet.to_dict()}, training_curve[{wall_s, bench_s, points, convergence,
    per_collective}], smoke[{ranks, ok, argv, points, message}],
    verify (null until `tunempi verify`: {verified_at, repeats, second_pass_cells, time_cap_s, wall_s,
    summary, cells[VerifiedCell.to_dict()], compositions[VerifiedComposition.to_dict()], held_out[...],
    held_out_summary, states{reference_pairs, other_pairs, mixed_pairs, slowest_ratio}, held_out_rounds,
    sent_back[{VerifiedCell.to_dict(), round, why_not}] (held-out cells slower beyond noise: sent back, or why
    not), stopped?{launches, planned, unverified, compositions_unverified, not_held_out} (where a deadline
    stopped it: autotune's share)}),
    compositions{margin, sizes, collectives[{collective, layout[ranks, nodes, ppn], results[CompositionResult],
    choice{collective, chosen, reason, best, best_us, default_us}}], files{role: name}, env_files{VAR: name},
    env{VAR: value}} (compositions measured at the largest multi-node layout; the files activate them),
    applications[{at, command, verdict, reason, results, pairs, speedup, low, high, metric, comparison}] (what
    `tunempi compare` found on applications run with this directory; `run` warns about a bad newest one),
    plan{predicted{wall_s, launches, runs}, actual{...}, costs_from} (tune/plan.py: what tune predicted before
    it began and what it took; absent or null in manifests written before it: no plan).
Keys a manifest lacks read as empty (an older manifest without `excluded` loads as excluding nothing, one
without `compositions` as having measured none).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunempi.collectives import DEFAULT_ALGORITHM, DEFAULT_OBJECTIVE, LATENCY_OBJECTIVE
from tunempi.errors import UsageError
from tunempi.mpi.library import MPILibrary
from tunempi.rules import RuleSet
from tunempi.space import Cell
from tunempi.tune.compositions import CompositionChoice, CompositionResult
from tunempi.tune.machine_state import StatesMet
from tunempi.tune.plan import PlanRecord
from tunempi.tune.verify import DeadlineStop, HeldOutSendBack, VerifiedCell, VerifiedComposition

if TYPE_CHECKING:
    from tunempi.tune.objective import Figures

MANIFEST_NAME = "manifest.json"
KIND = "tunempi-tuning"
VERSION = 1


@dataclass(frozen=True)
class SelectionRow:
    """One cell of the selection with what tuning measured there (None: not measured)."""

    cell: Cell
    algorithm: str
    median_us: float | None = None
    default_us: float | None = None
    replaced_from: str = ""  # the algorithm `verify` replaced by the default here ("" if none)
    #: tune's decision across launches here (launch_blocks.CellDecision): the chosen algorithm (a tie's: the
    #: contender that came closest) against the default, (speedup, low, high, launches); None if not decided
    decided: tuple[float, float, float, int] | None = None
    #: the same contender against the default in this cell alone (CellDecision.own): `decided` is its range's,
    #: shared by every cell the range covers (issue 58); None where the cell has no figures of its own
    own: tuple[float, float, float, int] | None = None
    #: the median of every other algorithm tune measured here (not the selection's, not the default's): the
    #: extension policy reads a winner's gain where it was not selected too (tune/files.py extensions_for)
    others: Mapping[str, float] = field(default_factory=dict)

    def tune_figures(self) -> tuple[tuple[float, float, float, int], str] | None:
        """Tune's figures for this cell and whose they are: ("cell", its own), or ("range", its range's) where
        it has none of its own (a directory tuned before they were recorded); None if not decided."""
        if self.own is not None:
            return self.own, "cell"
        return (self.decided, "range") if self.decided is not None else None

    def to_dict(self) -> dict[str, Any]:
        data = {**self.cell.to_dict(), "algorithm": self.algorithm, "median_us": self.median_us,
                "default_us": self.default_us}
        for key, figures in (("decided", self.decided), ("own", self.own)):
            if figures is not None:
                speedup, low, high, launches = figures
                data[key] = {"speedup": round(speedup, 5), "low": round(low, 5), "high": round(high, 5),
                             "launches": launches}
        if self.others:
            data["others"] = {a: self.others[a] for a in sorted(self.others)}
        return {**data, "replaced_from": self.replaced_from} if self.replaced_from else data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelectionRow:
        def figures(d: Mapping[str, Any] | None) -> tuple[float, float, float, int] | None:
            return (float(d["speedup"]), float(d["low"]), float(d["high"]), int(d["launches"])) if d else None

        return cls(Cell.from_dict(data), str(data["algorithm"]), data.get("median_us"), data.get("default_us"),
                   str(data.get("replaced_from", "")), figures(data.get("decided")), figures(data.get("own")),
                   {str(a): float(us) for a, us in (data.get("others") or {}).items()})

    def medians(self) -> dict[tuple[Cell, str], float]:
        """Every median the row holds, keyed as tune's medians are: the selection's (unless verify replaced it:
        the row's median is then the default's), the default's and the others'."""
        found = {(self.cell, a): us for a, us in self.others.items()}
        if self.median_us is not None and not self.replaced_from:
            found[self.cell, self.algorithm] = self.median_us
        if self.default_us is not None:
            found[self.cell, DEFAULT_ALGORITHM] = self.default_us
        return found


@dataclass(frozen=True)
class LibraryRecord:
    """The library a directory was tuned for (its fingerprint must match to verify or run it)."""

    name: str
    vendor: str = ""
    version: str = ""
    fingerprint: str = ""
    prefix: str = ""
    mpicc: str = ""  # names the library where the prefix cannot (Debian's MPICH and Open MPI share /usr)

    @classmethod
    def of(cls, library: MPILibrary) -> LibraryRecord:
        return cls(library.name, library.vendor, library.version, library.fingerprint, str(library.prefix),
                   str(library.mpicc))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LibraryRecord:
        return cls(str(data["name"]), str(data.get("vendor", "")), str(data.get("version", "")),
                   str(data.get("fingerprint", "")), str(data.get("prefix", "")), str(data.get("mpicc", "")))


@dataclass(frozen=True)
class RunRecord:
    """How the tuning run went."""

    stop_reason: str = ""  # one of tune.driver.STOP_REASONS
    wall_s: float = 0.0
    bench_s: float = 0.0
    measured: int = 0
    resumed: int = 0
    failed: int = 0
    launches: int = 0
    #: Launches each cell was decided across (`tune --launches`; 1: the exploring launch alone), and with
    #: more, how many cells came out tuned / tie / default (tune/launch_blocks.py).
    decided_across: int = 1
    decisions: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: Deciding blocks made, those added for the machine's state or for ranks taking turns included: each is a
    #: launch per layout and side (tune/file_launches.py), so with the layouts it bounds `launches`.
    deciding_blocks: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "wall_s": round(self.wall_s, 3), "bench_s": round(self.bench_s, 3),
                "decisions": dict(self.decisions)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class CurveRecord:
    """One point of the training curve (after a round of the tuning loop)."""

    wall_s: float
    bench_s: float
    points: int
    convergence: float
    per_collective: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), "bench_s": round(self.bench_s, 3), "points": self.points,
                "convergence": round(self.convergence, 4),
                "per_collective": {c: round(v, 4) for c, v in self.per_collective.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CurveRecord:
        return cls(float(data["wall_s"]), float(data["bench_s"]), int(data["points"]), float(data["convergence"]),
                   dict(data.get("per_collective", {})))


@dataclass(frozen=True)
class SmokeRecord:
    """One smoke run of the written files in the real library."""

    ranks: int
    ok: bool
    argv: tuple[str, ...]
    points: int
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "ok": self.ok, "argv": list(self.argv), "points": self.points,
                "message": self.message}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SmokeRecord:
        return cls(int(data["ranks"]), bool(data["ok"]), tuple(data.get("argv", ())), int(data.get("points", 0)),
                   str(data.get("message", "")))


@dataclass(frozen=True)
class VerifyRecord:
    """What `tunempi verify` measured: every compared cell and the summary (tune/verify.py)."""

    verified_at: str
    repeats: int
    second_pass_cells: int
    time_cap_s: float | None
    wall_s: float
    summary: Mapping[str, float | int]
    cells: tuple[VerifiedCell, ...] = ()
    #: The written compositions against the default (absent: none written, or verified before there was this).
    compositions: tuple[VerifiedComposition, ...] = ()
    #: The final files' tuned cells against the default in launches that decided nothing (issue 39): the
    #: figures to report. Empty: nothing stayed tuned, or verified before there was this.
    held_out: tuple[VerifiedCell, ...] = ()
    held_out_summary: Mapping[str, float | int] = field(default_factory=dict)
    #: The machine states the deciding launch pairs met (tune/machine_state.py; absent: verified before it).
    states: StatesMet = field(default_factory=StatesMet)
    #: Rounds of held-out launches measured (issue 58: a round that sends a cell back is followed by a new one,
    #: verify_run.HOLD_OUT_ROUNDS at most); `held_out` is the last round's, of the cells the files still select.
    held_out_rounds: int = 0
    #: The cells held-out launches found slower beyond noise (and those that went back with them), each sent
    #: back to the default or with the reason verify could not (issue 58).
    sent_back: tuple[HeldOutSendBack, ...] = ()
    #: Where verify stopped at its deadline (issue 58: autotune bounds it by tune's share); None: it measured
    #: all it planned.
    stopped: DeadlineStop | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"verified_at": self.verified_at, "repeats": self.repeats, "second_pass_cells": self.second_pass_cells,
                "time_cap_s": self.time_cap_s, "wall_s": round(self.wall_s, 3), "summary": dict(self.summary),
                "cells": [cell.to_dict() for cell in self.cells],
                "compositions": [c.to_dict() for c in self.compositions],
                "held_out": [cell.to_dict() for cell in self.held_out],
                "held_out_summary": dict(self.held_out_summary), "states": self.states.to_dict(),
                "held_out_rounds": self.held_out_rounds, "sent_back": [s.to_dict() for s in self.sent_back],
                **({"stopped": self.stopped.to_dict()} if self.stopped is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerifyRecord:
        return cls(str(data.get("verified_at", "")), int(data.get("repeats", 0)), int(data.get("second_pass_cells", 0)),
                   data.get("time_cap_s"), float(data.get("wall_s", 0.0)), dict(data.get("summary", {})),
                   tuple(VerifiedCell.from_dict(cell) for cell in data.get("cells", [])),
                   tuple(VerifiedComposition.from_dict(c) for c in data.get("compositions", [])),
                   tuple(VerifiedCell.from_dict(cell) for cell in data.get("held_out", [])),
                   dict(data.get("held_out_summary", {})), StatesMet.from_dict(data.get("states") or {}),
                   # verified before issue 58: one round where there were held-out figures
                   int(data.get("held_out_rounds", 1 if data.get("held_out") else 0)),
                   tuple(HeldOutSendBack.from_dict(s) for s in data.get("sent_back", [])),
                   DeadlineStop.from_dict(data["stopped"]) if data.get("stopped") else None)


@dataclass(frozen=True)
class CompositionRecord:
    """One collective's compositions measured at a multi-node layout, and what was decided."""

    collective: str
    layout: tuple[int, int, int]  # (ranks, nodes, ppn)
    results: tuple[CompositionResult, ...]
    choice: CompositionChoice

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "layout": list(self.layout),
                "results": [r.as_dict() for r in self.results], "choice": self.choice.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompositionRecord:
        ranks, nodes, ppn = (int(v) for v in data["layout"])
        return cls(str(data["collective"]), (ranks, nodes, ppn),
                   tuple(CompositionResult.from_dict(r) for r in data.get("results", ())),
                   CompositionChoice.from_dict(data["choice"]))


@dataclass(frozen=True)
class CompositionsRecord:
    """The composition step of `tune` (empty where no layout spans nodes): every collective measured, and
    the file(s) written for the chosen ones, kept apart from the algorithm files (`verify` rewrites those;
    `run` reads these back with the adapter's composition reader)."""

    margin: float = 0.0
    sizes: tuple[int, ...] = ()
    collectives: tuple[CompositionRecord, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)  # role -> file name in the directory
    env_files: Mapping[str, str] = field(default_factory=dict)  # variable -> file name in the directory
    env: Mapping[str, str] = field(default_factory=dict)

    def chosen(self) -> dict[str, str]:
        return {r.collective: r.choice.chosen for r in self.collectives if r.choice.chosen is not None}

    def to_dict(self) -> dict[str, Any]:
        return {"margin": self.margin, "sizes": list(self.sizes),
                "collectives": [r.to_dict() for r in self.collectives], "files": dict(self.files),
                "env_files": dict(self.env_files), "env": dict(self.env)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompositionsRecord:
        return cls(float(data.get("margin", 0.0)), tuple(int(s) for s in data.get("sizes", ())),
                   tuple(CompositionRecord.from_dict(r) for r in data.get("collectives", ())),
                   {str(k): str(v) for k, v in data.get("files", {}).items()},
                   {str(k): str(v) for k, v in data.get("env_files", {}).items()},
                   {str(k): str(v) for k, v in data.get("env", {}).items()})


@dataclass(frozen=True)
class ApplicationCheck:
    """What `tunempi compare` found when the application ran with this directory against the library's
    default: the verdict (compare.session.VERDICTS), the speedup and its 95 % interval, whether the
    application's results were unchanged. `run` warns when the newest one says slower, failed or wrong."""

    at: str
    command: tuple[str, ...]
    verdict: str
    reason: str = ""
    results: str = "unchecked"
    pairs: int = 0
    speedup: float | None = None
    low: float | None = None
    high: float | None = None
    metric: str = ""
    comparison: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = list(self.command)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ApplicationCheck:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["command"] = tuple(values.get("command", ()))
        return cls(**values)

    @property
    def warns(self) -> bool:
        """The application was slower with the directory, crashed, or computed something else."""
        return self.verdict in ("slower", "failed", "wrong results") or self.results == "changed"


@dataclass(frozen=True)
class Manifest:
    """A tuning directory's manifest. Change it with `dataclasses.replace`, write it with `save`."""

    directory: Path
    library: LibraryRecord
    created: str = ""
    system: str = ""
    preferred_ppn: int | None = None
    collectives: tuple[str, ...] = ()
    scales: tuple[tuple[int, ...], ...] = ()  # (ranks, nodes, ppn)
    sizes: tuple[int, ...] = ()
    strategy: str = ""
    seed: int = 0
    strategy_params: Mapping[str, Any] = field(default_factory=dict)
    run: RunRecord = field(default_factory=RunRecord)
    files: Mapping[str, str] = field(default_factory=dict)  # role -> file name in the directory
    env_files: Mapping[str, str] = field(default_factory=dict)  # variable -> file name in the directory
    env: Mapping[str, str] = field(default_factory=dict)  # further variables the files need
    env_file: str = ""
    needs_file: tuple[str, ...] = ()  # collectives the env file cannot express
    excluded: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # collective -> algorithm -> why
    assumes: tuple[str, ...] = ()  # requirements the user vouched for (mpi/restrictions.py), e.g. contiguous
    objective: str = DEFAULT_OBJECTIVE  # what tune minimised for non-blocking collectives (verify: the same)
    #: objective time: each non-blocking cell's computation between start and wait, in us (verify: the same)
    compute_us: Mapping[Cell, float] = field(default_factory=dict)
    #: where each computation came from (tune/objective.py Figures.sources: a profile row, the default's latency)
    compute_from: Mapping[Cell, str] = field(default_factory=dict)
    #: where the objective came from: "--objective", "profile PATH" (tune --from-profile), "default"; "": unknown
    objective_from: str = ""
    #: vector collective -> how its blocks differed between ranks where tune measured it (the profile's; verify
    #: measures the same); uniform where absent
    distributions: Mapping[str, str] = field(default_factory=dict)
    #: (ranks, nodes, ppn) -> the fastest machine-state probe of tune's points there, in us
    #: (tune/machine_state.py): verify judges the rules in the fastest state it and tune met
    machine_probe_us: Mapping[tuple[int, int, int], float] = field(default_factory=dict)
    #: collective -> how its files hold one algorithm where they cannot choose by message size
    one_choice: Mapping[str, str] = field(default_factory=dict)
    selection: tuple[SelectionRow, ...] = ()
    rule_sets: Mapping[str, RuleSet] = field(default_factory=dict)
    training_curve: tuple[CurveRecord, ...] = ()
    smoke: tuple[SmokeRecord, ...] = ()
    verify: VerifyRecord | None = None
    compositions: CompositionsRecord = field(default_factory=CompositionsRecord)
    applications: tuple[ApplicationCheck, ...] = ()  # `tunempi compare` on applications, oldest first
    #: tune's plan (tune/plan.py): wall time, launches and runs predicted before it began, and what it took
    plan: PlanRecord | None = None

    # -- reading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, directory: str | Path) -> Manifest:
        directory = Path(directory)
        path = directory / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"{directory} is not a tuning directory (no {MANIFEST_NAME}); "
                             "create one with `tunempi tune --out DIR`") from None
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("kind") != KIND:
            kind = data.get("kind") if isinstance(data, dict) else None
            raise UsageError(f"{path} is not a tunempi tuning manifest (kind {kind!r})")
        if int(data.get("version", 0)) > VERSION:
            raise UsageError(f"{path} has manifest version {data['version']}; this tunempi reads up to {VERSION}")
        try:
            return cls.from_dict(directory, data)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{path} is not a readable tuning manifest ({type(exc).__name__}: {exc})") from None

    @classmethod
    def from_dict(cls, directory: Path, data: Mapping[str, Any]) -> Manifest:
        verify = data.get("verify")
        return cls(
            directory=Path(directory),
            library=LibraryRecord.from_dict(data["library"]),
            created=str(data.get("created", "")),
            system=str(data.get("system", "")),
            preferred_ppn=data.get("preferred_ppn"),
            collectives=tuple(data.get("collectives", ())),
            scales=tuple(tuple(int(v) for v in scale) for scale in data.get("scales", ())),
            sizes=tuple(int(size) for size in data.get("sizes", ())),
            strategy=str(data.get("strategy", "")),
            seed=int(data.get("seed", 0)),
            strategy_params=dict(data.get("strategy_params", {})),
            run=RunRecord.from_dict(data.get("run", {})),
            files={str(k): str(v) for k, v in data.get("files", {}).items()},
            env_files={str(k): str(v) for k, v in data.get("env_files", {}).items()},
            env={str(k): str(v) for k, v in data.get("env", {}).items()},
            env_file=str(data.get("env_file", "")),
            needs_file=tuple(data.get("needs_file", ())),
            excluded={str(c): {str(a): str(why) for a, why in reasons.items()}
                      for c, reasons in data.get("excluded", {}).items()},
            assumes=tuple(str(r) for r in data.get("assumes", ())),
            objective=str(data.get("objective", LATENCY_OBJECTIVE)),  # before --objective: latency only
            compute_us={Cell.from_dict(row): float(row["compute_us"]) for row in data.get("compute_us", ())},
            compute_from={Cell.from_dict(row): str(row["from"]) for row in data.get("compute_us", ()) if "from" in row},
            objective_from=str(data.get("objective_from", "")),
            distributions={str(c): str(d) for c, d in data.get("distributions", {}).items()},
            machine_probe_us={(int(r["ranks"]), int(r["nodes"]), int(r["ppn"])): float(r["probe_us"])
                              for r in data.get("machine_probe_us", ())},
            one_choice={str(c): str(how) for c, how in data.get("one_choice", {}).items()},
            selection=tuple(SelectionRow.from_dict(row) for row in data.get("selection", ())),
            rule_sets={c: RuleSet.from_dict(d) for c, d in data.get("rule_sets", {}).items()},
            training_curve=tuple(CurveRecord.from_dict(p) for p in data.get("training_curve", ())),
            smoke=tuple(SmokeRecord.from_dict(s) for s in data.get("smoke", ())),
            verify=VerifyRecord.from_dict(verify) if verify else None,
            compositions=CompositionsRecord.from_dict(data.get("compositions") or {}),
            applications=tuple(ApplicationCheck.from_dict(a) for a in data.get("applications", ())),
            plan=PlanRecord.from_dict(plan) if (plan := data.get("plan")) else None,
        )

    def tuned_cells(self) -> int:
        """Cells whose files select an algorithm other than the library's own: the one count every summary
        gives (tune's decisions across launches can differ: the files hold a selection as the library can)."""
        return sum(row.algorithm != DEFAULT_ALGORITHM for row in self.selection)

    def decided(self) -> dict[Cell, tuple[float, float, float, int] | None]:
        """Tune's decision of each selection cell (SelectionRow.decided), by cell."""
        return {row.cell: row.decided for row in self.selection}

    def figures(self) -> Figures:
        """What verify measures the non-blocking cells for: tune's objective, with its computations."""
        from tunempi.tune.objective import Figures

        return Figures(self.objective, dict(self.compute_us), dict(self.compute_from), self.objective_from)

    def activation_env(self) -> dict[str, str]:
        """Every variable that activates the tuning (algorithm files and compositions), file variables
        resolved against the directory."""
        env = {**self.env, **self.compositions.env}
        for name, file in {**self.env_files, **self.compositions.env_files}.items():
            env[name] = str((self.directory / file).resolve())
        return env

    def file_names(self) -> set[str]:
        """Every file of the directory this manifest lists: algorithm files, composition files, env file."""
        return {*self.files.values(), *self.compositions.files.values(), *([self.env_file] if self.env_file else [])}

    def remove_files_no_longer_listed(self, earlier: set[str]) -> list[str]:
        """Delete the files an earlier manifest of this directory listed and this one does not (a rerun that
        chooses no composition must not leave the last run's composition file looking current); plain
        names in the directory only. Returns the names removed."""
        removed = []
        for name in sorted(earlier - self.file_names()):
            path = self.directory / name
            if Path(name).name == name and path.is_file():
                path.unlink()
                removed.append(name)
        return removed

    def missing_files(self) -> list[str]:
        names = [*self.files.values(), *self.compositions.files.values()]
        return [name for name in names if not (self.directory / name).is_file()]

    # -- writing ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND, "version": VERSION, "created": self.created, "library": self.library.to_dict(),
            "system": self.system, "preferred_ppn": self.preferred_ppn, "collectives": list(self.collectives),
            "scales": [list(scale) for scale in self.scales], "sizes": list(self.sizes),
            "strategy": self.strategy, "seed": self.seed, "strategy_params": dict(self.strategy_params),
            "run": self.run.to_dict(),
            "files": dict(self.files), "env_files": dict(self.env_files), "env": dict(self.env),
            "env_file": self.env_file, "needs_file": list(self.needs_file),
            "excluded": {c: dict(reasons) for c, reasons in sorted(self.excluded.items())},
            "assumes": list(self.assumes), "objective": self.objective, "objective_from": self.objective_from,
            "compute_us": [{**cell.to_dict(), "compute_us": us,
                            **({"from": self.compute_from[cell]} if cell in self.compute_from else {})}
                           for cell, us in sorted(self.compute_us.items())],
            "distributions": dict(sorted(self.distributions.items())), "one_choice": dict(self.one_choice),
            "machine_probe_us": [{"ranks": r, "nodes": n, "ppn": p, "probe_us": round(us, 3)}
                                 for (r, n, p), us in sorted(self.machine_probe_us.items())],
            "selection": [row.to_dict() for row in self.selection],
            "rule_sets": {c: rs.to_dict() for c, rs in sorted(self.rule_sets.items())},
            "training_curve": [point.to_dict() for point in self.training_curve],
            "smoke": [record.to_dict() for record in self.smoke],
            "verify": self.verify.to_dict() if self.verify is not None else None,
            "compositions": self.compositions.to_dict(),
            "applications": [check.to_dict() for check in self.applications],
            "plan": self.plan.to_dict() if self.plan is not None else None,
        }

    def save(self) -> Path:
        """Write atomically (a reader never sees half a manifest)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / MANIFEST_NAME
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n", encoding="utf-8")
        os.replace(temporary, path)
        return path
