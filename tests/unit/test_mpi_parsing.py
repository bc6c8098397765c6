"""Algorithm catalogs from what the libraries print: MPICH descriptions (both formats), Open MPI enums/ompi_info."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunempi.errors import MPIError
from tunempi.mpi import mpich, openmpi
from tunempi.mpi.discovery import parse_version_string
from tunempi.mpi.vendor import Algorithm

# MPICH 5.0.2, verbatim from MPI_T_cvar_get_info (one entry per line, "auto" unaligned).
MPICH5_ALLREDUCE = (
    "Variable to select allreduce algorithm\n"
    "auto - Internal algorithm selection (can be overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)\n"
    "nb                       - Force nonblocking algorithm\n"
    "smp                      - Force smp algorithm\n"
    "recursive_doubling       - Force recursive doubling algorithm\n"
    "recursive_multiplying    - Force recursive multiplying algorithm\n"
    "reduce_scatter_allgather - Force reduce scatter allgather algorithm\n"
    "tree                     - Force pipelined tree algorithm\n"
    "recexch                  - Force generic transport recursive exchange algorithm\n"
    "ring                     - Force ring algorithm\n"
    "k_reduce_scatter_allgather - Force reduce scatter allgather algorithm\n"
    "ccl                      - Force CCL algorithm"
)
# MPICH 5.0.2 shared-memory level: "auto" comes LAST, so it is not always 0.
MPICH5_POSIX_ALLREDUCE = (
    "Variable to select algorithm for intra-node allreduce\n"
    "mpir           - Fallback to MPIR collectives\n"
    "release_gather - Force shm optimized algo using release, gather primitives\n"
    "auto - Internal algorithm selection (can be overridden with "
    "MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE)"
)

# MPICH 3.4/4.0.x: the generated C glued the lines together (backslash-newline inside a string literal).
MPICH4_ALLREDUCE = (
    "Variable to select allreduce algorithm"
    "auto - Internal algorithm selection (can be overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)"
    "nb                       - Force nonblocking algorithm"
    "smp                      - Force smp algorithm"
    "recursive_doubling       - Force recursive doubling algorithm"
    "reduce_scatter_allgather - Force reduce scatter allgather algorithm"
)
MPICH4_BCAST = (
    "Variable to select bcast algorithm"
    "auto - Internal algorithm selection (can be overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)"
    "binomial                                - Force Binomial Tree"
    "nb                                      - Force nonblocking algorithm"
    "smp                                     - Force smp algorithm"
    "scatter_recursive_doubling_allgather    - Force Scatter Recursive-Doubling Allgather"
    "scatter_ring_allgather                  - Force Scatter Ring"
)
MPICH4_ALLTOALL = (
    "Variable to select alltoall algorithm"
    "auto - Internal algorithm selection (can be overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)"
    "brucks                    - Force brucks algorithm"
    "nb                        - Force nonblocking algorithm"
    "pairwise                  - Force pairwise algorithm"
    "pairwise_sendrecv_replace - Force pairwise sendrecv replace algorithm"
    "scattered                 - Force scattered algorithm"
)


def test_mpich5_line_format_gives_names_in_int_order():
    names = mpich.parse_algorithm_description(MPICH5_ALLREDUCE)
    assert names[0] == "auto"
    assert names.index("recursive_doubling") == 3
    assert names.index("ring") == 8  # 5.0.2 measured int (4.0.2 has no ring)
    assert names[-1] == "ccl" and len(names) == 11


def test_mpich5_auto_last_keeps_its_position():
    assert mpich.parse_algorithm_description(MPICH5_POSIX_ALLREDUCE) == ["mpir", "release_gather", "auto"]


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        # The ints MPICH 4.0.2 reads back through MPI_T after setting the env var (docs/mpi-facts.md).
        (MPICH4_ALLREDUCE, ["auto", "nb", "smp", "recursive_doubling", "reduce_scatter_allgather"]),
        (MPICH4_BCAST, ["auto", "binomial", "nb", "smp", "scatter_recursive_doubling_allgather",
                        "scatter_ring_allgather"]),
        (MPICH4_ALLTOALL, ["auto", "brucks", "nb", "pairwise", "pairwise_sendrecv_replace", "scattered"]),
    ],
)
def test_mpich4_glued_format_is_split_back_into_names(description, expected):
    assert "\n" not in description
    assert mpich.parse_algorithm_description(description) == expected


def test_mpich4_glued_format_resists_misleading_vocabulary():
    # "algorithms" would cut "algorithmsmp" into "algorithms" + "mp"; the column alignment must win.
    vocabulary = {"algorithms", "Tre", "n", "Allgathers", "a"}
    assert mpich.parse_algorithm_description(MPICH4_BCAST, vocabulary) == [
        "auto", "binomial", "nb", "smp", "scatter_recursive_doubling_allgather", "scatter_ring_allgather"]
    assert mpich.parse_algorithm_description(MPICH4_ALLREDUCE, vocabulary)[1:3] == ["nb", "smp"]


def test_mpich_composition_numbers_inside_text_are_not_entries():
    text = ("Select composition (inter_node + intra_node) for Bcast 0 Auto selection 1 NM + SHM with explicit "
            "send-recv between rank 0 and root 2 NM + SHM without the explicit send-recv 3 NM only")
    assert mpich.parse_composition_description(text) == [
        (0, "Auto selection"),
        (1, "NM + SHM with explicit send-recv between rank 0 and root"),
        (2, "NM + SHM without the explicit send-recv"),
        (3, "NM only"),
    ]
    assert mpich.parse_composition_description("Defines the location of tuning file.") == []


MPICH5_IALLREDUCE = (
    "Variable to select iallreduce algorithm\n"
    "auto - Internal algorithm selection (can be overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)\n"
    "sched_auto - Internal algorithm selection for sched-based algorithms\n"
    "sched_naive                      - Force naive algorithm\n"
    "tsp_tree                     - Force generic transport tree algorithm"
)
MPICH4_IBCAST = (
    "Variable to select ibcast algorithmauto - Internal algorithm selection (can be overridden with "
    "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)sched_auto - Internal algorithm selection for sched-based "
    "algorithmssched_binomial                             - Force Binomial algorithmtsp_tree         "
    "                      - Force Generic Transport Tree algorithm"
)


def test_mpich_catalog_from_cvars_separates_auto():
    cvars = [
        {"name": "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "description": MPICH5_ALLREDUCE},
        {"name": "MPIR_CVAR_BCAST_INTRA_ALGORITHM", "description": MPICH4_BCAST},
        {"name": "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM", "description": MPICH5_IALLREDUCE},
        # MPICH 4.0.x's glued format of a non-blocking cvar: its names cannot be read back, so it is left out.
        {"name": "MPIR_CVAR_IBCAST_INTRA_ALGORITHM", "description": MPICH4_IBCAST},
    ]
    catalog, defaults = mpich.catalog_from_cvars(cvars)
    assert set(catalog) == {"allreduce", "bcast", "iallreduce"}
    # Non-blocking (issue 41): auto is the default, sched_auto (another internal selection) no algorithm.
    assert defaults["iallreduce"] == Algorithm("auto", 0)
    assert catalog["iallreduce"] == [Algorithm("sched_naive", 2), Algorithm("tsp_tree", 3)]
    assert defaults["allreduce"].name == "auto" and defaults["allreduce"].value == 0
    assert "auto" not in [a.name for a in catalog["allreduce"]]
    assert {a.name: a.value for a in catalog["bcast"]}["scatter_ring_allgather"] == 5


def test_openmpi_valid_values_both_formats():
    five = 'Valid values: 0|ignore, 1|basic_linear, 2|nonoverlapping, 3|recursive_doubling, 4|ring'
    four = 'Valid values: 0:"ignore", 1:"basic_linear", 2:"nonoverlapping", 3:"recursive_doubling"'
    assert openmpi.parse_valid_values(five)[:4] == openmpi.parse_valid_values(four)
    assert openmpi.parse_valid_values(five)[4] == (4, "ring")
    assert openmpi.parse_valid_values("no such line") == []


def test_openmpi_ompi_info_text_gives_a_catalog():
    text = '''
          MCA coll tuned: parameter "coll_tuned_allreduce_algorithm" (current value: "ignore", data source: default, level: 5 tuner/detail, type: int)
                          Which allreduce algorithm is used. Can be locked down to any of: 0 ignore, 1 basic linear, 2 nonoverlapping (tuned reduce + tuned bcast), 3 recursive doubling, 4 ring, 5 segmented ring.
                          Valid values: 0|ignore, 1|basic_linear, 2|nonoverlapping, 3|recursive_doubling, 4|ring, 5|segmented_ring, 6|rabenseifner
          MCA coll tuned: parameter "coll_tuned_allreduce_algorithm_segmentsize" (current value: "0", data source: default, level: 5 tuner/detail, type: int)
                          Segment size in bytes used by default for allreduce algorithms.
          MCA coll tuned: parameter "coll_tuned_allgatherv_algorithm" (current value: "ignore", data source: default, level: 5 tuner/detail, type: int)
                          Valid values: 0|ignore, 1|default, 2|bruck
'''
    items = openmpi.parse_ompi_info_catalog(text)
    assert set(items) == {"coll_tuned_allreduce_algorithm", "coll_tuned_allgatherv_algorithm"}
    catalog, defaults = openmpi.catalog_from_items(items)
    assert [a.name for a in catalog["allreduce"]][-1] == "rabenseifner"
    assert defaults["allreduce"].name == "ignore"
    # Open MPI's own "default" algorithm must not shadow tunempi's `default` (= the library's choice).
    assert [(a.name, a.value) for a in catalog["allgatherv"]] == [("default_1", 1), ("bruck", 2)]


def test_openmpi_enum_items_from_probe_records():
    cvars = [
        {"name": "coll_tuned_bcast_algorithm", "enum": [{"name": "ignore", "value": 0},
                                                         {"name": "binomial", "value": 6}]},
        {"name": "coll_tuned_use_dynamic_rules", "enum": [{"name": "false", "value": 0}]},
        {"name": "coll_tuned_reduce_algorithm"},  # no enum: left to the ompi_info fallback
    ]
    assert openmpi.enum_items_from_cvars(cvars) == {"coll_tuned_bcast_algorithm": [(0, "ignore"), (6, "binomial")]}


def test_openmpi_nonblocking_catalog_from_libnbc_enums():
    """Issue 41: coll/libnbc's enums (5.0.11's, as probed) give the non-blocking algorithms; ialltoall has none."""
    cvars = [
        {"name": "coll_libnbc_iallreduce_algorithm",
         "enum": [{"name": n, "value": v} for v, n in enumerate(["ignore", "ring", "binomial", "rabenseifner",
                                                                  "recursive_doubling"])]},
        {"name": "coll_libnbc_ibcast_algorithm",
         "enum": [{"name": n, "value": v} for v, n in enumerate(["ignore", "linear", "binomial", "chain", "knomial"])]},
    ]
    catalog, defaults = openmpi.catalog_from_items(openmpi.enum_items_from_cvars(cvars))
    assert set(catalog) == {"iallreduce", "ibcast"}
    assert defaults["iallreduce"] == Algorithm("ignore", 0)
    assert [(a.name, a.value) for a in catalog["ibcast"]] == [("linear", 1), ("binomial", 2), ("chain", 3), ("knomial", 4)]
    assert openmpi.algorithm_cvar("iallgather") == "coll_libnbc_iallgather_algorithm"


def test_version_strings():
    mpich_text = "MPICH Version:      5.0.2\nMPICH Release date: x\nMPICH Device:       ch4:ucx ofi\n"
    assert parse_version_string(mpich_text) == ("mpich", "5.0.2", "ch4:ucx ofi")
    ompi_text = "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11"
    assert parse_version_string(ompi_text) == ("openmpi", "5.0.11", "")
    with pytest.raises(MPIError, match="unsupported MPI library 'Spectrum"):
        parse_version_string("Spectrum something 10.4")


def test_real_mpich_4_0_2_descriptions_parse_to_the_ints_mpich_reads_back():
    """Every INTRA_ALGORITHM description of a real MPICH 4.0.2 (glued format), against the ints that
    library read back through MPI_T after the env var was set to each name."""
    data = json.loads((Path(__file__).parent / "data" / "mpich-4.0.2-algorithm-cvars.json").read_text())
    assert len(data["cvars"]) >= 9
    for cvar in data["cvars"]:
        assert "\n" not in cvar["description"]
        names = mpich.parse_algorithm_description(cvar["description"])
        assert {name: value for value, name in enumerate(names)} == cvar["verified"], cvar["name"]


def test_mpich_fallback_policy_values():
    description = ("Variable to control what the MPI library should do if the\nuser-specified collective "
                   "algorithm does not work for the\narguments passed in by the user.\nerror   - throw an error\n"
                   "print   - print an error message and fallback to the internally selected algorithm\n"
                   "silent  - silently fallback to the internally selected algorithm")
    cvars = [{"name": "MPIR_CVAR_COLLECTIVE_FALLBACK", "description": description}]
    assert mpich.fallback_values(cvars) == {"error": 0, "print": 1, "silent": 2}
    assert mpich.fallback_values([]) == {}
