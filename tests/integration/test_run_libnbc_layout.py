"""`tunempi run`, `compare`, `run --print-env` and `catalog module` with an Open MPI tuning of a non-blocking
collective on a job outside the layouts it measured (issue 57).

Open MPI 5.0.11's coll/libnbc takes one value per non-blocking collective (OMPI_MCA_coll_libnbc_<coll>_algorithm)
for every call and communicator size: no rules file reaches it. A tuning made at 2 ranks therefore forced its
choice on every job and every communicator; `run` now leaves the value out of a job outside what it measured, as
it does Intel MPI's strings (test_run_impi_layout.py). Read back by the real library through the real `tunempi
run`: which iallreduce ran is the trace of a user-defined reduction (split_allreduce.c built with -DNONBLOCKING:
libnbc's ring hands the sum 1/size of the vector, its own choice here, binomial, the whole vector), no timing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_catalog_mpi import tiny_tuning
from test_tuning_bounds import BYTES, COUNT, SOURCE, trace_lines

from tunempi.compare.session import CompareRequest, RunOutcome, prepare_compare
from tunempi.compare.variants import Variant
from tunempi.errors import UsageError
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library

pytestmark = pytest.mark.mpi

VARIABLE = "OMPI_MCA_coll_libnbc_iallreduce_algorithm"


def libnbc_tuning(directory: Path) -> Path:
    """iallreduce measured at 2 ranks with libnbc's ring fastest (ring needs a commutative op, vouched for as
    `tune --assume-commutative-ops` would: split_allreduce's sum commutes)."""
    return tiny_tuning(directory, 2, "ring", vendor="openmpi", collective="iallreduce",
                       assumes=("commutative", "true-lb-zero"))


def program() -> Path:
    return build_c(resolve_library("openmpi"), [SOURCE], "split_iallreduce", extra_flags=["-DNONBLOCKING"])


def tunempi(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TUNEMPI_MPI" and not k.startswith("OMPI_MCA_coll")}
    return subprocess.run([sys.executable, "-m", "tunempi", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def launch_line(ranks: int, subsize: int) -> list[str]:
    # more ranks than this machine's cores: Open MPI's mpirun wants the word
    return ["mpiexec", "--oversubscribe", "-n", str(ranks), str(program()), str(BYTES), str(subsize)]


def test_run_leaves_a_job_outside_the_measured_layouts_to_libnbcs_own_choice(tmp_path: Path) -> None:
    directory = libnbc_tuning(tmp_path / "tuned")
    # At the measured layout the tuned ring runs (libnbc's own choice there hands the sum the whole vector).
    at_two = tunempi("run", "--tuning", str(directory), "--", *launch_line(2, 1))
    assert at_two.returncode == 0, at_two.stderr[-2000:]
    assert trace_lines(at_two.stdout)[("world", 2)] == COUNT // 2 and "not exported" not in at_two.stderr
    # Outside it (4 ranks, sub-communicators of 2), every call runs libnbc's own choice, the whole vector; before,
    # the one value forced ring on all of them (1250 on the world, 2500 on each 2-rank sub-communicator).
    at_four = tunempi("run", "--tuning", str(directory), "--", *launch_line(4, 2))
    assert at_four.returncode == 0, at_four.stderr[-2000:]
    assert trace_lines(at_four.stdout) == {("world", 4): COUNT, ("sub color=0", 2): COUNT, ("sub color=1", 2): COUNT}
    said = [line for line in at_four.stderr.splitlines() if f"{VARIABLE} not exported" in line]
    assert len(said) == 1 and "the job (4 ranks on 1 node)" in said[0], at_four.stderr


def test_print_env_compare_and_catalog_module_leave_libnbcs_value_out_as_run_does(tmp_path: Path) -> None:
    """--print-env with a launch line prints what `run` would export for that job, without one every variable and
    a line saying the value acts at every size; compare measures what run applies (outside: nothing left,
    refused); a module, loaded before any job's layout is known, never sets it: with nothing else to set, none is
    written (exit 2). Nothing is launched."""
    directory = libnbc_tuning(tmp_path / "tuned")
    inside = tunempi("run", "--tuning", str(directory), "--print-env", "--", *launch_line(2, 1))
    outside = tunempi("run", "--tuning", str(directory), "--print-env", "--", *launch_line(4, 2))
    alone = tunempi("run", "--tuning", str(directory), "--print-env")
    export = f"export {VARIABLE}=1"  # ring's id in libnbc's enum
    assert inside.returncode == outside.returncode == alone.returncode == 0, inside.stderr + outside.stderr
    assert inside.stdout.splitlines() == [export] == alone.stdout.splitlines()
    assert outside.stdout == "" and f"{VARIABLE} not exported" in outside.stderr
    assert f"{VARIABLE} acts at every communicator size, measured or not" in alone.stderr

    def launch(variant: Variant, timeout: float | None) -> RunOutcome:
        raise AssertionError("prepare_compare launches nothing")

    applied = prepare_compare(CompareRequest(launch_line(2, 1), [f"tuned={directory}"]), launch)
    assert dict(applied.variants[0].env) == {VARIABLE: "1"} and not applied.notes
    with pytest.raises(UsageError, match=f"{VARIABLE} not exported: the job \\(4 ranks on 1 node\\).*nothing to "
                                         "compare"):
        prepare_compare(CompareRequest(launch_line(4, 2), [f"tuned={directory}"]), launch)

    module = tmp_path / "modules" / "site"
    done = tunempi("catalog", "module", "--tuning", str(directory), "--out", str(module))
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "Traceback" not in said, said
    assert f"no module written, it would set nothing: {VARIABLE} is left out of the module" in said
    assert not module.exists()


def test_the_reports_shell_line_gives_print_env_the_launch_line(tmp_path: Path) -> None:
    """`report`'s "set the variables in your shell" line runs --print-env with the launch line it then runs, so the
    layout is judged there as `run` judges it (before: no launch line, the libnbc value exported for any job with
    only a warning). The command inside $(...) is run as the report prints it."""
    from tunempi.report.tuning import apply_commands
    from tunempi.tune.manifest import Manifest

    directory = libnbc_tuning(tmp_path / "tuned")
    shell_lines = [command for what, command in apply_commands(Manifest.load(directory)) if "shell" in what]
    assert len(shell_lines) == 1, shell_lines
    printed, launch = shell_lines[0].removeprefix('eval "$(').split(')"; ')
    words = shlex.split(printed)
    assert words[:2] == ["tunempi", "run"] and words[words.index("--") + 1:] == shlex.split(launch)
    done = tunempi(*words[1:])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"export {VARIABLE}=1"] and "acts at every communicator size" not in done.stderr
