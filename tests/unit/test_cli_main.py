"""The `tunempi` command registers only the subcommand it runs, and no subcommand loads the heavy numerical
libraries just to start (jobs start `tunempi` per run, per rank, per launch: each start used to cost ~1.6 s)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from tunempi.cli.main import SUBCOMMANDS, build_app

#: Imported on first use only: scikit-learn with SciPy's statistics and pandas (~1 s), Optuna, Matplotlib.
HEAVY = ("sklearn", "scipy", "optuna", "matplotlib", "xgboost")


def _names(app: typer.Typer) -> list[str]:
    return list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_the_table_names_every_subcommand_its_modules_register():
    assert sorted(_names(build_app())) == sorted(SUBCOMMANDS)


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_one_subcommand_registers_its_own_module_only(command):
    module = SUBCOMMANDS[command]
    assert sorted(_names(build_app(command))) == sorted(name for name, m in SUBCOMMANDS.items() if m == module)


def test_no_subcommand_loads_the_numerical_libraries_to_start():
    """In a fresh interpreter, as a job starts it: building each subcommand imports none of HEAVY (pandas
    only for `simulate`, which reads datasets with it)."""
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
