"""Tuning files loaded into the real embedded libraries (MPICH 5.0.2, Open MPI 5.0.11) at 2 ranks.

Which algorithm ran is observed deterministically, without timing: the smoke probe runs allreduce with
a user-defined commutative sum and reports the longest vector the library handed to it. Recursive
doubling reduces the whole vector at once (max_len == count); ring reduces it in pieces (< count).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tunempi.errors import TuningFileError
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.mpich import LEAF_RESTRICTIONS
from tunempi.mpi.mpich_selection import TUNING_FILE_CVAR, default_trees, find_libmpi, known_leaves
from tunempi.mpi.openmpi import select_openmpi
from tunempi.rules import SelectionTable, build_rule_sets
from tunempi.tune.smoke import SmokeResult, probe_points, smoke_check
from tunempi.writers.dynamic_rules import read_dynamic_rules, write_dynamic_rules
from tunempi.writers.selection_json import write_posix_json, write_selection_json

pytestmark = pytest.mark.mpi

OPT = Path(sys.prefix) / "opt"
BOUND = 24575  # rd measured up to 16384 B, ring from the in-between point 24576 B on
BELOW, ABOVE = 24572, 24576  # the last whole int at the bound, and the first one above it


def library(vendor: str, version: str) -> MPILibrary:
    prefix = OPT / ("mpich" if vendor == "mpich" else "openmpi")
    if not (prefix / "bin" / "mpicc").exists():
        pytest.fail(f"embedded {vendor} missing under {prefix}: run `make setup`")
    launcher = prefix / "bin" / ("mpiexec" if vendor == "mpich" else "mpirun")
    return MPILibrary(vendor, version, "", "", prefix, prefix / "bin" / "mpicc", launcher, embedded=True)


@pytest.fixture(scope="module")
def mpich() -> MPILibrary:
    return library("mpich", "5.0.2")


@pytest.fixture(scope="module")
def openmpi() -> MPILibrary:
    return library("openmpi", "5.0.11")


def allreduce_table(small: str, large: str) -> SelectionTable:
    sizes = (4, 1024, 16384, 24576, 32768, 65536)
    return SelectionTable.from_items(("allreduce", 2, s, small if s <= 16384 else large) for s in sizes)


def ran_whole_vector(result: SmokeResult, size: int) -> bool:
    seen = result.observations[("allreduce", size)]
    return seen["user_op_max_len"] == seen["count"]


POINTS = [("allreduce", BELOW), ("allreduce", ABOVE), ("allreduce", BELOW), ("allreduce", ABOVE),
          ("bcast", 4096), ("allgather", 4096), ("alltoall", 1024), ("reduce", 4096)]


# --- MPICH ------------------------------------------------------------------------------------------


def write_mpich_files(lib: MPILibrary, directory: Path, small: str, large: str) -> dict[str, str]:
    libmpi = find_libmpi(lib.prefix)
    trees = default_trees(libmpi)
    rule_sets = build_rule_sets(allreduce_table(small, large))
    if small != large:
        assert rule_sets["allreduce"].block_for(2).rules[0].max_bytes == BOUND
    mpir, posix = directory / "mpich-mpir.json", directory / "mpich-posix.json"
    mpir.write_text(write_selection_json(trees["mpir"].tree, rule_sets, restrictions=LEAF_RESTRICTIONS,
                                          known_leaves=known_leaves(libmpi)))
    posix.write_text(write_posix_json(trees["posix"].tree, rule_sets))
    return {TUNING_FILE_CVAR["mpir"]: str(mpir), TUNING_FILE_CVAR["posix"]: str(posix)}


def test_mpich_default_trees_come_from_the_library(mpich: MPILibrary) -> None:
    libmpi = find_libmpi(mpich.prefix)
    trees = default_trees(libmpi)
    assert set(trees) == {"mpir", "ch4", "posix"}
    leaves = known_leaves(libmpi)
    for found in trees.values():
        used = set(re.findall(r'"((?:algorithm|composition)=\w+)"', json.dumps(found.tree)))
        assert used and used <= leaves, used - leaves
    assert "algorithm=MPIR_Allreduce_intra_recursive_doubling" in leaves


def test_mpich_honours_the_tuned_file_and_the_inverted_file_flips(mpich: MPILibrary, tmp_path: Path) -> None:
    tuned = smoke_check(mpich, write_mpich_files(mpich, tmp_path, "recursive_doubling", "ring"), POINTS)
    assert tuned.ok, tuned.summary()
    assert ran_whole_vector(tuned, BELOW) and not ran_whole_vector(tuned, ABOVE)

    inverted_dir = tmp_path / "inverted"
    inverted_dir.mkdir()
    inverted = smoke_check(mpich, write_mpich_files(mpich, inverted_dir, "ring", "recursive_doubling"), POINTS)
    assert inverted.ok, inverted.summary()
    assert not ran_whole_vector(inverted, BELOW) and ran_whole_vector(inverted, ABOVE)


def test_mpich_without_the_posix_file_release_gather_takes_over(mpich: MPILibrary, tmp_path: Path) -> None:
    """Why the POSIX-level file exists: after a few calls the shared-memory level ignores the MPIR file."""
    env = write_mpich_files(mpich, tmp_path, "ring", "ring")
    del env[TUNING_FILE_CVAR["posix"]]
    result = smoke_check(mpich, env, [("allreduce", 40000)] * 3)  # 9 allreduce calls in all
    assert result.ok, result.summary()
    seen = result.observations[("allreduce", 40000)]  # the last (dict keeps the last line per point)
    assert seen["user_op_max_len"] != seen["count"] // 2  # not ring's half vector any more


def test_mpich_default_rules_keep_the_shared_memory_algorithm(mpich: MPILibrary, tmp_path: Path) -> None:
    """`default` below the bound: release_gather stays in charge there; ring above it."""
    env = write_mpich_files(mpich, tmp_path, "default", "ring")
    result = smoke_check(mpich, env, [("allreduce", BELOW), ("allreduce", ABOVE)] * 3)
    assert result.ok, result.summary()
    below, above = result.observations[("allreduce", BELOW)], result.observations[("allreduce", ABOVE)]
    assert below["user_op_max_len"] not in (below["count"], (below["count"] + 1) // 2)  # neither rd nor ring
    assert above["user_op_max_len"] == (above["count"] + 1) // 2  # ring: half the vector per step


def four_collective_table(names: dict[str, list[str]]) -> SelectionTable:
    """Every listed algorithm gets a size range, at 2 ranks (what one file for a real tune looks like)."""
    items = []
    sizes = [1, 4, 64, 1024, 1536, 4096, 16384, 65536, 262144]
    for collective, algorithms in names.items():
        for index, size in enumerate(sizes):
            items.append((collective, 2, size * 4, algorithms[index * len(algorithms) // len(sizes)]))
    return SelectionTable.from_items(items)


def test_mpich_runs_a_file_tuning_several_collectives(mpich: MPILibrary, tmp_path: Path) -> None:
    table = four_collective_table({
        "allreduce": ["recursive_doubling", "recursive_multiplying", "reduce_scatter_allgather", "ring"],
        "bcast": ["binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather"],
        "allgather": ["brucks", "recursive_doubling", "ring"],
        "alltoall": ["brucks", "scattered", "pairwise"],
        "reduce": ["binomial", "reduce_scatter_gather"],
    })
    rule_sets = build_rule_sets(table)
    libmpi = find_libmpi(mpich.prefix)
    trees = default_trees(libmpi)
    mpir, posix = tmp_path / "mpir.json", tmp_path / "posix.json"
    mpir.write_text(write_selection_json(trees["mpir"].tree, rule_sets, restrictions=LEAF_RESTRICTIONS,
                                         known_leaves=known_leaves(libmpi),
                                         params={("allreduce", "recursive_multiplying"): {"k": 2}}))
    posix.write_text(write_posix_json(trees["posix"].tree, rule_sets))
    points = [(c, size) for c, rule_set in rule_sets.items() for size in probe_points(rule_set)]
    result = smoke_check(mpich, {TUNING_FILE_CVAR["mpir"]: str(mpir), TUNING_FILE_CVAR["posix"]: str(posix)}, points)
    assert result.ok, result.summary()
    assert len(result.observations) == len(points) > 15


@pytest.mark.parametrize("damage", ["partial", "malformed", "unknown-algorithm"])
def test_mpich_rejects_a_bad_file_and_the_smoke_check_notices(mpich: MPILibrary, tmp_path: Path,
                                                               damage: str) -> None:
    env = write_mpich_files(mpich, tmp_path, "recursive_doubling", "ring")
    path = Path(env[TUNING_FILE_CVAR["mpir"]])
    tree = json.loads(path.read_text())
    if damage == "partial":
        text = json.dumps({"collective=allreduce": tree["collective=allreduce"]})
    elif damage == "malformed":
        text = path.read_text()[:-40]
    else:
        text = path.read_text().replace("MPIR_Allreduce_intra_ring", "MPIR_Allreduce_intra_rng")
    path.write_text(text)
    result = smoke_check(mpich, env, [("allreduce", BELOW)], timeout=60)
    assert not result.ok


# --- Open MPI -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openmpi_ids(openmpi: MPILibrary) -> dict[str, dict[str, int]]:
    """Algorithm ids as the library lists them (the vendor adapter's job in tunempi proper)."""
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    text = subprocess.run([str(openmpi.prefix / "bin" / "ompi_info"), "--param", "coll", "tuned", "--level", "9",
                           "--parsable"], capture_output=True, text=True, check=True, env=env).stdout
    ids: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) == 9 and parts[5] == "enumerator" and parts[4].endswith("_algorithm"):
            collective = parts[4][len("coll_tuned_"):-len("_algorithm")]
            ids.setdefault(collective, {})[parts[8]] = int(parts[7])
    assert ids["allreduce"]["recursive_doubling"] != ids["allreduce"]["ring"]
    return ids


