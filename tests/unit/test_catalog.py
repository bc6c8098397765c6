"""The site catalog's logic (issue 57 part 3): merging tunings of several layouts, refusing what would lose or mix
evidence (another library build, an unreadable manifest, a measured cell with another winner) with nothing in the
catalog changed, atomic writes, coverage weighted by node-hours, Slurm's records, the modulefile's quoting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tunempi.catalog.build import acting_entries
from tunempi.catalog.coverage import (
    DEFAULT,
    INTERPOLATED_LAYOUT,
    MEASURED_LAYOUT,
    OTHER_PPN,
    JobLayout,
    coverage,
    read_jobs_csv,
)
from tunempi.catalog.jobs import parse_jobcomp, parse_sacct
from tunempi.catalog.module import modulefile_text, tcl_word
from tunempi.catalog.store import CATALOG_NAME, LOCK_NAME, Catalog, add_store, add_stored_runs, add_tuning
from tunempi.errors import UsageError
from tunempi.mpi.vendor import FileAlgorithms
from tunempi.space import Cell
from tunempi.store.results import Measurement, ResultStore
from tunempi.tune.files import rule_sets_for, selection_table
from tunempi.tune.job import selection_from_store
from tunempi.tune.manifest import LibraryRecord, Manifest, SelectionRow, VerifyRecord
from tunempi.tune.verify import VerifiedCell

LIBRARY = LibraryRecord("MPICH 5.0.2", "mpich", "5.0.2", "fp-one", "/opt/mpich", "/opt/mpich/bin/mpicc")


def tuning(path: Path, rows: dict[tuple[int, int, int, int], str], *, library: LibraryRecord = LIBRARY,
           collective: str = "allreduce", held_out: dict[tuple[int, int, int, int], float] | None = None) -> Path:
    """A tuning directory whose manifest selected `rows`: (ranks, nodes, ppn, bytes) -> algorithm."""
    cells = {key: Cell(collective, *key) for key in rows}
    verify = None
    if held_out:
        verify = VerifyRecord("2026-12-05T10:00:00Z", 3, 0, None, 1.0, {}, held_out=tuple(
            VerifiedCell(cells[key], rows[key], 1.0, s, s, s * 0.9, s * 1.1, "faster") for key, s in held_out.items()))
    Manifest(directory=path, library=library, created="2026-12-05T09:00:00Z",
             selection=tuple(SelectionRow(cells[key], algorithm, 1.0, 1.5) for key, algorithm in rows.items()),
             verify=verify).save()
    return path


def test_tunings_of_several_layouts_grow_one_catalog_with_each_cells_provenance(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "recursive_doubling", (2, 1, 2, 4096): "ring"},
                               held_out={(2, 1, 2, 8): 1.25}))
    result = add_tuning(catalog, tuning(tmp_path / "t4", {(4, 1, 4, 8): "recursive_multiplying"}))
    assert result.added == 1
    loaded = Catalog.load(catalog)
    assert loaded.library == LIBRARY
    assert loaded.layouts() == [(2, 1, 2), (4, 1, 4)]
    held = {e.cell.ranks: e.held_out for e in loaded.entries if e.cell.msg_bytes == 8}
    assert held[2]["speedup"] == 1.25 and held[2]["verdict"] == "faster" and held[4] == {}
    assert {e.source for e in loaded.entries} == {str((tmp_path / "t2").resolve()), str((tmp_path / "t4").resolve())}
    # The same tuning again changes no winner: provenance refreshed, nothing added.
    again = add_tuning(catalog, tmp_path / "t4")
    assert (again.added, again.refreshed, again.replaced) == (0, 1, ())


def test_a_tuning_of_another_library_build_is_refused_and_the_catalog_kept(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"}))
    before = (catalog / CATALOG_NAME).read_bytes()
    rebuilt = LibraryRecord("MPICH 5.0.2", "mpich", "5.0.2", "fp-two", "/opt/mpich", "/opt/mpich/bin/mpicc")
    with pytest.raises(UsageError, match="another library build"):
        add_tuning(catalog, tuning(tmp_path / "other", {(4, 1, 4, 8): "ring"}, library=rebuilt))
    assert (catalog / CATALOG_NAME).read_bytes() == before


def test_a_corrupt_manifest_is_refused_and_the_catalog_kept(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"}))
    before = (catalog / CATALOG_NAME).read_bytes()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text('{"kind": "tunempi-tuning", "library": ')
    with pytest.raises(UsageError, match="not valid JSON"):
        add_tuning(catalog, broken)
    assert (catalog / CATALOG_NAME).read_bytes() == before


def test_a_layout_measured_again_with_another_winner_is_refused_unless_replace(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "a", {(2, 1, 2, 8): "ring", (2, 1, 2, 64): "ring"}))
    before = (catalog / CATALOG_NAME).read_bytes()
    other = tuning(tmp_path / "b", {(2, 1, 2, 8): "recursive_doubling", (2, 1, 2, 64): "ring",
                                    (2, 1, 2, 512): "ring"})
    with pytest.raises(UsageError, match=r"1 cells already measured with another winner: allreduce 8 B at 2 ranks"):
        add_tuning(catalog, other)
    assert (catalog / CATALOG_NAME).read_bytes() == before  # not even the new 512 B cell
    result = add_tuning(catalog, other, replace_conflicts=True)
    assert [(o.algorithm, n.algorithm) for o, n in result.replaced] == [("ring", "recursive_doubling")]
    assert {e.cell.msg_bytes: e.algorithm for e in Catalog.load(catalog).entries} == {
        8: "recursive_doubling", 64: "ring", 512: "ring"}


def test_one_size_at_two_ppn_with_different_winners_is_no_conflict_and_the_fullest_nodes_act(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "one-node", {(4, 1, 4, 8): "recursive_doubling"}))
    add_tuning(catalog, tuning(tmp_path / "two-nodes", {(4, 2, 2, 8): "ring"}))
    entries = Catalog.load(catalog).entries
    assert len(entries) == 2
    acting, shadowed = acting_entries(entries)
    assert [(e.cell.ppn, e.algorithm) for e in acting] == [(4, "recursive_doubling")]
    assert [(e.cell.ppn, e.algorithm) for e in shadowed] == [(2, "ring")]


def test_a_crash_while_saving_leaves_the_old_catalog_and_no_temporary_file(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"}))
    before = (catalog / CATALOG_NAME).read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        add_tuning(catalog, tuning(tmp_path / "t4", {(4, 1, 4, 8): "ring"}))
    assert (catalog / CATALOG_NAME).read_bytes() == before
    assert sorted(p.name for p in catalog.iterdir()) == [LOCK_NAME, CATALOG_NAME]


def test_an_unreadable_catalog_is_a_usage_error_not_overwritten(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / CATALOG_NAME).write_text("[1, 2")
    with pytest.raises(UsageError, match="not a readable tunempi catalog"):
        add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"}))
    assert (catalog / CATALOG_NAME).read_text() == "[1, 2"


def test_coverage_weights_each_layout_by_node_hours_and_names_the_next_to_tune(tmp_path: Path) -> None:
    entries = [(Cell("allreduce", 2, 1, 2, 8), "ring"), (Cell("allreduce", 8, 1, 8, 8), "ring"),
               (Cell("allreduce", 16, 1, 16, 8), "recursive_doubling")]
    rule_sets = rule_sets_for(selection_table(dict(entries)))
    measured = [cell.scale for cell, _ in entries]
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("nodes,ppn,node_hours,user\n1,2,10,a\n1,4,20,b\n2,4,30,c\n8,32,40,d\n1,12,5,e\n1,2,5,f\n")
    report = coverage(read_jobs_csv(jobs), measured, rule_sets)
    bases = {(c.layout.nodes, c.layout.ppn): c.basis for c in report.layouts}
    # 4 ranks: between 2 and 8 whose winners agree; 8 ranks as 2x4: measured at 1x8; 12: between different
    # winners; 256: beyond every measured size.
    assert bases == {(1, 2): MEASURED_LAYOUT, (1, 4): INTERPOLATED_LAYOUT, (2, 4): OTHER_PPN,
                     (1, 12): DEFAULT, (8, 32): DEFAULT}
    shares = report.shares()
    assert shares[MEASURED_LAYOUT] == pytest.approx(15 / 110)  # the two 1x2 rows summed
    assert shares[DEFAULT] == pytest.approx(45 / 110)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert [(c.layout.nodes, c.layout.ppn) for c in report.next_to_tune(2)] == [(8, 32), (2, 4)]


def test_a_jobs_csv_without_its_columns_or_with_bad_numbers_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("nodes,node_hours\n1,2\n")
    with pytest.raises(UsageError, match="missing column.*ppn"):
        read_jobs_csv(path)
    path.write_text("nodes,ppn,node_hours\n1,two,3\n")
    with pytest.raises(UsageError, match=r"jobs.csv:2: .*'two'"):
        read_jobs_csv(path)


def test_slurm_records_become_layouts_with_node_hours() -> None:
    sacct = "12|2|8|3600\n13|1|4|1800\n14|2|8|1800\n15|0|0|0\n16|2|Unknown|60\n"
    assert parse_sacct(sacct) == [JobLayout(1, 4, 0.5, 1), JobLayout(2, 4, 3.0, 2)]
    jobcomp = ("JobId=3 UserId=root(0) GroupId=root(0) Name=hello JobState=COMPLETED Partition=debug "
               "TimeLimit=UNLIMITED StartTime=2026-12-05T15:10:00 EndTime=2026-12-05T15:40:00 NodeList=n[1-2] "
               "NodeCnt=2 ProcCnt=4 WorkDir=/tmp ReservationName= Tres=cpu=4,node=2 Account= QOS= WcKey= "
               "Cluster=unknown SubmitTime=2026-12-05T15:09:59 EligibleTime=2026-12-05T15:09:59 "
               "DerivedExitCode=0:0 ExitCode=0:0\n")
    assert parse_jobcomp(jobcomp) == [JobLayout(2, 2, 1.0, 1)]
    # Exclusive nodes: ProcCnt counts every CPU of the nodes, Tres the ones the job asked for (one per task),
    # as the emulated cluster's slurmctld wrote for `sbatch -N 2 --ntasks-per-node=1`.
    exclusive = ("JobId=3 JobState=COMPLETED StartTime=2026-12-05T15:08:01 EndTime=2026-12-05T15:08:03 "
                 "NodeList=n[1-2] NodeCnt=2 ProcCnt=4 Tres=cpu=2,mem=2000M,node=2,billing=2\n")
    assert parse_jobcomp(exclusive) == [JobLayout(2, 1, 2 * 2 / 3600, 1)]


def test_modulefile_values_are_taken_literally_by_tcl() -> None:
    assert tcl_word("/opt/t/mpich-mpir.json") == "/opt/t/mpich-mpir.json"
    assert tcl_word("a b$c[d]") == "{a b$c[d]}"
    assert tcl_word('x{y}\\"$') == '"x\\{y\\}\\\\\\"\\$"'
    text = modulefile_text({"B": "2", "A": "/p q/f.json"}, what="tunempi tuning /t for MPICH")
    assert text.splitlines()[0] == "#%Module1.0"
    assert "setenv A {/p q/f.json}\nsetenv B 2\n" in text


def test_catalog_add_of_a_corrupt_manifest_exits_2_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{")
    done = subprocess.run([sys.executable, "-m", "tunempi", "catalog", "add", str(broken), "--catalog",
                           str(tmp_path / "catalog")], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert "not valid JSON" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "catalog" / CATALOG_NAME).exists()
    assert json.loads((broken / "manifest.json").read_text() + "}") == {}


# -- catalog add from a results store (tune's selection from its runs) ------------------------------------------


class FakeAdapter:
    """What selection_from_store asks a library's adapter: its collectives, what a file can select, and that the
    files choose by size and communicator size and keep the library's choice elsewhere (MPICH's answers)."""

    def collectives(self) -> list[str]:
        return ["allreduce"]

    def tuning_file_algorithms(self, collective: str) -> FileAlgorithms:
        return FileAlgorithms(collective, ("recursive_doubling", "ring"))

    def tuning_file_exclusion(self, collective: str, algorithm: str) -> str | None:
        return None

    def files_keep_library_choice_elsewhere(self) -> bool:
        return True

    def selects_by_size(self, collective: str) -> bool:
        return True

    def selects_by_communicator_size(self, collective: str) -> bool:
        return True

    def selects_by_ppn(self) -> bool:
        return False


def stored_runs(db: Path, us: dict[tuple[int, int, str], float], *, fingerprint: str = "fp-one") -> Path:
    """A results store with three runs of each (ranks, bytes, algorithm) -> median us, one node."""
    with ResultStore(db) as store:
        store.add_many(Measurement(fingerprint, "mpich-5.0.2", "allreduce", algorithm, ranks, size, run=run,
                                   median_us=value * (1 + 0.01 * run), timestamp=f"2026-12-05T1{run}:00:00Z")
                       for (ranks, size, algorithm), value in us.items() for run in range(3))
    return db


def test_selection_from_store_decides_each_measured_cell_as_tune_does() -> None:
    us = {(2, 8, "default"): 20.0, (2, 8, "ring"): 10.0, (2, 8, "recursive_doubling"): 15.0,
          (2, 1024, "default"): 30.0, (2, 1024, "ring"): 45.0,
          (4, 8, "default"): 20.0, (4, 8, "ring"): 19.8,  # 1 % faster: within tune's margin, the default kept
          (4, 64, "ring"): 5.0}  # no run of the default: no evidence, no entry
    with ResultStore(":memory:") as store:
        store.add_many(Measurement("fp-one", "mpich-5.0.2", "allreduce", algorithm, ranks, size, run=run,
                                   median_us=value, timestamp=f"2026-12-05T1{run}:00:00Z")
                       for (ranks, size, algorithm), value in us.items() for run in range(2))
        store.add(Measurement("fp-two", "mpich-5.0.2", "allreduce", "ring", 2, 1024, median_us=1.0))  # other build
        stored = selection_from_store(store, "fp-one", FakeAdapter())  # type: ignore[arg-type]
    assert {(c.ranks, c.msg_bytes): a for c, a in stored.selection.items()} == {
        (2, 8): "ring", (2, 1024): "default", (4, 8): "default"}
    assert stored.medians[(Cell("allreduce", 2, 1, 2, 8), "ring")] == 10.0
    assert stored.newest == "2026-12-05T11:00:00Z"


def test_catalog_add_of_a_store_adds_its_cells_with_the_store_as_provenance(tmp_path: Path) -> None:
    db = stored_runs(tmp_path / "results.sqlite", {(2, 8, "default"): 20.0, (2, 8, "ring"): 10.0})
    result = add_stored_runs(tmp_path / "catalog", db, LIBRARY, FakeAdapter())  # type: ignore[arg-type]
    assert result.added == 1
    (entry,) = Catalog.load(tmp_path / "catalog").entries
    assert (entry.algorithm, entry.source, entry.created) == ("ring", str(db.resolve()), "2026-12-05T12:00:00Z")
    assert (entry.median_us, entry.default_us) == (10.1, 20.2)


def test_the_other_algorithms_medians_travel_from_tuning_and_store_into_the_rules_catalog_build_writes(
        tmp_path: Path) -> None:
    """A manifest row's and a store cell's other medians (not the selection's, not the default's) are kept with
    the entry, through catalog.json, into the medians catalog build gives the extension policy: a winner of the
    largest layout is read where another layout's tuning measured but did not select it (issue 57 part 2)."""
    from tunempi.catalog.build import catalog_rules

    catalog = tmp_path / "catalog"
    top, below = Cell("allreduce", 8, 4, 2, 8), Cell("allreduce", 4, 2, 2, 8)
    for path, cell, algorithm, others in ((tmp_path / "t4", top, "ring", {}),
                                          (tmp_path / "t2", below, "recursive_doubling", {"ring": 10.0})):
        Manifest(directory=path, library=LIBRARY, created="2026-12-05T09:00:00Z",
                 selection=(SelectionRow(cell, algorithm, 9.0 if cell == below else 10.0,
                                         15.0 if cell == below else 20.0, others=others),)).save()
        add_tuning(catalog, path)
    entries = Catalog.load(catalog).entries
    assert {e.cell: dict(e.others) for e in entries} == {top: {}, below: {"ring": 10.0}}
    rules = catalog_rules(tuple(entries), FakeAdapter())  # type: ignore[arg-type]
    assert rules.medians[below, "ring"] == 10.0
    # ring's gain over the default grew from 1.5x (2 nodes, not selected there) to 2x (4 nodes): carried above
    assert rules.rule_sets["allreduce"].select(64, 8) == "ring"

    db = stored_runs(tmp_path / "results.sqlite", {(2, 8, "default"): 20.0, (2, 8, "ring"): 10.0,
                                                   (2, 8, "recursive_doubling"): 15.0})
    add_stored_runs(tmp_path / "from-store", db, LIBRARY, FakeAdapter())  # type: ignore[arg-type]
    (entry,) = Catalog.load(tmp_path / "from-store").entries
    assert entry.algorithm == "ring" and dict(entry.others) == {"recursive_doubling": 15.15}


