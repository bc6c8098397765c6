"""Issue 39: the figure tune measures inside one launch (algorithms switched through MPI_T) predicts what the
written tuning file does in a launch of its own, on the cases where it did not, and the engine survives the
switch that crashed it.

Not speed-dependent: each way's figure is a ratio to the library's default of the same way, taken as the
median over interleaved launches, and the bound is loose (a factor of 2 either way) next to the errors it
catches (MPICH's default read 4x off; Open MPI's allgather ring 1.05x in-launch against 2.95x under the file).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from tunempi.bench.engine import Layout
from tunempi.bench.sweep import BenchPoint
from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.mpi.discovery import adapter_for, resolve_library
from tunempi.space import Cell
from tunempi.tune.files import rule_sets_for, selection_table, write_tuning_files
from tunempi.tune.job import TUNE_SETTINGS
from tunempi.tune.runner import LayoutRunner
from tunempi.tune.verify_run import measure_under_files

pytestmark = pytest.mark.mpi

#: Medians of 7 pairs: one pair's ratio moves 2-5x at 32 KiB on a loaded 2-core machine (MPICH's default takes
#: 7-20 us there), and with 3 pairs a loaded fresh-clone `make test` once read in-launch 5.8, 5.3, 2.2 against
#: 2.3, 2.7, 2.5 under the file (2.1x). Quiet, 6 pairs: in-launch 2.6-4.6 (median 3.6), under the file 2.2-4.5 (2.7).
LAUNCHES = 7


@pytest.mark.parametrize(("mpi", "collective", "algorithm", "size"), [
    ("mpich", "allreduce", "reduce_scatter_allgather", 32 * 1024),  # SIGSEGV in the engine; default 4x off
    ("openmpi", "allgather", "ring", 64 * 1024),  # 1.05x in-launch, 2.95x under the file
])
def test_the_in_launch_figure_predicts_the_written_file(tmp_path: Path, mpi: str, collective: str, algorithm: str,
                                                        size: int) -> None:
    library = resolve_library(mpi)
    adapter = adapter_for(library)
    cell = Cell(collective, 2, 1, 2, size)
    written = write_tuning_files(tmp_path, library, adapter, rule_sets_for(selection_table({cell: algorithm})),
                                 smoke=False)
    file_env = written.activation_env(tmp_path)
    in_launch: list[float] = []
    under_file: list[float] = []
    for run in range(LAUNCHES):
        # As tune measures: one launch with strict selection, the contender first and the default after it.
        runner = LayoutRunner(library, adapter, Layout(2), settings=TUNE_SETTINGS)
        try:
            tuned = runner.measure(BenchPoint(collective, algorithm, size, run))
            default = runner.measure(BenchPoint(collective, DEFAULT_ALGORITHM, size, run))
        finally:
            runner.close()
        assert tuned.outcome.ok and default.outcome.ok, (tuned.outcome.reason, default.outcome.reason)
        assert runner.launches == 1  # the default shares the contender's launch, and the engine survived
        in_launch.append(tuned.measurement.median_us / default.measurement.median_us)  # type: ignore[operator]
        # As the application's launch sees the file: a launch under it against one without it.
        medians = {r.point.algorithm: r.measurement.median_us
                   for r in measure_under_files(library, adapter, file_env, {cell: algorithm}, [run], TUNE_SETTINGS)}
        assert None not in medians.values(), medians
        under_file.append(medians[algorithm] / medians[DEFAULT_ALGORITHM])  # type: ignore[operator]
    fidelity = statistics.median(in_launch) / statistics.median(under_file)
    assert 0.5 < fidelity < 2.0, (in_launch, under_file)
