"""The conformance suite's modes: the library on its own (its default choice, and each algorithm forced),
every tuning file tunempi writes, the online mode with per-call switching, and the profiler.

Forcing goes in ROUNDS: round k forces the k-th algorithm of every collective at once (collectives with
fewer algorithms sit the round out), so a library needs as many launches as its longest catalog, not one
per algorithm; every case belongs to one collective, so its verdict is that algorithm's.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from suite import (
    COLLECTIVES,
    Outcome,
    build_program,
    crashing,
    failures,
    library_reference,
    new_failures,
    run_suite,
    summary,
)

from tunempi.collectives import ONLINE_SWITCHABLE
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.restrictions import requirements
from tunempi.mpi.vendor import VendorAdapter

TUNEMPI = str(Path(sys.executable).with_name("tunempi"))


def catalog(adapter: VendorAdapter, colls: Iterable[str] = COLLECTIVES) -> dict[str, list[str]]:
    return {c: [a.name for a in adapter.algorithms(c)] for c in colls if adapter.algorithms(c)}


def rounds(adapter: VendorAdapter, *, isolated: bool = False, colls: Iterable[str] = COLLECTIVES
           ) -> list[dict[str, str]]:
    """Round k: collective -> its k-th algorithm. isolated: one algorithm per round (composite algorithms,
    e.g. Open MPI's allreduce nonoverlapping = reduce + bcast, then run their inner collectives' default).
    `colls`: the blocking suite, or NONBLOCKING_COLLECTIVES (issue 41)."""
    names = catalog(adapter, colls)
    if isolated:
        return [{c: n} for c, v in names.items() for n in v]
    longest = max(len(v) for v in names.values())
    return [{c: v[k] for c, v in names.items() if k < len(v)} for k in range(longest)]


def forced_env(adapter: VendorAdapter, choice: Mapping[str, str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for collective, name in choice.items():
        env.update(adapter.force_env(collective, name))
    return env


def strict_cvars(adapter: VendorAdapter, choice: Mapping[str, str]) -> list[str]:
    """--cvar arguments: the run-time switch of every chosen algorithm, and the library's strict selection
    (MPICH: an algorithm that cannot take the call's arguments returns an error instead of falling back)."""
    args: list[str] = []
    writes: list[tuple[str, int]] = []
    for collective, name in choice.items():
        switch = adapter.runtime_switch(collective, name)
        writes += [(switch.cvar, switch.value), *switch.also]
    strict = adapter.strict_selection_switch()
    if strict is not None:
        writes.append((strict.cvar, strict.value))
    for cvar, value in dict(writes).items():
        args += ["--cvar", f"{cvar}={value}"]
    return args


def per_algorithm(results: list[tuple[dict[str, str], dict[int, Outcome]]]) -> dict[tuple[str, str], list[Outcome]]:
    """(collective, algorithm) -> its failing cases, from round results."""
    out: dict[tuple[str, str], list[Outcome]] = {}
    for choice, outcomes in results:
        for collective, name in choice.items():
            out[(collective, name)] = [o for o in failures(outcomes) if o.collective == collective]
    return out


def library_forced(library: MPILibrary, ranks: int, program: Path, *, strict: bool = False,
                   isolated: bool = False, skip: Iterable[tuple[str, str]] = (),
                   skip_for: Callable[[Mapping[str, str]], Iterable[tuple[str, str]]] | None = None,
                   colls: Iterable[str] = COLLECTIVES, skip_restricted_crashes: bool = False,
                   ) -> list[tuple[dict[str, str], dict[int, Outcome]]]:
    """Every algorithm forced, without tunempi: through the environment, or (strict) through MPI_T with the
    library's strict selection on. `skip_for(choice)`: more cases to leave out of that round.
    `skip_restricted_crashes`: where an algorithm with a recorded restriction crashes or hangs, the rest of
    that case's class is not run in the round (SKIP): a restriction already explains every failure of the
    algorithm, so the relaunches would only count them (the experiment behind the table runs them all)."""
    adapter = adapter_for(library)
    results = []
    fixed = list(skip)
    for choice in rounds(adapter, isolated=isolated, colls=colls):
        skip = fixed + list(skip_for(choice) if skip_for is not None else ())

        def restricted_crash(crashed: Outcome, choice: Mapping[str, str] = choice) -> bool:
            return bool(requirements(library.vendor, library.version, crashed.collective,
                                     choice.get(crashed.collective, "default")))

        forcing = ({"program_args": strict_cvars(adapter, choice)} if strict
                   else {"env": forced_env(adapter, choice)})
        outcomes = run_suite(library, ranks, program=program, colls=list(choice), skip=skip,
                             skip_class_after=restricted_crash if skip_restricted_crashes else None, **forcing)
        results.append((choice, outcomes))
    return results


def tuning_file_rounds(library: MPILibrary, ranks: int, program: Path, directory: Path, *,
                       skip: Iterable[tuple[str, str]] = (), colls: Iterable[str] = COLLECTIVES
                       ) -> list[tuple[dict[str, str], dict[int, Outcome], dict[str, str]]]:
    """Round k through a tuning file tunempi writes (tune's own writer path, smoke check included) that
    selects the k-th algorithm of every collective at every size, as far as the file may select it.
    Returns (choice, outcomes, collective -> what the file really selects)."""
    from tunempi.tune.files import write_tuning_files

    adapter = adapter_for(library)
    results = []
    colls = list(colls)
    writable = {c: list(adapter.tuning_file_algorithms(c).selectable) for c in catalog(adapter, colls)
                if c != "barrier"}
    for k, choice in enumerate(rounds(adapter, colls=colls)):
        selected = {c: (n if n in writable.get(c, []) else "default") for c, n in choice.items() if c in writable}
        out = directory / f"round{k}"
        written = write_tuning_files(out, library, adapter, rule_sets_selecting(selected, ranks),
                                     smoke_ranks=(ranks,), smoke=False)
        env = written.activation_env(out)
        outcomes = run_suite(library, ranks, program=program, colls=list(selected), env=env, skip=skip)
        results.append((choice, outcomes, selected))
    return results


def rule_sets_selecting(selected: Mapping[str, str], ranks: int):
    """Rule sets choosing one algorithm per collective at every size, at this communicator size."""
    from tunempi.rules import ScaledChoice, SelectionTable, build_rule_sets

    choices = [ScaledChoice(c, 1, ranks, size, name) for c, name in selected.items() for size in (8, 65536)]
    return build_rule_sets(SelectionTable.from_scaled(choices))


def online_collectives(colls: Iterable[str] | None = None) -> tuple[str, ...]:
    """What the online mode switches in a run of `colls` (None: the blocking suite): every switchable one of
    them; where it switches none of them (the non-blocking collectives, refused by `online run` so far), every
    blocking one, so that the interposer still wraps the run and must pass the calls through untouched."""
    mine = tuple(c for c in (COLLECTIVES if colls is None else colls) if c in ONLINE_SWITCHABLE)
    return mine or ONLINE_SWITCHABLE


def under_online(library: MPILibrary, ranks: int, program: Path, state: Path, *,
                 skip: Iterable[tuple[str, str]] = (), colls: Iterable[str] | None = None) -> dict[int, Outcome]:
    """The whole suite (or `colls`' cases) under `tunempi online run` (every switchable collective,
    `online_collectives`, uniform draws)."""
    colls = list(colls) if colls is not None else None
    switched = ",".join(online_collectives(colls) if colls is not None else ONLINE_SWITCHABLE)

    def wrap(argv: list[str]) -> list[str]:
        return [TUNEMPI, "online", "run", "--state", str(state), "--mpi", str(library.mpicc),
                "--collectives", switched, "--record-ranks", "all", "--", *argv]

    return run_suite(library, ranks, program=program, wrap=wrap, timeout=300, skip=skip, colls=colls)


def under_profiler(library: MPILibrary, ranks: int, program: Path, out: Path, *,
                   skip: Iterable[tuple[str, str]] = (), colls: Iterable[str] | None = None) -> dict[int, Outcome]:
    def wrap(argv: list[str]) -> list[str]:
        return [TUNEMPI, "profile", "-o", str(out), "--mpi", str(library.mpicc), "--", *argv]

    return run_suite(library, ranks, program=program, wrap=wrap, timeout=300, skip=skip,
                     colls=list(colls) if colls is not None else None)


LAYOUTS = (("openmpi", 2), ("openmpi", 4), ("mpich", 2))


def isolated_report(library: MPILibrary, ranks: int, program: Path, default: Mapping[int, Outcome]) -> None:
    """Every algorithm forced alone (one per launch, through the environment): each failure that passes with
    the library's own choice, with the algorithm's recorded requirements (the experiment behind the
    table's entries; docs/conformance.md)."""
    from tunempi.mpi.restrictions import requirements

    for choice, outcomes in library_forced(library, ranks, program, isolated=True, skip=crashing(default)):
        (collective, name), = choice.items()
        new = new_failures(outcomes, default)
        known = ", ".join(requirements(library.vendor, library.version, collective, name)) or "none"
        print(f"{library.name} at {ranks} ranks | {collective} {name} forced | run {len(outcomes)}, "
              f"fail where the default passes {len(new)} | table: {known}")
        for o in new:
            print(f"    {o}")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Print the counts per library x mode and every failure (the figures of docs/conformance.md).
    Arguments: LIBRARY:RANKS ... (LIBRARY: a --mpi SPEC, e.g. openmpi or /usr/bin/mpicc.mpich); with
    --isolated, only the library's default and every algorithm forced alone."""
    isolated = "--isolated" in argv
    argv = [a for a in argv if a != "--isolated"]
    layouts = [(v, int(r)) for v, r in (a.rsplit(":", 1) for a in argv)] if argv else list(LAYOUTS)
    os.environ.setdefault("TUNEMPI_LOG", "warning")
    for vendor, ranks in layouts:
        library = resolve_library(vendor)
        program = build_program(library)
        head = f"{library.name} at {ranks} ranks"
        default = library_reference(library, ranks, program)
        print(f"{head} | library default (twice, and each collective alone) | {summary(default)}")
        for o in failures(default):
            print(f"    library's own: {o}")
        if isolated:
            isolated_report(library, ranks, program, default)
            continue
        skip = crashing(default)
        forced = library_forced(library, ranks, program, skip=skip)
        runs = sum(len(o) for _, o in forced)
        bad = sum(len(f) for f in per_algorithm(forced).values())
        print(f"{head} | library, each algorithm forced (env) | run {runs}, pass {runs - bad}, fail {bad}")
        for (c, n), fails in sorted(per_algorithm(forced).items()):
            for o in fails:
                print(f"    {c} {n}: {o.case}: {o.verdict}")
        if library.vendor == "mpich":
            strict = library_forced(library, ranks, program, strict=True, skip=skip)
            runs = sum(len(o) for _, o in strict)
            bad = sum(len(f) for f in per_algorithm(strict).values())
            print(f"{head} | library, each algorithm forced (MPI_T, fallback=error) | run {runs}, pass "
                  f"{runs - bad}, refused or failed {bad}")
            for (c, n), fails in sorted(per_algorithm(strict).items()):
                for o in fails:
                    print(f"    {c} {n}: {o.case}: {o.verdict}")
        with tempfile.TemporaryDirectory() as tmp:
            files = tuning_file_rounds(library, ranks, program, Path(tmp), skip=skip)
            runs = sum(len(o) for _, o, _ in files)
            bad = [o for _, o, _ in files for o in new_failures(o, default)]
            own = sum(len(failures(o)) for _, o, _ in files) - len(bad)
            print(f"{head} | tuning files (one per round) | run {runs}, pass {runs - len(bad) - own}, "
                  f"fail {len(bad)} (+{own} the library's own)")
            for o in bad:
                print(f"    NEW: {o}")
            online = under_online(library, ranks, program, Path(tmp) / "state", skip=skip)
            print(f"{head} | online | {summary(online, default)}")
            for o in new_failures(online, default):
                print(f"    NEW: {o}")
            profiled = under_profiler(library, ranks, program, Path(tmp) / "profile.json", skip=skip)
            print(f"{head} | profiler | {summary(profiled, default)}")
            for o in new_failures(profiled, default):
                print(f"    NEW: {o}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
