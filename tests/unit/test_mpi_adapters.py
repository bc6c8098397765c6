"""Vendor adapters (checking, forcing, run-time switching) and SPEC resolution, without MPI."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from tunempi.errors import MPIError, UsageError
from tunempi.mpi import discovery, probe
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.mpich import MpichAdapter
from tunempi.mpi.openmpi import OpenMPIAdapter
from tunempi.mpi.vendor import Algorithm


def _library(vendor: str) -> MPILibrary:
    prefix = Path("/nonexistent") / vendor
    return MPILibrary(vendor=vendor, version="9.9", version_string="", device="", prefix=prefix,
                      mpicc=prefix / "bin" / "mpicc", mpiexec=prefix / "bin" / "mpiexec")


@pytest.fixture
def mpich_adapter() -> MpichAdapter:
    catalog = {"allreduce": [Algorithm("recursive_doubling", 3), Algorithm("ring", 8)]}
    return MpichAdapter(_library("mpich"), catalog, {"allreduce": Algorithm("auto", 0)},
                        ["MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"])


@pytest.fixture
def openmpi_adapter() -> OpenMPIAdapter:
    catalog = {"allreduce": [Algorithm("basic_linear", 1), Algorithm("ring", 4)]}
    return OpenMPIAdapter(_library("openmpi"), catalog, {"allreduce": Algorithm("ignore", 0)},
                          ["coll_tuned_dynamic_rules_filename"])


def test_unknown_algorithm_is_a_usage_error_naming_the_valid_ones(mpich_adapter, openmpi_adapter):
    with pytest.raises(UsageError, match=r"'rign'.*valid: default, auto, recursive_doubling, ring"):
        mpich_adapter.check_algorithm("allreduce", "rign")
    with pytest.raises(UsageError, match=r"valid: default, ignore, basic_linear, ring"):
        openmpi_adapter.force_env("allreduce", "recursive_halving")
    with pytest.raises(UsageError, match=r"collective 'scan'.*valid: allreduce"):
        mpich_adapter.runtime_switch("scan", "ring")


POSIX_DESCRIPTION = (
    "Variable to select algorithm for intra-node allreduce\n"
    "mpir           - Fallback to MPIR collectives\n"
    "release_gather - Force shm optimized algo using release, gather primitives\n"
    "auto - Internal algorithm selection (can be overridden with MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE)"
)


def test_mpich_forcing_pins_the_shared_memory_level_and_default_leaves_it_alone():
    from tunempi.mpi.mpich import posix_values

    values = posix_values([{"name": "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM", "description": POSIX_DESCRIPTION}])
    assert values == {"allreduce": {"mpir": 0, "release_gather": 1, "auto": 2}}
    catalog = {"allreduce": [Algorithm("recursive_doubling", 3), Algorithm("ring", 8)]}
    adapter = MpichAdapter(_library("mpich"), catalog, {"allreduce": Algorithm("auto", 0)}, posix_values=values)
    assert adapter.force_env("allreduce", "ring") == {
        "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring", "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM": "mpir"}
    assert adapter.force_env("allreduce", "default") == {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "auto"}
    assert adapter.runtime_switch("allreduce", "ring").also == (("MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM", 0),)
    assert adapter.runtime_switch("allreduce", "auto").also == (("MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM", 2),)


def test_default_has_both_spellings(mpich_adapter, openmpi_adapter):
    assert mpich_adapter.check_algorithm("allreduce", "default") == Algorithm("auto", 0)
    assert mpich_adapter.check_algorithm("allreduce", "auto") == Algorithm("auto", 0)
    assert openmpi_adapter.check_algorithm("allreduce", "default") == Algorithm("ignore", 0)


def test_mpich_forcing_and_switching(mpich_adapter):
    assert mpich_adapter.force_env("allreduce", "ring") == {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    switch = mpich_adapter.runtime_switch("allreduce", "ring")
    assert (switch.cvar, switch.value, switch.needs_new_communicator) == (
        "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", 8, False)
    assert mpich_adapter.launch_env() == {}
    assert mpich_adapter.tuning_file_mechanisms() == ["MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"]
    assert mpich_adapter.tuning_file_env("MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE", "/t.json") == {
        "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": "/t.json"}
    with pytest.raises(UsageError, match="valid: MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"):
        mpich_adapter.tuning_file_env("MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE", "/t.json")


def test_openmpi_forcing_and_switching(openmpi_adapter):
    assert openmpi_adapter.force_env("allreduce", "ring") == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}
    assert openmpi_adapter.force_env("allreduce", "default") == {}
    switch = openmpi_adapter.runtime_switch("allreduce", "basic_linear")
    assert (switch.cvar, switch.value, switch.needs_new_communicator) == (
        "coll_tuned_allreduce_algorithm", 1, True)
    assert openmpi_adapter.launch_env() == {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    assert openmpi_adapter.tuning_file_env("coll_tuned_dynamic_rules_filename", "/r.txt") == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_dynamic_rules_filename": "/r.txt"}


# ---------------------------------------------------------------------------------------- SPEC


def _fake_mpicc(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_mpi_anywhere(tmp_path, monkeypatch):
    """No embedded library and nothing on PATH."""
    monkeypatch.setattr(discovery, "embedded_prefix", lambda vendor: tmp_path / "venv" / "opt" / vendor)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("TUNEMPI_MPI", raising=False)
    monkeypatch.setenv("TUNEMPI_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_unknown_spec_word_names_the_valid_forms(no_mpi_anywhere):
    with pytest.raises(UsageError, match=r"unknown MPI spec 'intelmpi'; valid: mpich, openmpi, impi, the path"):
        discovery.candidates_for("intelmpi")


def test_missing_path_and_prefix_without_mpicc(no_mpi_anywhere):
    with pytest.raises(UsageError, match="no such file or directory"):
        discovery.candidates_for(str(no_mpi_anywhere / "nope" / "mpicc"))
    (no_mpi_anywhere / "prefix").mkdir()
    with pytest.raises(UsageError, match=r"has no bin/mpicc \(tried .*prefix/bin/mpicc"):
        discovery.candidates_for(str(no_mpi_anywhere / "prefix"))


def test_vendor_word_with_nothing_installed_says_what_was_tried(no_mpi_anywhere):
    with pytest.raises(MPIError, match=r"no mpich library found \(tried .*opt/mpich/bin/mpicc, mpicc.mpich on PATH"):
        discovery.candidates_for("mpich")
    with pytest.raises(MPIError, match="no MPI library found"):
        discovery.find_libraries(None)


def test_prefix_bin_dir_and_mpicc_paths_designate_the_same_candidate(no_mpi_anywhere):
    mpicc = _fake_mpicc(no_mpi_anywhere / "site" / "bin" / "mpicc")
    for spec in (str(mpicc), str(mpicc.parent.parent), str(mpicc.parent)):
        (candidate,) = discovery.candidates_for(spec)
        assert candidate.mpicc == mpicc and not candidate.embedded
    # Several specs, one library: deduplicated.
    assert len(discovery.candidates_for(f"{mpicc},{mpicc.parent.parent}")) == 1


def test_spec_none_lists_embedded_first_then_path(no_mpi_anywhere, monkeypatch):
    embedded = _fake_mpicc(no_mpi_anywhere / "venv" / "opt" / "openmpi" / "bin" / "mpicc")
    site = _fake_mpicc(no_mpi_anywhere / "empty-bin" / "mpicc.mpich")
    found = discovery.candidates_for(None)
    assert [c.mpicc for c in found] == [embedded, site]
    assert found[0].embedded and found[0].vendor == "openmpi"
    # `mpich` designates the site's mpicc.mpich, and asks for a library of that vendor.
    (candidate,) = discovery.candidates_for("mpich")
    assert candidate.mpicc == site and candidate.vendor == "mpich"


# ---------------------------------------------------------------------------------------- probe resume

FAKE_PROBE = r'''
import json, os, signal, sys
args = sys.argv[1:]
start = int(args[args.index("--start") + 1]) if "--start" in args else 0
skip = {int(args[i + 1]) for i, a in enumerate(args) if a == "--skip-value"}
print(json.dumps({"kind": "library", "version_string": "MPICH Version: 9.9", "mpi_version": [4, 0],
                  "num_cvars": 6, "num_pvars": 0}), flush=True)
for index in range(start, 6):
    if index == 4:
        os.kill(os.getpid(), signal.SIGSEGV)  # crashes in MPI_T_cvar_get_info, before printing
    sys.stdout.write('{"kind":"cvar","index":%d,"name":"v%d"' % (index, index))
    sys.stdout.flush()
    if index == 2 and index not in skip:
        os.kill(os.getpid(), signal.SIGSEGV)  # crashes reading the value
    value = "" if index in skip else ',"value":%d' % index
    print(value + ',"description":"d"}', flush=True)
print(json.dumps({"kind": "done"}), flush=True)
'''


def test_probe_resumes_past_variables_that_crash_it(tmp_path, monkeypatch):
    script = tmp_path / "fake_probe"
    script.write_text(f"#!{sys.executable}\n{FAKE_PROBE}")
    script.chmod(0o755)
    monkeypatch.setattr(probe, "build_probe", lambda library: script)
    output = probe.probe_library(_library("mpich"))
    assert [c["index"] for c in output.cvars] == [0, 1, 2, 3, 5]
    assert "value" not in output.cvars[2] and output.cvars[3]["value"] == 3
    assert output.unreadable == [2, 4]
    assert output.version_string == "MPICH Version: 9.9"


def test_probe_scrubs_algorithm_forcing_environment(monkeypatch):
    monkeypatch.setenv("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "no_such_algorithm")
    monkeypatch.setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1")
    monkeypatch.setenv("MPIR_CVAR_CH4_NETMOD", "ofi")
    env = probe.probe_env({"OMPI_MCA_btl": "^ofi"})
    assert "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM" not in env
    assert "OMPI_MCA_coll_tuned_use_dynamic_rules" not in env
    assert env["MPIR_CVAR_CH4_NETMOD"] == "ofi" and env["OMPI_MCA_btl"] == "^ofi"
    assert env["PATH"] == os.environ["PATH"]


def test_embedded_openmpi_launches_know_their_relocated_prefix():
    library = MPILibrary(vendor="openmpi", version="5.0.11", version_string="", device="",
                         prefix=Path("/venv/opt/openmpi"), mpicc=Path("/venv/opt/openmpi/bin/mpicc"),
                         mpiexec=Path("/venv/opt/openmpi/bin/mpirun"), embedded=True)
    adapter = OpenMPIAdapter(library, {"allreduce": [Algorithm("ring", 4)]})
    assert adapter.launch_env()["OPAL_PREFIX"] == "/venv/opt/openmpi"
    assert adapter.single_node_env() == {"OMPI_MCA_btl": "^ofi"}


def test_broken_site_mpicc_does_not_hide_others_without_spec(no_mpi_anywhere, caplog):
    _fake_mpicc(no_mpi_anywhere / "empty-bin" / "mpicc")  # exits 1: cannot build the probe
    with pytest.raises(MPIError, match=r"no usable MPI library:\n.*mpicc on PATH"):
        discovery.find_libraries(None)
    assert "skipping mpicc on PATH" in caplog.text
    # Named explicitly, the same mpicc's failure is the error itself.
    with pytest.raises(MPIError, match="building mpi_probe with .*mpicc failed"):
        discovery.find_libraries(str(no_mpi_anywhere / "empty-bin" / "mpicc"))


def test_hung_probe_is_killed_with_its_children(tmp_path, monkeypatch):
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "hanging_probe"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pid_file}\nsleep 300\n")
    script.chmod(0o755)
    monkeypatch.setattr(probe, "build_probe", lambda library: script)
    with pytest.raises(MPIError, match="hung for 1 s"):
        probe.run_probe(_library("openmpi"), timeout=1)
    child = int(pid_file.read_text())
    # The probe's own child (an orted, say) went with it; init may take a moment to reap it.
    for _ in range(50):
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            break
        if state == "Z":  # killed, waiting for a reaper that may never come in a container
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"child {child} of the hung probe survived")


# --- eager/rendezvous threshold knobs ------------------------------------------------------------------
MPICH_P2P_CVARS = {"MPIR_CVAR_CH4_CMA_ENABLE": 1, "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD": 8192,
                   "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE": 8192, "MPIR_CVAR_CH4_OFI_EAGER_THRESHOLD": -1,
                   "MPIR_CVAR_CH3_EAGER_MAX_MSG_SIZE": 131072, "MPIR_CVAR_NEMESIS_SHM_EAGER_MAX_SZ": -1}


def _mpich_with(device: str, values: dict[str, int]) -> MpichAdapter:
    library = MPILibrary("mpich", "5.0.2", "", device, Path("/nonexistent"), Path("/nonexistent/bin/mpicc"),
                         Path("/nonexistent/bin/mpiexec"))
    return MpichAdapter(library, {}, cvar_values=values)


def test_mpich_ch4_ucx_knobs_same_node_and_across_nodes() -> None:
    adapter = _mpich_with("ch4:ucx ofi", MPICH_P2P_CVARS)
    same_node = adapter.eager_threshold_knobs(intra_node=True, inter_node=False)
    assert [(k.name, k.locality, k.default, k.powers_of_two) for k in same_node] == [
        ("MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", "intra-node", 8192, False),
        ("MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE", "intra-node", 8192, True),
    ]
    across = adapter.eager_threshold_knobs(intra_node=False, inter_node=True)
    assert [(k.name, k.default) for k in across] == [("UCX_RNDV_THRESH", None)]  # ucx: the first netmod


def test_mpich_knobs_follow_the_device_and_the_cvars_the_library_has() -> None:
    ofi = _mpich_with("ch4:ofi", MPICH_P2P_CVARS).eager_threshold_knobs(intra_node=False, inter_node=True)
    assert [(k.name, k.default) for k in ofi] == [("MPIR_CVAR_CH4_OFI_EAGER_THRESHOLD", None)]  # -1: auto
    no_cma = _mpich_with("ch4:ucx", {**MPICH_P2P_CVARS, "MPIR_CVAR_CH4_CMA_ENABLE": 0}).eager_threshold_knobs()
    assert [k.name for k in no_cma] == ["MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"]
    ch3 = _mpich_with("ch3:nemesis", MPICH_P2P_CVARS).eager_threshold_knobs(inter_node=True)
    assert [k.name for k in ch3] == ["MPIR_CVAR_NEMESIS_SHM_EAGER_MAX_SZ", "MPIR_CVAR_CH3_EAGER_MAX_MSG_SIZE"]
    assert _mpich_with("ch4:ucx", {}).eager_threshold_knobs() == []  # names only where MPI_T lists them


OMPI_P2P_CVARS = {"btl_sm_eager_limit": 4096, "btl_vader_eager_limit": 4096, "btl_tcp_eager_limit": 65536}


def test_openmpi_knobs_follow_the_selected_pml() -> None:
    probed: list[int] = []

    def probe_pml() -> str:
        probed.append(1)
        return "ob1"

    adapter = OpenMPIAdapter(_library("openmpi"), {}, cvar_values=OMPI_P2P_CVARS, pml_probe=probe_pml)
    knobs = adapter.eager_threshold_knobs(intra_node=True, inter_node=True)
    assert [(k.name, k.locality, k.default) for k in knobs] == [
        ("OMPI_MCA_btl_sm_eager_limit", "intra-node", 4096), ("OMPI_MCA_btl_tcp_eager_limit", "inter-node", 65536)]
    adapter.eager_threshold_knobs()
    assert probed == [1]  # the pml is probed once per adapter
    ucx = adapter.eager_threshold_knobs(intra_node=True, inter_node=True, pml="ucx")
    assert [(k.name, k.locality) for k in ucx] == [("UCX_RNDV_THRESH", "intra-node, inter-node")]
    assert adapter.eager_threshold_knobs(pml="cm") == []  # the MTL's provider decides


def test_parse_selected_pml_from_verbose_output() -> None:
    from tunempi.mpi.openmpi import parse_selected_pml

    text = ("[vm:1] select: init returned failure for component cm\n[vm:1] select: initializing pml component ob1\n"
            "[vm:1] select: init returned priority 20\n[vm:1] selected ob1 best priority 20\n"
            "[vm:1] select: component ob1 selected\n")
    assert parse_selected_pml(text) == "ob1"
    assert parse_selected_pml("nothing here") is None


def test_mpich_refusals_are_told_from_failures_even_when_the_error_stack_was_cut(mpich_adapter: MpichAdapter) -> None:
    """MPICH's refusal of a forced algorithm under fallback=error is 'not usable', whether the engine kept
    the message or only a one-sided failure whose stack MPICH cut before its cause (smp forced through MPI_T
    on one node, measured); a failure that states another cause stays a failure."""
    adapter = mpich_adapter
    prefix = "the engine died: exit status 3: tunempi engine: rank 0: a collective call failed here "
    suffix = " but other ranks did not follow within 0 s; aborting the launch"
    assert adapter.says_not_usable("engine: Other MPI error ... MPIR_Allreduce_impl(4833): User set collective "
                                   "algorithm is not usable for the provided arguments")
    assert adapter.says_not_usable(prefix + "(Other MPI error, error stack: ... MPID_Allreduce(483)...........)"
                                   + suffix)
    assert not adapter.says_not_usable(prefix + "(Other MPI error, error stack: ... MPIR_Allreduce_impl(4833): "
                                       "Message truncated)" + suffix)
    assert not adapter.says_not_usable("no result within 30 s; job killed")


def test_mpich_names_its_refusal_text_for_the_online_mode_only_where_it_can_refuse(
        mpich_adapter: MpichAdapter, openmpi_adapter: OpenMPIAdapter) -> None:
    """The online mode reruns a drawn algorithm's error as the library's choice only when the library's error
    string says it refused the arguments (issue 38); without the strict selection MPICH refuses nothing."""
    assert mpich_adapter.refusal_messages() == ()  # no fallback cvar values discovered: no strict selection
    strict = MpichAdapter(mpich_adapter.library, {}, fallback_values={"silent": 0, "error": 1})
    (text,) = strict.refusal_messages()
    assert text in "User set collective algorithm is not usable for the provided arguments"  # 5.0.2 and 4.0.2
    assert strict.says_not_usable(text)
    assert openmpi_adapter.refusal_messages() == ()


def test_an_adapter_assuming_contiguous_datatypes_lets_files_select_what_needs_them():
    catalog = {"bcast": [Algorithm("binomial", 6), Algorithm("scatter_allgather", 8)]}
    library = MPILibrary(vendor="openmpi", version="5.0.11", version_string="", device="",
                         prefix=Path("/nonexistent"), mpicc=Path("/nonexistent/mpicc"),
                         mpiexec=Path("/nonexistent/mpiexec"))
    adapter = OpenMPIAdapter(library, catalog, {"bcast": Algorithm("ignore", 0)})
    plain = adapter.tuning_file_algorithms("bcast")
    assert plain.selectable == ("binomial",) and "contiguous" in plain.excluded["scatter_allgather"]
    # contiguous datatypes alone are not enough: scatter_allgather splits by element counts (issue 38)
    assert adapter.assuming({"contiguous", "true-lb-zero"}).tuning_file_algorithms("bcast").selectable == ("binomial",)
    assuming = adapter.assuming({"contiguous", "true-lb-zero", "same-counts"})
    assert assuming.tuning_file_algorithms("bcast").selectable == ("binomial", "scatter_allgather")
    assert adapter.assumed == frozenset()  # a copy: the original still excludes it
    with pytest.raises(UsageError, match="unknown requirement"):
        adapter.assuming({"contigous"})
