"""Run-time parameters without MPI: vendor spellings, name checks, --space auto, launcher env options,
the search tables of the store (migration from version 1) and the application objective."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest
from store_history import measurement_row, store_at_version

from tunempi.errors import UsageError
from tunempi.launch import HydraLauncher, OpenMPILauncher, SrunLauncher, launcher_for_argv
from tunempi.mpi import ucx
from tunempi.mpi.library import MPILibrary
from tunempi.mpi.mpich import MpichAdapter
from tunempi.mpi.openmpi import OpenMPIAdapter
from tunempi.mpi.runtime import RuntimeParameters, check_parameters
from tunempi.search.auto_space import auto_space, size_ladder
from tunempi.search.base import TrialStatus
from tunempi.search.command import CommandObjective, OutputMetrics
from tunempi.store import schema as schema_module
from tunempi.store.results import ResultStore
from tunempi.store.searches import SearchLog, SearchRun, list_searches, search_id_of


def _library(vendor: str, device: str) -> MPILibrary:
    prefix = Path("/nonexistent") / vendor
    return MPILibrary(vendor=vendor, version="9.9", version_string="", device=device, prefix=prefix,
                      mpicc=prefix / "bin" / "mpicc", mpiexec=prefix / "bin" / "mpiexec")


def _cvar(name: str, value, scope: str = "all_eq", datatype: str = "int", enum=None) -> dict:
    record = {"name": name, "value": value, "scope": scope, "datatype": datatype, "description": ""}
    if enum is not None:
        record["enum"] = enum
    return record


MPICH = MpichAdapter(_library("mpich", "ch4:ucx"), {})
OPENMPI = OpenMPIAdapter(_library("openmpi", "pml ob1; btl self,sm,tcp"), {})
MPICH_PARAMS = RuntimeParameters("mpich-9.9", {c["name"]: c for c in [
    _cvar("MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", 8192),
    _cvar("MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE", 8192),
    _cvar("MPIR_CVAR_CH4_PACK_BUFFER_SIZE", 16384, scope="local"),
    _cvar("MPIR_CVAR_CH4_OFI_EAGER_THRESHOLD", -1, scope="local"),  # "auto" sentinel: no scale
    _cvar("MPIR_CVAR_CH4_OFI_MAJOR_VERSION", 1, scope="constant"),
]}, {"UCX_RNDV_THRESH": "intra:auto,inter:auto", "UCX_ZCOPY_THRESH": "auto", "UCX_TLS": "all"})
OPENMPI_PARAMS = RuntimeParameters("openmpi-9.9", {c["name"]: c for c in [
    _cvar("btl_sm_eager_limit", 4096, scope="readonly", datatype="unsigned_long"),
    _cvar("btl_sm_fbox_threshold", 16, scope="local"),
    _cvar("btl_sm_major_version", 5, scope="constant"),
    _cvar("pml_ob1_use_all_rdma", False, scope="group", datatype="bool",
          enum=[{"name": "false", "value": 0}, {"name": "true", "value": 1}]),
]}, {})


def test_values_are_spelled_the_way_each_library_reads_them():
    assert MPICH.parameter_env("MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", 16384) == {
        "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD": "16384"}
    assert MPICH.parameter_env("MPIR_CVAR_ASYNC_PROGRESS", True) == {"MPIR_CVAR_ASYNC_PROGRESS": "1"}
    assert MPICH.parameter_env("UCX_RNDV_THRESH", 65536) == {"UCX_RNDV_THRESH": "65536"}
    assert OPENMPI.parameter_env("btl_sm_eager_limit", 8192) == {"OMPI_MCA_btl_sm_eager_limit": "8192"}
    assert OPENMPI.parameter_env("OMPI_MCA_btl_sm_eager_limit", 8192) == {"OMPI_MCA_btl_sm_eager_limit": "8192"}
    assert OPENMPI.parameter_env("UCX_TLS", "sm,self") == {"UCX_TLS": "sm,self"}
    assert OPENMPI.parameter_env("pml_ob1_use_all_rdma", False) == {"OMPI_MCA_pml_ob1_use_all_rdma": "0"}


def test_names_are_checked_with_close_matches_constants_and_missing_ucx():
    check_parameters(["MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", "UCX_RNDV_THRESH"], MPICH_PARAMS, MPICH)
    check_parameters(["btl_sm_eager_limit", "OMPI_MCA_btl_sm_fbox_threshold"], OPENMPI_PARAMS, OPENMPI)
    with pytest.raises(UsageError) as info:
        check_parameters(["MPIR_CVAR_CH4_IPC_CMA_THRESHOLD", "UCX_RNDV_THRES", "MPIR_CVAR_CH4_OFI_MAJOR_VERSION"],
                         MPICH_PARAMS, MPICH)
    message = str(info.value)
    assert "MPIR_CVAR_CH4_IPC_CMA_THRESHOLD: mpich-9.9 has no such control variable; close matches: " \
           "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD" in message
    assert "UCX_RNDV_THRES: not a UCX knob; close matches: UCX_RNDV_THRESH" in message
    assert "MPIR_CVAR_CH4_OFI_MAJOR_VERSION: a constant" in message
    with pytest.raises(UsageError, match="UCX_TLS: openmpi-9.9 does not use UCX"):
        check_parameters(["UCX_TLS"], OPENMPI_PARAMS, OPENMPI)
    with pytest.raises(UsageError, match="btl_sm_eager_limt.*close matches: btl_sm_eager_limit"):
        check_parameters(["btl_sm_eager_limt"], OPENMPI_PARAMS, OPENMPI)


def test_size_ladder_spans_default_over_16_to_times_16():
    assert size_ladder(8192) == [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    assert size_ladder(3000, below=2, above=1) == [750, 1500, 3000, 6000]
    assert size_ladder(64, low=16, below=4, above=0) == [16, 32, 64]


def test_auto_space_mpich_bounds_constraint_and_ucx_auto():
    space = auto_space(MPICH_PARAMS, MPICH)
    assert list(space.names) == ["MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE",
                                 "MPIR_CVAR_CH4_PACK_BUFFER_SIZE", "UCX_RNDV_THRESH", "UCX_ZCOPY_THRESH"]
    cma = space["MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD"]
    assert cma.default == 8192 and cma.grid()[0] == 512 and cma.grid()[-1] == 131072
    assert space["MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE"].grid()[0] == 1024  # the tunable's minimum
    rndv = space["UCX_RNDV_THRESH"]
    assert rndv.default == "intra:auto,inter:auto" and "auto" not in rndv.grid() and 65536 in rndv.grid()
    assert [c.source for c in space.constraints] == [
        "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE <= MPIR_CVAR_CH4_PACK_BUFFER_SIZE"]
    assert space.is_feasible(space.start_config())
    # The library's defaults are a point of the space: the search can always answer "keep the defaults".
    assert all(p.contains(p.default) for p in space)


def test_auto_space_openmpi_uses_settable_readonly_params_and_no_ucx():
    space = auto_space(OPENMPI_PARAMS, OPENMPI)
    assert list(space.names) == ["btl_sm_eager_limit", "btl_sm_fbox_threshold"]
    assert space["btl_sm_fbox_threshold"].grid() == (4, 8, 16, 32, 64)
    empty = RuntimeParameters("x-1", {}, {})
    with pytest.raises(UsageError, match="none of the curated"):
        auto_space(empty, OPENMPI)


def test_system_library_dirs_follow_the_platforms_multiarch_triple(monkeypatch):
    monkeypatch.setattr(ucx.sysconfig, "get_config_var", lambda name: "aarch64-linux-gnu")
    assert ucx.system_library_dirs() == [Path("/usr/lib/aarch64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib")]
    monkeypatch.setattr(ucx.sysconfig, "get_config_var", lambda name: None)  # not Debian: no triple
    assert ucx.system_library_dirs() == [Path("/usr/lib64"), Path("/usr/lib")]


def test_a_libucp_bundled_in_the_library_prefix_comes_before_the_systems(tmp_path):
    bundled = tmp_path / "lib" / "libucp.so.0"
    bundled.parent.mkdir()
    bundled.write_bytes(b"")
    library = MPILibrary(vendor="mpich", version="9.9", version_string="", device="ch4:ucx", prefix=tmp_path,
                         mpicc=tmp_path / "bin" / "mpicc", mpiexec=tmp_path / "bin" / "mpiexec")
    assert ucx.find_libucp(library) == bundled


def test_launchers_pass_variables_to_the_ranks_in_their_own_spelling():
    env = {"UCX_RNDV_THRESH": "65536", "MPIR_CVAR_X": "1"}
    assert HydraLauncher().env_args(env) == ["-genv", "MPIR_CVAR_X", "1", "-genv", "UCX_RNDV_THRESH", "65536"]
    assert OpenMPILauncher(as_root=False, cores=2).env_args(env) == ["-x", "MPIR_CVAR_X=1", "-x",
                                                                     "UCX_RNDV_THRESH=65536"]
    assert SrunLauncher().env_args(env) == []
    mpich = _library("mpich", "ch4:ucx")
    assert isinstance(launcher_for_argv(["/opt/x/bin/mpiexec.hydra", "-n", "2", "./a"], mpich), HydraLauncher)
    assert isinstance(launcher_for_argv(["srun", "./a"], mpich), SrunLauncher)
    assert launcher_for_argv(["./a.out"], mpich) is None


def test_objective_scrubs_inherited_values_and_inserts_launcher_options(tmp_path):
    script = ("import os; print('seen', os.environ.get('KNOB', 'unset'), os.environ.get('OTHER')); "
              "print('queue = 7'); print('Time in seconds = 0.25')")
    objective = CommandObjective(
        [sys.executable, "-c", script], apply=lambda params: {f"{k}": str(v) for k, v in params.items()},
        metric=re.compile(r"Time in seconds = (\S+)"), base_env={"KNOB": "inherited", "OTHER": "kept", "PATH": ""},
        scrub={"KNOB"}, sources=[OutputMetrics({"queue": re.compile(r"queue = (\d+)")})],
    )
    argv, env, settings = objective.command_for({})
    assert "KNOB" not in env and env["OTHER"] == "kept" and settings == {}
    result = objective({"KNOB": 3})
    assert result.status is TrialStatus.OK and result.value == 0.25
    assert result.metrics["queue"] == 7 and result.metrics["wall_s"] > 0
    assert objective.last_env == {"KNOB": "3"}
    with_launcher = CommandObjective(["mpiexec", "-n", "2", "./app"], apply=lambda p: {"K": "1"},
                                     env_args=HydraLauncher().env_args)
    assert with_launcher.command_for({"x": 1})[0] == ["mpiexec", "-genv", "K", "1", "-n", "2", "./app"]
    assert with_launcher.command_for({})[0] == ["mpiexec", "-genv", "K", "1", "-n", "2", "./app"]
    missing = CommandObjective(["/nonexistent/app"], apply=lambda p: {})({})
    assert missing.status is TrialStatus.FAILED and "cannot start" in missing.reason


class _Preload:
    """A MetricsSource like the interposer's: variables every rank needs, the launcher must not get."""

    def prepare(self) -> dict[str, str]:
        return {"LD_PRELOAD": "/x/libtool.so"}

    def collect(self, launch) -> dict[str, float]:
        return {}


