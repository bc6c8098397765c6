"""tune -> files -> verify -> run -> report for the non-blocking collectives (issue 41, step 3) on the three
embedded libraries at 2 ranks, iallreduce and ibcast at three sizes: the files each library takes for them
(MPICH's JSON, Open MPI's libnbc values, Intel's I_MPI_ADJUST_I<COLL> strings), smoke-checked in the real
library (two outstanding requests per call), then a forced non-default choice written and run with checked
results under its files, so the files path is exercised whatever the tune decided."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunempi.bench.engine import EngineSession, Layout
from tunempi.bench.protocol import MeasureSettings, PointRequest
from tunempi.mpi.discovery import adapter_for
from tunempi.rules.ruleset import CommBlock, MsgRule, RuleSet
from tunempi.tune.apply import tuning_library
from tunempi.tune.files import write_tuning_files
from tunempi.tune.job import TuneOptions, run_tune
from tunempi.tune.manifest import Manifest
from tunempi.tune.verify_run import run_verify

pytestmark = pytest.mark.mpi

FAST = MeasureSettings(warmup=1, min_iters=5, max_iters=100, rel_ci=0.1, time_cap_s=0.01)
TUNEMPI = [sys.executable, "-m", "tunempi"]


@pytest.mark.parametrize("mpi", ["mpich", "openmpi", pytest.param("impi", marks=pytest.mark.full)])
def test_nonblocking_collectives_tune_into_files_the_library_runs(tmp_path: Path, mpi: str) -> None:
    report = run_tune(TuneOptions(out=tmp_path / "tuning", collectives="iallreduce,ibcast", mpi=mpi, ranks=2,
                                  min_msg=256, max_msg=1024, timeout_s=30.0, db=tmp_path / "results.sqlite",
                                  settings=FAST, launches=1))
    manifest = report.manifest
    assert manifest is not None and not manifest.missing_files()
    assert manifest.objective == "time" and set(manifest.collectives) == {"iallreduce", "ibcast"}  # the default
    assert set(manifest.compute_us) == {row.cell for row in manifest.selection}
    assert [s.ok for s in manifest.smoke] == [True]  # loaded into the library, results checked
    library = tuning_library(manifest)
    adapter = adapter_for(library)
    for row in manifest.selection:  # the files say what the selection says, at every cell
        assert manifest.rule_sets[row.cell.collective].select(2, row.cell.msg_bytes) == row.algorithm
    if mpi == "openmpi":  # one value per collective: every cell of a collective has the same algorithm
        for collective in ("iallreduce", "ibcast"):
            assert len({row.algorithm for row in manifest.selection if row.cell.collective == collective}) == 1
        assert dict(manifest.one_choice) == {"iallreduce": "for every call", "ibcast": "for every call"}
    else:
        assert not manifest.one_choice

    verified = run_verify(manifest.directory, repeats=2, settings=FAST)  # per launch, under the files
    assert verified.summary["slower_beyond_noise_after"] == 0
    assert Manifest.load(manifest.directory).verify is not None

    # A non-default choice for both, written by the adapter, smoke-checked, then run under its files.
    forced = {c: adapter.tuning_file_algorithms(c).selectable[-1] for c in ("iallreduce", "ibcast")}
    rule_sets = {c: RuleSet(c, (CommBlock(1, None, (MsgRule(None, a),), (2,)),)) for c, a in forced.items()}
    written = write_tuning_files(tmp_path / "forced", library, adapter, rule_sets,
                                 smoke_ranks=(2,))
    assert [s.ok for s in written.smoke] == [True]
    env = {**adapter.launch_env(), **adapter.single_node_env(), **written.activation_env(tmp_path / "forced")}
    with EngineSession(library, Layout(ranks=2), env=env, point_timeout_s=60.0) as session:
        for index, collective in enumerate(("iallreduce", "ibcast")):
            outcome = session.measure(PointRequest(id=index + 1, collective=collective, msg_bytes=512,
                                                   settings=FAST))
            assert outcome.ok and outcome.reply is not None and not outcome.reply.errors, outcome.reason

    shown = subprocess.run([*TUNEMPI, "report", "--tuning", str(manifest.directory)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "iallreduce, ibcast: tuned for their time" in " ".join(shown.stdout.split())
    if mpi == "openmpi":  # the report says that a rules file cannot state sizes for them
        assert "iallreduce: one algorithm for every call" in " ".join(shown.stdout.split())
    ran = subprocess.run([*TUNEMPI, "run", "--tuning", str(manifest.directory), "--", "sh", "-c", "exit 0"],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr

