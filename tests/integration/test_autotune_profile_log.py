"""autotune's profile step keeps the application's output out of autotune's (24,000 lines for miniAMR, issue 58):
the run's stdout and stderr go to a log in the work directory; a failed run shows a short tail and the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunempi.autotune.pipeline import AutotuneListener, AutotuneRequest, Context
from tunempi.autotune.steps import PROFILE_LOG, PROFILE_TAIL_LINES, LibrarySteps
from tunempi.errors import TunempiError
from tunempi.launch.launchers import LaunchSpec, launcher_for
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import resolve_library

pytestmark = pytest.mark.mpi

SOURCE = Path(__file__).parent / "c" / "allreduce_loop.c"


def _context(tmp_path: Path, command: list[str]) -> Context:
    request = AutotuneRequest(command, tmp_path / "work", mpi="mpich")
    (tmp_path / "work").mkdir()
    return Context(request, tmp_path / "work", {}, None, AutotuneListener())


def test_the_profiled_run_writes_to_a_log_not_to_autotunes_output(tmp_path: Path, capfd) -> None:
    library = resolve_library("mpich")
    program = build_c(library, [SOURCE], "allreduce_loop", werror=True)
    line = launcher_for(library).command(LaunchSpec((str(program),), 2)).argv
    ctx = _context(tmp_path, line)
    capfd.readouterr()
    result = LibrarySteps().profile(ctx)
    shown = capfd.readouterr()
    assert "bad=" not in shown.out + shown.err
    log = tmp_path / "work" / PROFILE_LOG
    assert result["log"] == str(log) and "bad=0" in log.read_text()


def test_a_failed_profiled_run_shows_a_short_tail_and_where_its_log_is(tmp_path: Path, capfd) -> None:
    library = resolve_library("mpich")
    line = launcher_for(library).command(LaunchSpec(("sh", "-c", "seq 1 500; echo gone >&2; exit 3"), 1)).argv
    ctx = _context(tmp_path, line)
    capfd.readouterr()
    with pytest.raises(TunempiError) as failed:
        LibrarySteps().profile(ctx)
    shown = capfd.readouterr()
    assert "\n250\n" not in shown.out + shown.err  # the output is in the log, not autotune's
    log = tmp_path / "work" / PROFILE_LOG
    message = str(failed.value)
    assert f"its whole output is in {log}" in message and "gone" in message
    assert "\n  482\n" in message and "\n  481\n" not in message  # the last PROFILE_TAIL_LINES lines only
    assert len(log.read_text().splitlines()) == 501 and PROFILE_TAIL_LINES == 20
