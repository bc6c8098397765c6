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


def manifest(tmp_path: Path, measured: dict[int, str], scales: tuple[tuple[int, int, int], ...],
             nonblocking: tuple[int, ...] = (2,)) -> Manifest:
    """allreduce measured at `measured` ranks (rank count -> winner), bcast left to the library everywhere,
    iallreduce binomial at `nonblocking` ranks."""
    items = [("allreduce", ranks, size, winner) for ranks, winner in measured.items() for size in (8, 65536)]
    items += [("bcast", 2, 8, "default")] + [("iallreduce", ranks, 8, "binomial") for ranks in nonblocking]
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
    assert warnings == [  # libnbc's one value is left out (test below); bcast keeps the library's choice: nothing
        "OMPI_MCA_coll_libnbc_iallreduce_algorithm not exported: the job (64 ranks on 8 nodes) lies outside the "
        "layouts iallreduce measured (2 ranks on 1 node), and this library's files cannot leave other sizes to it: "
        "it keeps its own choice for every call of them in this job, sub-communicators included",
        "64 ranks lies outside what the tuning measured (2 ranks on 1 node): allreduce run the library's own "
        "choice on MPI_COMM_WORLD; communicators of a measured size keep the tuned rules"]
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
    # iallreduce not measured at 4: libnbc's value left out, said; allreduce is not
    assert [w.split(":")[0] for w in warnings] == ["OMPI_MCA_coll_libnbc_iallreduce_algorithm not exported"]
    _, across = layout_notes(tuned, JobLayout(2, 2, 1), openmpi)
    assert across[1] == ("2 ranks were measured as 2 ranks on 1 node, this job spans 2 nodes: the files tell "
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
    assert "(allreduce, iallreduce: at every communicator size, measured or not" in notes[1]
    # Open MPI's rules file bounds itself: its blocking collectives are never left out (libnbc's: the test below)
    assert left_to_library(tuned, JobLayout(16, 2, 8), openmpi).keys() == {"iallreduce"}
    assert left_to_library(tuned, JobLayout(2, 2, 1), openmpi).keys() == {"iallreduce"}


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


def test_open_mpi_libnbc_values_are_left_out_exactly_where_the_job_lies_outside_the_measured_layouts(
        tmp_path: Path) -> None:
    """Open MPI's coll/libnbc takes one value per non-blocking collective for every call and communicator size (no
    rules file reaches it), so like Intel MPI's strings `run` leaves its variable out of a job outside what the
    collective measured or interpolated (before: exported, a 2-rank measurement acting on every job); the dynamic
    rules file (allreduce) bounds itself and is never left out."""
    openmpi = adapter(OpenMPIAdapter, "openmpi")
    variable = "OMPI_MCA_coll_libnbc_iallreduce_algorithm"
    # the very variable the adapter's files set for it
    assert openmpi.unbounded_selection_env("iallreduce") == tuple(openmpi.force_env("iallreduce", "binomial")) == (
        variable,)
    assert openmpi.unbounded_selection_env("allreduce") == ()
    tuned = manifest(tmp_path, {2: "recursive_doubling", 8: "recursive_doubling"}, ((2, 1, 2), (8, 1, 8)),
                     nonblocking=(2, 8))
    for job in (JobLayout(2, 1, 2), JobLayout(8, 1, 8), JobLayout(4, 1, 4), JobLayout(2, None, None)):
        assert left_to_library(tuned, job, openmpi) == {}, job  # measured, or between two that measured it alike
    for job in (JobLayout(16, 2, 8), JobLayout(1, 1, 1), JobLayout(2, 2, 1), JobLayout(4, 4, 1)):
        assert left_to_library(tuned, job, openmpi) == {"iallreduce": (variable,)}, job
    _, warnings = layout_notes(tuned, JobLayout(16, 2, 8), openmpi)
    assert warnings[0] == (
        f"{variable} not exported: the job (16 ranks on 2 nodes) lies outside the layouts iallreduce measured (2 "
        "ranks on 1 node; 8 ranks on 1 node), and this library's files cannot leave other sizes to it: it keeps its "
        "own choice for every call of them in this job, sub-communicators included")
    assert not [w for w in warnings if w.startswith("iallreduce")]  # left out: nothing else said of it
    notes, _ = layout_notes(tuned, JobLayout(4, 1, 4), openmpi)  # kept between two sizes that measured it alike
    assert "allreduce, iallreduce take the rules both neighbours measured alike" in notes[1]
    unknown, _ = layout_notes(tuned, JobLayout(source="not a launch line"), openmpi)
    assert "(iallreduce: at every communicator size" in unknown[1]
