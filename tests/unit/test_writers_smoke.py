from __future__ import annotations

from pathlib import Path

from tunempi.mpi.library import MPILibrary
from tunempi.rules import SelectionTable, build_rule_set
from tunempi.tune.smoke import launch_command, parse_probe_output, probe_points


def test_probe_points_straddle_every_bound() -> None:
    table = SelectionTable.from_items(
        [("allreduce", 2, s, "recursive_doubling" if s <= 16384 else "ring") for s in (4, 16384, 24576)]
        + [("allreduce", 16, s, "ring") for s in (4, 16384)]
    )
    assert probe_points(build_rule_set(table, "allreduce")) == [4, 24572, 24576]
    assert probe_points(build_rule_set(SelectionTable.from_items([("barrier", 2, 0, "smp")]), "barrier")) == []


def test_probe_output_is_parsed_per_point() -> None:
    out = "ok allreduce 24572 user_op_max_len=6143 count=6143\nnoise\nok bcast 4096\n"
    assert parse_probe_output(out) == {("allreduce", 24572): {"user_op_max_len": 6143, "count": 6143},
                                       ("bcast", 4096): {}}


def test_launch_command_is_the_library_launchers() -> None:
    def lib(vendor: str, launcher: str) -> MPILibrary:
        prefix = Path("/opt/x")
        return MPILibrary(vendor, "1", "", "", prefix, prefix / "bin/mpicc", prefix / "bin" / launcher)

    assert launch_command(lib("mpich", "mpiexec"), 2, ["./p", "a"]).argv == ("/opt/x/bin/mpiexec", "-n", "2", "./p", "a")
    assert launch_command(lib("openmpi", "mpirun"), 4, ["./p"], as_root=True, cores=2).argv == (
        "/opt/x/bin/mpirun", "--allow-run-as-root", "-n", "4", "--oversubscribe", "./p")