def write_openmpi_file(directory: Path, ids: dict[str, dict[str, int]], small: str, large: str,
                       ranks: int = 2) -> dict[str, str]:
    sizes = (4, 1024, 16384, 24576, 32768, 65536)
    table = SelectionTable.from_items(("allreduce", ranks, s, small if s <= 16384 else large) for s in sizes)
    text = write_dynamic_rules(build_rule_sets(table), ids)
    read_dynamic_rules(text)  # Open MPI would drop a bad file silently: check it as strictly as it reads
    path = directory / f"openmpi-{small}-{large}.rules"
    path.write_text(text)
    return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(path)}


def test_openmpi_honours_the_rules_file_and_the_inverted_file_flips(openmpi: MPILibrary, openmpi_ids: dict,
                                                                   tmp_path: Path) -> None:
    tuned = smoke_check(openmpi, write_openmpi_file(tmp_path, openmpi_ids, "recursive_doubling", "ring"), POINTS)
    assert tuned.ok, tuned.summary()
    assert ran_whole_vector(tuned, BELOW) and not ran_whole_vector(tuned, ABOVE)
    inverted = smoke_check(openmpi, write_openmpi_file(tmp_path, openmpi_ids, "ring", "recursive_doubling"), POINTS)
    assert inverted.ok, inverted.summary()
    assert not ran_whole_vector(inverted, BELOW) and ran_whole_vector(inverted, ABOVE)


