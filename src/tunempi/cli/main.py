"""The `tunempi` command: a Typer app; each subcommand lives in its own module under cli/.

Subcommand modules expose `register(app)`; they parse, call the library and print. Errors from the
library become exit statuses here: UsageError -> 2 (message names valid choices), other TunempiError -> 1.
SIGTERM, SIGINT and SIGHUP stop a command the way Ctrl-C does, end every job it started and make the
status 128 + N (launch/signals.py, docs/launch.md "Stopping a run").
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from tunempi.errors import TunempiError, UsageError
from tunempi.launch.signals import run_stoppable

#: Each subcommand's name -> the module under cli/ that registers it (one module per subcommand or group of
#: subcommands); --help lists them in this order, single commands before groups.
SUBCOMMANDS: dict[str, str] = {
    "info": "tunempi.cli.info",
    "bench": "tunempi.cli.bench",
    "simulate": "tunempi.cli.simulate",
    "tune": "tunempi.cli.tune",
    "verify": "tunempi.cli.verify",
    "run": "tunempi.cli.run",
    "report": "tunempi.cli.report",
    "export": "tunempi.cli.store",
    "import": "tunempi.cli.store",
    "profile": "tunempi.cli.profile",
    "advise": "tunempi.cli.advise",
    "search": "tunempi.cli.search",
    "online": "tunempi.cli.online",
    "compare": "tunempi.cli.compare",
    "autotune": "tunempi.cli.autotune",
    "cluster": "tunempi.cli.cluster",
    "catalog": "tunempi.cli.catalog",
}


def build_app(command: str | None = None) -> typer.Typer:
    """The Typer app with every subcommand, or (`command`, a name of SUBCOMMANDS) only the module of that one:
    importing every module costs each command's start about a second, which a job launching `tunempi` per
    run or per rank pays every time."""
    app = typer.Typer(
        name="tunempi",
        help="Autotuner for MPI collectives and runtime parameters (MPICH, Open MPI and Intel MPI).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _root() -> None:
        """Autotuner for MPI collectives and runtime parameters (MPICH, Open MPI and Intel MPI)."""
        # A callback keeps `tunempi <subcommand>` a group even while only one subcommand is registered
        # (Typer otherwise promotes a lone command to the root).

    modules = [SUBCOMMANDS[command]] if command in SUBCOMMANDS else list(dict.fromkeys(SUBCOMMANDS.values()))
    for module in modules:
        importlib.import_module(module).register(app)
    return app


def __getattr__(name: str) -> Any:
    """`tunempi.cli.main.app`: the whole app (tests invoke it in-process), built on first use."""
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _run_app() -> int:
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    app = build_app(command if command in SUBCOMMANDS else None)
    try:
        app()
    except (UsageError, TunempiError) as exc:
        from rich.markup import escape

        from tunempi.report.console import output_console  # heavy (the progress displays); errors only

        # one line however long (a log is grepped for it; paths made it wrap mid-phrase at the file width),
        # and printed as written: a bracket in a message is not markup
        output_console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
        return 2 if isinstance(exc, UsageError) else 1
    return 0


def main() -> None:
    sys.exit(run_stoppable(_run_app))


if __name__ == "__main__":
    main()
