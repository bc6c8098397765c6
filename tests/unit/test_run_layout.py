"""What `tunempi run` says of a job's layout against the layouts its tuning measured (issue 57)."""

from __future__ import annotations

from pathlib import Path

from tunempi.launch.layout import JobLayout
from tunempi.mpi.impi import IntelMPIAdapter
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.openmpi import OpenMPIAdapter
from tunempi.mpi.vendor import Algorithm, VendorAdapter
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.tune.apply import layout_notes, left_to_library
from tunempi.tune.manifest import LibraryRecord, Manifest

CATALOG = {"allreduce": [Algorithm("basic_linear", 1), Algorithm("recursive_doubling", 3)],
           "bcast": [Algorithm("linear", 1), Algorithm("binomial", 2)],
           "iallreduce": [Algorithm("recursive_doubling", 1), Algorithm("binomial", 2)]}


def adapter(kind: type[VendorAdapter], vendor: str) -> VendorAdapter:
    prefix = Path("/nonexistent") / vendor
    library = MPILibrary(vendor=vendor, version="1", version_string="", device="", prefix=prefix,
                         mpicc=prefix / "bin/mpicc", mpiexec=prefix / "bin/mpiexec")
    return kind(library, CATALOG, {c: Algorithm("default", 0) for c in CATALOG}, [])


def manifest(tmp_path: Path, measured: dict[int, str], scales: tuple[tuple[int, int, int], ...]) -> Manifest:
    """allreduce measured at `measured` ranks (rank count -> winner), bcast left to the library everywhere."""
    items = [("allreduce", ranks, size, winner) for ranks, winner in measured.items() for size in (8, 65536)]
    items += [("bcast", 2, 8, "default"), ("iallreduce", 2, 8, "binomial")]
    record = LibraryRecord("openmpi-5.0.11", "openmpi", "5.0.11", "fp", "/x", "/x/bin/mpicc")
    return Manifest(directory=tmp_path, library=record, scales=scales,
                    rule_sets=build_rule_sets(SelectionTable.from_items(items)))


def test_a_job_at_the_measured_layout_is_named_and_not_warned(tmp_path: Path) -> None:
    notes, warnings = layout_notes(manifest(tmp_path, {2: "recursive_doubling"}, ((2, 1, 2),)),
                                   JobLayout(2, 1, 2, "-n 2, this machine"), adapter(OpenMPIAdapter, "openmpi"))
    assert notes == ["the job: 2 ranks on 1 node, 2 per node (-n 2, this machine); the tuning measured 2 ranks on "
                     "1 node"]
    assert warnings == []


def test_a_larger_job_is_warned_and_what_cannot_be_bounded_is_named(tmp_path: Path) -> None:
    tuned = manifest(tmp_path, {2: "recursive_doubling"}, ((2, 1, 2),))
    notes, warnings = layout_notes(tuned, JobLayout(64, 8, 8, "-n 64"), adapter(OpenMPIAdapter, "openmpi"))
    assert warnings == [
        "64 ranks lies outside what the tuning measured (2 ranks on 1 node): allreduce run the library's own "
        "choice on MPI_COMM_WORLD; communicators of a measured size keep the tuned rules",
        "iallreduce: one value for every call and communicator size (the library cannot bound it), measured "
        "only at 2 ranks on 1 node"]  # bcast keeps the library's choice everywhere: nothing to say
    _, intel = layout_notes(tuned, JobLayout(64, 8, 8), adapter(IntelMPIAdapter, "impi"))
    assert intel == [  # left out (below), so nothing else is said of them
        "I_MPI_ADJUST_ALLREDUCE, I_MPI_ADJUST_IALLREDUCE not exported: the job (64 ranks on 8 nodes) lies outside "
        "the layouts allreduce, iallreduce measured (2 ranks on 1 node), and this library's files cannot leave "
        "other sizes to it: it keeps its own choice for every call of them in this job, sub-communicators included"]


def test_same_size_on_other_nodes_and_between_measured_sizes(tmp_path: Path) -> None:
    tuned = manifest(tmp_path, {2: "recursive_doubling", 8: "recursive_doubling"}, ((2, 1, 2), (8, 1, 8)))
    openmpi = adapter(OpenMPIAdapter, "openmpi")
    notes, warnings = layout_notes(tuned, JobLayout(4, 1, 4), openmpi)
    assert "4 ranks lies between measured sizes: allreduce take the rules both neighbours measured alike" in notes[1]
    assert [w.split(":")[0] for w in warnings] == ["iallreduce"]  # not measured at 4: said; allreduce is not
    _, across = layout_notes(tuned, JobLayout(2, 2, 1), openmpi)
    assert across[0] == ("2 ranks were measured as 2 ranks on 1 node, this job spans 2 nodes: the files tell "
                         "communicator sizes apart, not layouts, so the rules measured there act here unmeasured")
    unknown, nothing = layout_notes(tuned, JobLayout(source="not a launch line"), openmpi)
    assert "does not say how many ranks" in unknown[1] and nothing == []


