"""`tunempi run` with an Intel MPI tuning on a job outside the layouts it measured (issue 57).

Intel MPI 2021.19 gives a call that no condition of `I_MPI_ADJUST_<COLL>` matches the NEAREST condition's
preset (test_tuning_bounds), so the strings cannot leave other communicator sizes to Intel's own choice; `run`
therefore exports no collective's variable for a job whose layout lies outside what that collective's rules
measured. Read back by the real library through the real `tunempi run`: which allreduce ran is the trace of a
user-defined reduction (split_allreduce.c), no timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_catalog_mpi import tiny_tuning
from test_tuning_bounds import BYTES, SOURCE, trace_lines, traces

from tunempi.compare.session import CompareRequest, RunOutcome, prepare_compare
from tunempi.compare.variants import Variant
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import adapter_for, resolve_library

pytestmark = pytest.mark.mpi


def run_under(directory: Path, ranks: int, subsize: int) -> tuple[dict[tuple[str, int], int], str]:
    library = resolve_library("impi")
    program = build_c(library, [SOURCE], "split_allreduce")
    env = {k: v for k, v in os.environ.items() if k != "TUNEMPI_MPI" and not k.startswith("I_MPI_ADJUST_")}
    done = subprocess.run([sys.executable, "-m", "tunempi", "run", "--tuning", str(directory), "--", "mpiexec",
                           "-n", str(ranks), str(program), str(BYTES), str(subsize)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return trace_lines(done.stdout), done.stderr


#: Presets the test may tune, the first whose trace differs from Intel's own choice at 2 and at 5 ranks: Intel's own
#: choice depends on the host's CPU (on AMD EPYC hosts it was not preset 8 at 2 ranks; on an Intel Xeon it is).
CANDIDATE_PRESETS = (8, 1, 9)


def test_run_leaves_a_job_outside_the_measured_layouts_to_intel_mpi(tmp_path: Path) -> None:
    library = resolve_library("impi")
    untuned = {**adapter_for(library).launch_env(), **adapter_for(library).single_node_env()}
    own_two, own_five = traces(library, untuned, 2, 1)[("world", 2)], traces(library, untuned, 5, 2)
    for preset in CANDIDATE_PRESETS:
        forced = {**untuned, "I_MPI_ADJUST_ALLREDUCE": str(preset)}
        forced_two, forced_five = traces(library, forced, 2, 1)[("world", 2)], traces(library, forced, 5, 2)
        if forced_two != own_two and forced_five != own_five:
            break
    else:
        pytest.fail(f"no preset of {CANDIDATE_PRESETS} runs other than Intel's own choice here: {own_two, own_five}")
    directory = tiny_tuning(tmp_path / "tuned", 2, f"preset_{preset}", vendor="impi")
    # At the measured layout the tuned preset runs (Intel's own choice differs there).
    at_two, said = run_under(directory, 2, 1)
    assert at_two[("world", 2)] == forced_two != own_two
    assert "not exported" not in said
    # Outside it (5 ranks, sub-communicators of 2 and 3), every call runs exactly what Intel runs untuned; before,
    # the string's nearest condition forced preset 8 on all of them.
    at_five, said = run_under(directory, 5, 2)
    assert at_five == own_five != forced_five
    lines = [line for line in said.splitlines() if "I_MPI_ADJUST_ALLREDUCE not exported" in line]
    assert len(lines) == 1 and "5 ranks" in lines[0], said


def test_compare_applies_an_intel_mpi_tuning_as_run_does(tmp_path: Path) -> None:
    """compare measures what `run` would apply: at the measured layout the strings, outside it nothing of the
    tuning, which leaves nothing to compare (exit 2, said, nothing launched)."""
    directory = tiny_tuning(tmp_path / "tuned", 2, "preset_8", vendor="impi")
    program = build_c(resolve_library("impi"), [SOURCE], "split_allreduce")

    def launch(variant: Variant, timeout: float | None) -> RunOutcome:
        raise AssertionError("prepare_compare launches nothing")

    inside = prepare_compare(CompareRequest(["mpiexec", "-n", "2", str(program), str(BYTES), "1"],
                                            [f"tuned={directory}"]), launch)
    assert dict(inside.variants[0].env) == {"I_MPI_ADJUST_ALLREDUCE": "8:0-2147483647@2-2"} and not inside.notes
    env = {k: v for k, v in os.environ.items() if k != "TUNEMPI_MPI"}
    done = subprocess.run([sys.executable, "-m", "tunempi", "compare", "--variant", f"tuned={directory}",
                           "--no-record", "--db", str(tmp_path / "db.sqlite"), "--", "mpiexec", "-n", "5",
                           str(program), str(BYTES), "2"], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    said = " ".join(done.stderr.split())  # the console wraps its lines
    assert done.returncode == 2 and "Traceback" not in said, said
    assert "I_MPI_ADJUST_ALLREDUCE not exported: the job (5 ranks on 1 node)" in said
    assert "nothing to compare" in said and not (tmp_path / "db.sqlite").exists()
