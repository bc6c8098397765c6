"""The `tunempi` command: a Typer app; each subcommand lives in its own module under cli/.

Subcommand modules expose `register(app)`; they parse, call the library and print. Errors from the
library become exit statuses here: UsageError -> 2 (message names valid choices), other TunempiError -> 1.
SIGTERM, SIGINT and SIGHUP stop a command the way Ctrl-C does, end every job it started and make the
status 128 + N (launch/signals.py, docs/launch.md "Stopping a run").
"""

from __future__ import annotations

import importlib
import sys

import typer

from tunempi.errors import TunempiError, UsageError
from tunempi.launch.signals import run_stoppable
from tunempi.report.console import output_console

app = typer.Typer(
    name="tunempi",
    help="Autotuner for MPI collectives and runtime parameters (MPICH and Open MPI).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Autotuner for MPI collectives and runtime parameters (MPICH and Open MPI)."""
    # A callback keeps `tunempi <subcommand>` a group even while only one subcommand is registered
    # (Typer otherwise promotes a lone command to the root).


# One module per subcommand (or group of subcommands); order is the order in --help.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "tunempi.cli.info",
    "tunempi.cli.bench",
    "tunempi.cli.simulate",
    "tunempi.cli.tune",
    "tunempi.cli.verify",
    "tunempi.cli.run",
    "tunempi.cli.report",
    "tunempi.cli.store",
    "tunempi.cli.profile",
    "tunempi.cli.advise",
    "tunempi.cli.search",
    "tunempi.cli.online",
    "tunempi.cli.compare",
    "tunempi.cli.autotune",
    "tunempi.cli.cluster",
)

for _module in SUBCOMMAND_MODULES:
    importlib.import_module(_module).register(app)

_err = output_console(stderr=True)


def _run_app() -> int:
    try:
        app()
    except UsageError as exc:
        _err.print(f"[bold red]error:[/] {exc}")
        return 2
    except TunempiError as exc:
        _err.print(f"[bold red]error:[/] {exc}")
        return 1
    return 0


def main() -> None:
    sys.exit(run_stoppable(_run_app))


if __name__ == "__main__":
    main()
