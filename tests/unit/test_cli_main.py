"""The `tunempi` command registers only the subcommand it runs, and no subcommand loads the heavy numerical
libraries just to start (jobs start `tunempi` per run, per rank, per launch: each start used to cost ~1.6 s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from tunempi.cli.main import SUBCOMMANDS, build_app

#: Imported on first use only: scikit-learn with SciPy's statistics (~1 s), pandas (0.3 s: read by `simulate`
#: and the plan's replay, when they run), Optuna, Matplotlib.
HEAVY = ("sklearn", "scipy", "optuna", "matplotlib", "xgboost", "pandas")


def _names(app: typer.Typer) -> list[str]:
    return list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_the_table_names_every_subcommand_its_modules_register():
    assert sorted(_names(build_app())) == sorted(SUBCOMMANDS)


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_one_subcommand_registers_its_own_module_only(command):
    module = SUBCOMMANDS[command]
    assert sorted(_names(build_app(command))) == sorted(name for name, m in SUBCOMMANDS.items() if m == module)


def test_no_subcommand_loads_the_numerical_libraries_to_start():
    """In a fresh interpreter, as a job starts it: building each subcommand imports none of HEAVY."""
    script = ("import sys\nfrom tunempi.cli.main import SUBCOMMANDS, build_app\n"
              "for c in SUBCOMMANDS:\n    build_app(c)\n"
              f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.split() == []


def test_the_command_runs_the_subcommand_it_names_with_options_before_it(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tunempi", "report", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "tuning" in result.stdout.lower()
    unknown = subprocess.run([sys.executable, "-m", "tunempi", "tunes"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "tune" in unknown.stderr  # Click lists the real ones


def test_an_error_is_one_line_as_written_however_long(tmp_path):
    """Brackets in a message are not Rich markup (`/x/[weird]` was printed `/x/`), and a long path does not wrap
    the message at the console's width (a test looking for a phrase failed when its tmp path grew)."""
    missing = tmp_path / ("d" * 250) / "[weird]"
    result = subprocess.run([sys.executable, "-m", "tunempi", "catalog", "add", str(missing)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == f"error: {missing}: no such tuning directory or results store\n"


#: Every option that names a directory, given a file (issue 58: tracebacks of NotADirectoryError and
#: FileExistsError, and `tune --out FILE` went on tuning).
DIRECTORY_OPTIONS = (
    ["tune", "--out", "FILE"],
    ["verify", "--tuning", "FILE"],
    ["run", "--tuning", "FILE", "--", "true"],
    ["report", "--tuning", "FILE"],
    ["report", "--tuning", "DIR", "--plots", "FILE"],
    ["autotune", "--out", "FILE", "--", "true"],
    ["autotune", "--out", "FILE/sub", "--", "true"],
    ["online", "run", "--state", "FILE", "--", "true"],
    ["online", "update", "--state", "FILE"],
    ["online", "show", "--state", "FILE"],
    ["online", "best", "--out", "FILE", "--state", "DIR"],
    ["online", "best", "--out", "DIR", "--state", "FILE"],
    ["search", "--out", "FILE", "--space", "auto", "--", "true"],
    ["cluster", "status", "--dir", "FILE"],
    ["cluster", "env", "--dir", "FILE"],
)


@pytest.mark.parametrize("args", DIRECTORY_OPTIONS, ids=" ".join)
def test_a_file_where_a_directory_is_expected_is_a_usage_error(tmp_path, args):
    (tmp_path / "FILE").write_text("a file\n")
    (tmp_path / "DIR").mkdir()
    result = subprocess.run([sys.executable, "-m", "tunempi", *args], capture_output=True, text=True,
                            cwd=tmp_path, env={**os.environ, "COLUMNS": "300"}, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert re.search(r"FILE( \(in FILE/\w+\))? is a file, not a directory", result.stderr)


@pytest.mark.parametrize("args,variable", [(["online", "run", "--", "true"], "TUNEMPI_ONLINE_STATE"),
                                           (["search", "--space", "auto", "--", "true"], "TUNEMPI_SEARCH_OUT")])
def test_a_file_named_by_the_environment_as_a_directory_is_a_usage_error(tmp_path, args, variable):
    (tmp_path / "FILE").write_text("a file\n")
    env = {**os.environ, variable: "FILE"}
    result = subprocess.run([sys.executable, "-m", "tunempi", *args], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "FILE is a file, not a directory" in result.stderr


def _commands(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_no_help_text_shows_a_doubled_percent_sign():
    """Click prints help verbatim: a '%%' written as if for %-formatting reached the user (issue 58)."""
    app = build_app()
    for path, _command in _commands(typer.main.get_command(app)):
        result = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0 and "%%" not in result.output, path