def test_a_metrics_source_reaches_the_ranks_through_the_launcher_not_the_launcher_itself():
    through = CommandObjective(["mpiexec", "-n", "2", "./app"], apply=lambda p: {"K": "1"}, base_env={},
                               env_args=HydraLauncher().env_args, sources=[_Preload()])
    argv, env, settings = through.command_for({})
    assert argv == ["mpiexec", "-genv", "K", "1", "-genv", "LD_PRELOAD", "/x/libtool.so", "-n", "2", "./app"]
    assert "LD_PRELOAD" not in env and env["K"] == "1" and settings == {"K": "1"}
    direct = CommandObjective(["./app"], apply=lambda p: {}, base_env={}, sources=[_Preload()])
    assert direct.command_for({})[1]["LD_PRELOAD"] == "/x/libtool.so"  # no launcher: the program's own env


def test_search_log_round_trip_and_identity(tmp_path):
    header = {"strategy": "bayes", "seed": 0, "space": {"params": []}}
    with ResultStore(tmp_path / "r.sqlite") as store:
        log = SearchLog(store, header, "mpich-9.9-abc")
        log.add(SearchRun("trial", 0, {"X": 1}, "ok", 1.5, metrics={"wall_s": 2.0}, launch_argv=("a", "b"),
                          env={"X": "1"}, duration_s=2.0))
        log.add(SearchRun("verify", 0, {"X": 1}, "failed", None, "exit status 1", role="best"))
        with pytest.raises(sqlite3.IntegrityError):  # one record per run
            log.add(SearchRun("trial", 0, {"X": 2}, "ok", 1.0))
    with ResultStore(tmp_path / "r.sqlite") as store:
        again = SearchLog(store, dict(reversed(list(header.items()))))  # same header, any key order
        assert again.search_id == log.search_id == search_id_of(header)
        runs = again.runs()
        assert [(r.kind, r.number, r.role, r.status, r.value) for r in runs] == [
            ("trial", 0, "", "ok", 1.5), ("verify", 0, "best", "failed", None)]
        assert runs[0].launch_argv == ("a", "b") and dict(runs[0].metrics) == {"wall_s": 2.0}
        assert SearchLog(store, {**header, "seed": 1}).runs() == []
        assert [count for _, _, count in list_searches(store)] == [2, 0]
    with pytest.raises(UsageError, match="valid: trial, verify"):
        SearchRun("probe", 0, {}, "ok", 1.0)