def test_a_corrupt_empty_missing_or_other_builds_store_is_refused_and_the_catalog_kept(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"}))
    before = (catalog / CATALOG_NAME).read_bytes()
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\x17" * 200)
    empty = tmp_path / "empty.sqlite"
    ResultStore(empty).close()
    other = stored_runs(tmp_path / "other.sqlite", {(4, 8, "default"): 2.0, (4, 8, "ring"): 1.0}, fingerprint="fp-two")
    for db, message in ((corrupt, "not a readable tunempi results store"), (empty, "holds no measurements"),
                        (tmp_path / "absent.sqlite", "no results store at"),
                        (other, r"holds no runs of MPICH 5.0.2 \(fp-one\).*another library build")):
        with pytest.raises(UsageError, match=message):
            add_store(catalog, db)
        with pytest.raises(UsageError, match=message):  # the build known: the same refusals
            add_stored_runs(catalog, db, LIBRARY, FakeAdapter())  # type: ignore[arg-type]
        assert (catalog / CATALOG_NAME).read_bytes() == before
    assert not (tmp_path / "absent.sqlite").exists()


def test_catalog_add_of_a_corrupt_store_exits_2_with_the_reason(tmp_path: Path) -> None:
    corrupt = tmp_path / "results.sqlite"
    corrupt.write_bytes(b"not a database at all" * 40)
    done = subprocess.run([sys.executable, "-m", "tunempi", "catalog", "add", str(corrupt), "--catalog",
                           str(tmp_path / "catalog")], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert "not a readable tunempi results store" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "catalog" / CATALOG_NAME).exists()


def test_concurrent_adds_each_keep_the_others_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two adds at once: the first, having read the catalog, lets the second start and waits until that one has
    read it too (no lock) or is waiting for the lock (the lock's on_busy): both entries must be in the end."""
    catalog = tmp_path / "catalog"
    t2 = tuning(tmp_path / "t2", {(2, 1, 2, 8): "ring"})
    t4 = tuning(tmp_path / "t4", {(4, 1, 4, 8): "ring"})
    second_read_or_waits = threading.Event()
    real_load = Catalog.load.__func__  # type: ignore[attr-defined]
    loads: list[str] = []
    errors: list[BaseException] = []

    def second() -> None:
        try:
            add_tuning(catalog, t4, on_busy=lambda lock: second_read_or_waits.set())
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            second_read_or_waits.set()

    worker = threading.Thread(target=second)

    def load(cls: type[Catalog], directory: str | Path) -> Catalog:
        found = real_load(cls, directory)
        loads.append(threading.current_thread().name)
        if len(loads) == 1:  # the first add has read the catalog: the second one starts now
            worker.start()
            assert second_read_or_waits.wait(timeout=60)
        else:
            second_read_or_waits.set()
        return found

    monkeypatch.setattr(Catalog, "load", classmethod(load))
    add_tuning(catalog, t2)
    worker.join(timeout=60)
    assert not errors and not worker.is_alive()
    assert Catalog.load(catalog).layouts() == [(2, 1, 2), (4, 1, 4)]


# -- coverage from the rule sets catalog build writes (issue 57) ------------------------------------------------


def stub_library(monkeypatch: pytest.MonkeyPatch, kind: str = "mpich") -> None:
    """The catalog's library taken as found, its adapter an MPICH or Open MPI one over no installed library
    (its rule-set capabilities only: what the files can hold)."""
    from test_rules_ppn import stub

    from tunempi.mpi.mpich import MpichAdapter
    from tunempi.mpi.openmpi import OpenMPIAdapter

    adapter = stub(MpichAdapter if kind == "mpich" else OpenMPIAdapter)
    monkeypatch.setattr("tunempi.tune.apply.tuning_library", lambda manifest, mpi=None: adapter.library)
    monkeypatch.setattr("tunempi.mpi.discovery.adapter_for", lambda library: adapter)


def catalog_cli(*args: str) -> str:
    """`tunempi catalog ARGS` in-process (a stubbed library holds): its output; exit 0 checked."""
    from typer.testing import CliRunner

    from tunempi.cli.main import build_app

    result = CliRunner().invoke(build_app("catalog"), ["catalog", *args], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def coverage_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, rows: dict, jobs_csv: str) -> dict:
    """`catalog coverage --jobs` over a catalog of `rows` ((ranks, nodes, ppn, bytes) -> algorithm), the library
    an MPICH or Open MPI one (stub_library): (nodes, ppn) -> basis."""
    stub_library(monkeypatch, kind)
    catalog = tmp_path / "catalog"
    add_tuning(catalog, tuning(tmp_path / "t", rows))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(jobs_csv)
    output = catalog_cli("coverage", "--jobs", str(jobs), "--catalog", str(catalog))
    rows_shown = [line.split(maxsplit=4) for line in output.splitlines() if line[:6].strip().isdigit()]
    return {(int(nodes), int(ppn)): basis for nodes, ppn, _, _, basis in rows_shown}


def test_coverage_classifies_a_job_by_the_rule_sets_catalog_build_writes(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """4 ranks measured as 1x4 and 4x1 with different winners, a job at 2x2: MPICH's built files key that size on
    ppn and leave 2x2 to the library (before, coverage built its rule sets without ppn levels and called it
    'measured at another ppn'); Open MPI's files act there with the fullest nodes' winner, and on 4x1 too, whose
    own winner they do not hold (before: 'measured')."""
    rows = {(4, 1, 4, size): "ring" for size in (8, 4096)}
    rows |= {(4, 4, 1, size): "recursive_doubling" for size in (8, 4096)}
    jobs = "nodes,ppn,node_hours\n1,4,10\n4,1,20\n2,2,30\n"
    assert coverage_cli(tmp_path / "mpich", monkeypatch, "mpich", rows, jobs) == {
        (1, 4): MEASURED_LAYOUT, (4, 1): MEASURED_LAYOUT, (2, 2): DEFAULT}
    assert coverage_cli(tmp_path / "openmpi", monkeypatch, "openmpi", rows, jobs) == {
        (1, 4): MEASURED_LAYOUT, (4, 1): OTHER_PPN, (2, 2): OTHER_PPN}


def test_coverage_calls_a_layout_above_the_measured_sizes_extended_where_the_policys_rules_act() -> None:
    """catalog build writes the extension policy's rules above the largest measured size (issue 57 part 2): a job
    there runs them, so it is 'extended' (before: 'library default'), still worth tuning next."""
    from tunempi.catalog.coverage import EXTENDED_LAYOUT
    from tunempi.rules.ruleset import Extension

    selection = {Cell("allreduce", ranks, 1, ranks, 8): "ring" for ranks in (2, 4)}
    extended = rule_sets_for(selection_table(selection), {"allreduce": Extension("gaining", ((8, "ring"),))})
    jobs = [JobLayout(1, 4, 1.0), JobLayout(2, 4, 5.0)]
    report = coverage(jobs, [(4, 1, 4)], extended)
    assert {c.layout.ranks: c.basis for c in report.layouts} == {4: MEASURED_LAYOUT, 8: EXTENDED_LAYOUT}
    assert [c.layout.ranks for c in report.next_to_tune()] == [8]
    none = rule_sets_for(selection_table(selection), {"allreduce": Extension("gaining", ((8, "default"),))})
    assert coverage(jobs, [(4, 1, 4)], none).layouts[1].basis == DEFAULT


def test_a_module_leaves_out_the_variables_a_library_cannot_bound_and_says_so() -> None:
    """A module is loaded before a job's layout is known: variables whose rules act at every communicator size
    (adapter.unbounded_selection_env, Intel MPI's strings) stay out of it, named in one comment line pointing to
    `tunempi run`; the rest (files that bound themselves) are set (before: every variable `run --print-env`
    prints)."""
    from tunempi.catalog.module import left_out_text, module_env
    from tunempi.rules import RuleSet

    class Unbounding:
        def unbounded_selection_env(self, collective: str) -> tuple[str, ...]:
            return (f"X_ADJUST_{collective.upper()}",) if collective == "allreduce" else ()

    rule_sets = {c: RuleSet.from_dict({"collective": c, "blocks": [
        {"min_ranks": 1, "max_ranks": None, "rules": [{"max_bytes": None, "algorithm": "ring"}]}]})
        for c in ("allreduce", "bcast")}
    manifest = Manifest(directory=Path("/t"), library=LIBRARY, scales=((2, 1, 2), (4, 2, 2)), rule_sets=rule_sets,
                        env={"X_ADJUST_ALLREDUCE": "3:0-10@2-2", "X_BCAST_FILE_DIR": "on"})
    env, left = module_env(manifest, Unbounding())  # type: ignore[arg-type]
    assert env == {"X_BCAST_FILE_DIR": "on"} and left == ("X_ADJUST_ALLREDUCE",)
    note = left_out_text(manifest, left)
    assert "X_ADJUST_ALLREDUCE is left out" in note and "tunempi run --tuning /t" in note
    assert "(2 ranks on 1 node; 4 ranks on 2 nodes (2 per node))" in note
    text = modulefile_text(env, what="w", notes=[note])
    assert "setenv X_BCAST_FILE_DIR on\n" in text and "setenv X_ADJUST" not in text and f"## {note}\n" in text


def test_a_module_of_an_open_mpi_tuning_leaves_out_libnbcs_one_value_and_keeps_the_rules_file() -> None:
    """Open MPI's coll/libnbc takes one value per non-blocking collective at every communicator size, so a module
    (loaded before a job's layout is known) leaves it out like Intel's strings (before: set, acting on every job);
    the dynamic rules file's variables, which bound themselves, are set."""
    from test_rules_ppn import stub

    from tunempi.catalog.module import left_out_text, module_env
    from tunempi.mpi.openmpi import OpenMPIAdapter
    from tunempi.rules import RuleSet

    rule_sets = {c: RuleSet.from_dict({"collective": c, "blocks": [
        {"min_ranks": 1, "max_ranks": None, "rules": [{"max_bytes": None, "algorithm": "ring"}]}]})
        for c in ("allreduce", "iallreduce")}
    rules_env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    manifest = Manifest(directory=Path("/t"), library=LIBRARY, scales=((2, 1, 2),), rule_sets=rule_sets,
                        env={**rules_env, "OMPI_MCA_coll_libnbc_iallreduce_algorithm": "1"},
                        env_files={"OMPI_MCA_coll_tuned_dynamic_rules_filename": "openmpi.rules"})
    env, left = module_env(manifest, stub(OpenMPIAdapter))
    assert env == {**rules_env, "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(Path("/t/openmpi.rules").resolve())}
    assert left == ("OMPI_MCA_coll_libnbc_iallreduce_algorithm",)
    assert "applies it at every communicator size, measured or not" in left_out_text(manifest, left)


def test_a_modulefile_that_cannot_be_written_is_a_usage_error_naming_the_path(tmp_path: Path) -> None:
    """`catalog module --out` a directory, or below a file: one line, exit 2 (before: a traceback)."""
    from tunempi.catalog.module import write_modulefile

    with pytest.raises(UsageError, match=r"is a directory: name the modulefile inside it, e\.g\. .*/site"):
        write_modulefile(tmp_path, "#%Module1.0\n")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"cannot create .*/file: .*/file is a file, not a directory"):
        write_modulefile(tmp_path / "file" / "site", "#%Module1.0\n")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_coverage_and_campaign_refuse_a_top_below_one_in_one_line(tmp_path: Path) -> None:
    """Before, --top 0 named nothing and a campaign said every layout was measured: nothing to tune."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("nodes,ppn,node_hours\n1,2,3\n")
    for command in (["coverage"], ["campaign", "--work", str(tmp_path / "w"), "--dry-run"]):
        done = subprocess.run([sys.executable, "-m", "tunempi", "catalog", *command, "--jobs", str(jobs), "--top",
                               "0", "--catalog", str(tmp_path / "c")], capture_output=True, text=True, check=False)
        assert done.returncode == 2 and done.stderr.strip() == (
            "error: --top must be at least 1 (the layouts to name as worth tuning next), got 0"), done.stderr