def test_openmpi_runs_a_file_tuning_several_collectives(openmpi: MPILibrary, openmpi_ids: dict,
                                                       tmp_path: Path) -> None:
    table = four_collective_table({
        "allreduce": ["recursive_doubling", "rabenseifner", "ring", "segmented_ring"],
        "bcast": ["binomial", "knomial", "scatter_allgather", "pipeline"],
        "allgather": ["bruck", "recursive_doubling", "ring", "two_proc"],
        "alltoall": ["modified_bruck", "pairwise", "linear_sync", "two_proc"],
        "reduce": ["binomial", "rabenseifner", "pipeline"],
    })
    rule_sets = build_rule_sets(table)
    text = write_dynamic_rules(rule_sets, openmpi_ids)
    read_dynamic_rules(text)
    path = tmp_path / "all.rules"
    path.write_text(text)
    env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(path)}
    points = [(c, size) for c, rule_set in rule_sets.items() for size in probe_points(rule_set)]
    result = smoke_check(openmpi, env, points)
    assert result.ok, result.summary()
    assert len(result.observations) == len(points) > 15


def test_openmpi_at_four_ranks(openmpi: MPILibrary, openmpi_ids: dict, tmp_path: Path) -> None:
    env = write_openmpi_file(tmp_path, openmpi_ids, "recursive_doubling", "ring", ranks=4)
    result = smoke_check(openmpi, env, [("allreduce", BELOW), ("allreduce", ABOVE)], ranks=4)
    assert result.ok, result.summary()
    assert ran_whole_vector(result, BELOW)
    seen = result.observations[("allreduce", ABOVE)]
    assert seen["user_op_max_len"] <= seen["count"] // 4 + 1  # ring: a quarter of the vector per step