def test_a_version_1_database_gains_the_search_tables_and_keeps_its_rows(tmp_path):
    from tunempi.store.results import Measurement

    row = Measurement("fp", "mpich-9.9", "allreduce", "ring", 2, 8, mean_us=1.0)
    # the row as version 1 stored it (today's add writes columns that version lacks)
    path = store_at_version(tmp_path / "v1.sqlite", 1, measurement_row(
        "allreduce", "ring", msg_bytes=8, mean_us=1.0, timestamp=row.timestamp))
    with ResultStore(path) as store:
        assert store.query() == [row]
        SearchLog(store, {"x": 1}).add(SearchRun("trial", 0, {}, "ok", 1.0))
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == schema_module.SCHEMA_VERSION
    conn.close()


def test_the_library_is_found_from_the_commands_own_launcher(tmp_path):
    from tunempi.mpi.discovery import command_library_spec as _command_library_spec

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("mpiexec.mpich", "mpicc.mpich", "mpirun", "app"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    assert _command_library_spec([str(bin_dir / "mpiexec.mpich"), "-n", "2"]) == str(bin_dir / "mpicc.mpich")
    assert _command_library_spec([str(bin_dir / "mpirun"), "-n", "2"]) is None  # no plain mpicc beside it
    assert _command_library_spec([str(bin_dir / "app")]) is None


def test_a_bare_launcher_names_no_library_and_debian_s_hydra_is_mpich_s(tmp_path, monkeypatch):
    """A bare mpiexec is the resolved library's own (issue 58): the mpicc beside PATH's first mpiexec (Debian's
    alternatives, Open MPI here) is no choice of the user's. /usr/bin/mpiexec.hydra is MPICH's, beside an
    mpicc the alternatives may point elsewhere."""
    from tunempi.mpi.discovery import command_library_spec

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("mpiexec", "mpirun", "mpicc", "mpiexec.hydra", "mpicc.mpich"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert command_library_spec(["mpiexec", "-n", "2"]) is None
    assert command_library_spec(["mpirun", "-n", "2"]) is None
    assert command_library_spec([str(bin_dir / "mpiexec"), "-n", "2"]) == str(bin_dir / "mpicc")  # a path: its own
    assert command_library_spec(["mpiexec.hydra", "-n", "2"]) == str(bin_dir / "mpicc.mpich")
