"""AITuning's state for real: what the profiling interposer measured in one application run, as named
numbers for `search --strategy rl` (a search.command.MetricsSource).

Each run gets the interposer preloaded (profile mode, TUNEMPI_PVARS=1, its own output file); after the run:
- `pvar.<name>`: every MPI_T performance variable the library offers that can be read as numbers over the
  whole run (bound to nothing, or to a communicator: MPI_COMM_WORLD), summed over the ranks. Counted at 2
  ranks: the MPICH 5.0.2 wheel offers none, Debian's MPICH 4.0.2 none, Open MPI 5.0.11 20 (3 readable so),
  Debian's Open MPI 4.1.4 46 (3 readable so; its mtl_psm2_* ones crash handle allocation and are skipped);
  docs/search.md lists them;
- timers and counts that complete the state where pvars are few: `mpi_s`, `collective_s`, `p2p_s` (summed
  over ranks), `wall_max_s` (the longest rank), `calls.<collective>` and `time.<collective>` (rank-summed).
rl divides every one by its value in the first run (the reference), as AITuning does.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from tunempi.errors import UsageError
from tunempi.profile.reader import load_profile

if TYPE_CHECKING:
    from tunempi.launch import LaunchResult
    from tunempi.mpi.library import MPILibrary


class InterposerMetrics:
    """A MetricsSource: the interposer's profile of each run, read back as numbers."""

    def __init__(self, interposer: Path) -> None:
        self.interposer = interposer
        self._output: Path | None = None

    @classmethod
    def for_library(cls, library: MPILibrary) -> InterposerMetrics:
        from tunempi.profile.build import build_interposer

        return cls(build_interposer(library))

    def prepare(self) -> dict[str, str]:
        from tunempi.profile.run import interposer_env

        handle, name = tempfile.mkstemp(prefix="tunempi-state-", suffix=".json")
        os.close(handle)
        os.unlink(name)  # the interposer writes it; its absence after a run means no profile
        self._output = Path(name)
        return {**interposer_env(self.interposer, self._output), "TUNEMPI_PVARS": "1"}

    def collect(self, launch: LaunchResult) -> dict[str, float]:
        if self._output is None or not self._output.exists():
            return {}
        try:
            profile = load_profile(self._output)
        except UsageError:
            return {}
        finally:
            self._output.unlink(missing_ok=True)
        return profile_metrics(profile)


def profile_metrics(profile) -> dict[str, float]:
    """The named numbers of one profiled run (module docstring)."""
    metrics = {"mpi_s": profile.mpi_s, "collective_s": profile.collective_s, "p2p_s": profile.p2p_s,
               "wall_max_s": profile.elapsed_s}
    calls: dict[str, float] = defaultdict(float)
    seconds: dict[str, float] = defaultdict(float)
    for record in profile.collectives:
        calls[record.collective] += record.calls
        seconds[record.collective] += record.time_s
    metrics.update({f"calls.{name}": value for name, value in calls.items()})
    metrics.update({f"time.{name}": value for name, value in seconds.items()})
    for name, value in profile.pvars.items():
        if value is not None:
            metrics[f"pvar.{name}"] = float(value["sum"])
    return metrics