def test_openmpi_ignores_a_bad_rules_file_silently(openmpi: MPILibrary, openmpi_ids: dict, tmp_path: Path) -> None:
    """Why read_dynamic_rules exists: a broken file runs 'fine' with the library's fixed decisions."""
    env = write_openmpi_file(tmp_path, openmpi_ids, "ring", "ring")
    path = Path(env["OMPI_MCA_coll_tuned_dynamic_rules_filename"])
    broken = path.read_text().replace("\n0 ", "\n8 ", 1)  # first message size no longer 0
    path.write_text(broken)
    with pytest.raises(Exception, match="first message size"):
        read_dynamic_rules(broken)
    points = [("allreduce", BELOW)]
    with_broken = smoke_check(openmpi, env, points)
    without = smoke_check(openmpi, {}, points)
    assert with_broken.ok and without.ok
    assert with_broken.observations == without.observations  # the file's "ring" had no effect


# --- the vendor adapters own the whole mechanism ----------------------------------------------------------


def test_mpich_adapter_names_what_a_file_cannot_select_and_why(tmp_path: Path) -> None:
    adapter = adapter_for(resolve_library("mpich"))
    allreduce = adapter.tuning_file_algorithms("allreduce")
    assert {"recursive_doubling", "recursive_multiplying"} <= set(allreduce.selectable)
    assert "tree_type" in allreduce.excluded["tree"] and "CCL" in allreduce.excluded["ccl"]
    # wrong for a datatype whose true lower bound is not 0, which no JSON guard can see (issue 25)
    assert "true lower bound 0" in allreduce.excluded["ring"]
    assert "ring" in adapter.assuming({"true-lb-zero"}).tuning_file_algorithms("allreduce").selectable
    assert not set(allreduce.selectable) & set(allreduce.excluded)
    assert set(allreduce.selectable) | set(allreduce.excluded) == {a.name for a in adapter.algorithms("allreduce")}

    rule_sets = build_rule_sets(allreduce_table("recursive_multiplying", "recursive_doubling"))
    written = adapter.write_tuning_files(rule_sets, tmp_path)
    assert dict(written.files) == {"mpich-mpir": "mpich-mpir.json", "mpich-posix": "mpich-posix.json"}
    assert dict(written.env_files) == {TUNING_FILE_CVAR["mpir"]: "mpich-mpir.json",
                                       TUNING_FILE_CVAR["posix"]: "mpich-posix.json"}
    k = adapter.cvar_values["MPIR_CVAR_ALLREDUCE_RECURSIVE_MULTIPLYING_KVAL"]
    assert f'"k={k}"' in (tmp_path / "mpich-mpir.json").read_text()  # the value the benchmarks ran with
    with pytest.raises(TuningFileError, match="cannot select allreduce tree: its tuning-file leaf takes tree_type"):
        adapter.write_tuning_files(build_rule_sets(allreduce_table("tree", "recursive_doubling")), tmp_path / "no")


def test_mpich_files_leave_out_the_non_blocking_leaves_that_fail_on_the_file_path() -> None:
    """Forced through the environment they run; selected by a JSON file MPICH 5.0.2 hangs or dies in them
    (iallgather tsp_brucks: SIGFPE from 28 B at 2 ranks, which a tune on a busy machine chose and its smoke check
    refused): no tuning file selects them, the library's own choice stays there."""
    adapter = adapter_for(resolve_library("mpich"))
    iallgather = adapter.tuning_file_algorithms("iallgather")
    assert "SIGFPE" in iallgather.excluded["tsp_brucks"]
    assert {"tsp_recexch_doubling", "tsp_recexch_halving"} <= set(iallgather.excluded)
    assert "sched_brucks" in iallgather.selectable  # its schedule-based twin stays
    assert {"tsp_brucks", "tsp_scattered"} <= set(adapter.tuning_file_algorithms("ialltoall").excluded)


def test_openmpi_adapter_writes_a_rules_file_it_read_back(tmp_path: Path) -> None:
    adapter = adapter_for(resolve_library("openmpi"))
    written = adapter.write_tuning_files(build_rule_sets(allreduce_table("recursive_doubling", "rabenseifner")), tmp_path)
    assert dict(written.files) == {"openmpi-rules": "openmpi.rules"}
    assert dict(written.env_files) == {"OMPI_MCA_coll_tuned_dynamic_rules_filename": "openmpi.rules"}
    assert dict(written.env) == {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    sections = read_dynamic_rules((tmp_path / "openmpi.rules").read_text())
    ids = {a.name: a.value for a in adapter.algorithms("allreduce")}
    assert select_openmpi(sections, "allreduce", 2, BELOW) == ids["recursive_doubling"]
    assert select_openmpi(sections, "allreduce", 2, ABOVE) == ids["rabenseifner"]