def test_intel_mpi_variables_are_left_out_exactly_where_the_job_lies_outside_the_measured_layouts(
        tmp_path: Path) -> None:
    """Intel MPI's strings take the nearest condition's preset at a size none matches (test_tuning_bounds), so
    `run` leaves a collective's variable out of a job outside what its rules measured or interpolated."""
    intel, openmpi = adapter(IntelMPIAdapter, "impi"), adapter(OpenMPIAdapter, "openmpi")
    tuned = manifest(tmp_path, {2: "recursive_doubling", 8: "recursive_doubling"}, ((2, 1, 2), (8, 1, 8)))
    both = {"allreduce": ("I_MPI_ADJUST_ALLREDUCE",), "iallreduce": ("I_MPI_ADJUST_IALLREDUCE",)}
    assert left_to_library(tuned, JobLayout(2, 1, 2), intel) == {}  # measured: the tuned strings act
    assert left_to_library(tuned, JobLayout(8, 1, 8), intel) == {"iallreduce": ("I_MPI_ADJUST_IALLREDUCE",)}
    # between 2 and 8, both of one winner on one node: interpolated; iallreduce was measured at 2 only
    assert left_to_library(tuned, JobLayout(4, 1, 4), intel) == {"iallreduce": ("I_MPI_ADJUST_IALLREDUCE",)}
    assert left_to_library(tuned, JobLayout(16, 2, 8), intel) == both  # above the largest measured size
    assert left_to_library(tuned, JobLayout(1, 1, 1), intel) == both  # below the smallest
    # a measured (or interpolated) size on more nodes than were measured there is another layout
    assert left_to_library(tuned, JobLayout(2, 2, 1), intel) == both
    assert left_to_library(tuned, JobLayout(4, 4, 1), intel) == both
    assert left_to_library(tuned, JobLayout(2, None, None), intel) == {}  # nodes unknown: the size decides
    # ranks unknown: not judged, exported as they are, and the note says what that means here
    assert left_to_library(tuned, JobLayout(source="not a launch line"), intel) == {}
    notes, _ = layout_notes(tuned, JobLayout(source="not a launch line"), intel)
    assert "(allreduce, iallreduce: at every size, as the nearest measured one's rules" in notes[1]
    # MPICH's and Open MPI's files bound themselves: nothing is ever left out for them
    assert left_to_library(tuned, JobLayout(16, 2, 8), openmpi) == {}
    assert left_to_library(tuned, JobLayout(2, 2, 1), openmpi) == {}


def test_a_size_keyed_on_processes_per_node_says_which_layout_takes_its_rules(tmp_path: Path) -> None:
    """MPICH's files key 2 ranks on ppn where 1x2 and 2x1 measured different winners (issue 57): a job at either
    layout is not warned; 4 ranks measured as 1x4 and 4x1 with different winners, a 2x2 job (ppn 2, not measured)
    is told the library keeps its choice, not that the rules act unmeasured; 4 ranks on 3 nodes averages 2 per
    node as MPICH counts (ceil), likewise."""
    from tunempi.mpi.mpich import MpichAdapter
    from tunempi.rules import ScaledChoice

    layouts = {(1, 2): "recursive_doubling", (2, 1): "ring", (1, 4): "recursive_doubling", (4, 1): "ring"}
    choices = [ScaledChoice("allreduce", nodes, ppn, size, algorithm)
               for (nodes, ppn), algorithm in layouts.items() for size in (8, 65536)]
    record = LibraryRecord("mpich-5.0.2", "mpich", "5.0.2", "fp", "/x", "/x/bin/mpicc")
    tuned = Manifest(directory=tmp_path, library=record,
                     scales=tuple((n * p, n, p) for n, p in layouts),
                     rule_sets=build_rule_sets(SelectionTable.from_scaled(choices, by_ppn=True)))
    mpich = adapter(MpichAdapter, "mpich")
    for job in (JobLayout(2, 1, 2), JobLayout(2, 2, 1), JobLayout(4, 4, 1)):
        assert layout_notes(tuned, job, mpich)[1] == [], job
    for job in (JobLayout(4, 2, 2), JobLayout(4, 3, None)):
        notes, warnings = layout_notes(tuned, job, mpich)
        assert warnings == [f"4 ranks were measured as 4 ranks on 1 node; 4 ranks on 4 nodes (1 per node), this "
                            f"job spans "
                            f"{job.nodes} nodes (2 per node): allreduce key this size on processes per node and "
                            "run the library's own choice at a ppn not measured"], job
