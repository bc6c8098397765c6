"""`tunempi info`: what each MPI library offers (version, device, algorithms per collective, tuning files).

The JSON shape is a contract (scripts rely on it):
{"libraries": [{"vendor", "version", "version_string", "mpi_version", "device", "prefix", "mpicc",
  "mpiexec", "embedded", "fingerprint",
  "collectives": {"allreduce": {"cvar", "default": {"name", "value"},
                                "algorithms": [{"name", "value"}, ...], "compositions": [...]?}, ...},
  "no_algorithms": ["gatherv", ...] (the collectives tunempi knows that the library offers no algorithm to
  choose from for: nothing to tune there),
  "tuning_files": [{"name", "env"}], "cvars": [...] (with --cvars), "pvars": [...] (with --cvars)}]}
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tunempi.collectives import COLLECTIVES
from tunempi.config import resolve
from tunempi.errors import UsageError
from tunempi.mpi.discovery import LibraryInfo, adapter_from_info, find_libraries, library_info
from tunempi.mpi.vendor import VendorAdapter
from tunempi.report.console import output_console

FORMATS: tuple[str, ...] = ("table", "json")
TUNING_FILE_PLACEHOLDER = "<FILE>"


def cvar_json(cvar: dict) -> dict:
    """One control variable as `info --cvars` reports it."""
    entry = {
        "name": cvar["name"],
        "type": cvar.get("datatype"),
        "scope": cvar.get("scope"),
        "default": cvar.get("value"),
        "writable": cvar.get("writable"),
        "bind": cvar.get("bind"),
        "verbosity": cvar.get("verbosity"),
        "description": cvar.get("description", ""),
    }
    if "enum" in cvar:
        entry["enum"] = cvar["enum"]
    return entry


def library_json(info: LibraryInfo, adapter: VendorAdapter, *, with_cvars: bool = False) -> dict:
    """The `info` JSON object of one library."""
    lib = info.library
    collectives: dict[str, dict] = {}
    for collective in adapter.collectives():
        default = adapter.default_algorithm(collective)
        algorithms = adapter.algorithms(collective)
        entry: dict = {
            # The MPI_T cvar that switches at run time (None: the library reads its choice at MPI_Init only),
            # and the variables that force an algorithm for a whole launch.
            "cvar": adapter.runtime_switch(collective, default.name).cvar if adapter.switches_at_run_time() else None,
            "forced_by": sorted(adapter.force_env(collective, algorithms[0].name)) if algorithms else [],
            "default": {"name": default.name, "value": default.value},
            "algorithms": [{"name": a.name, "value": a.value} for a in algorithms],
        }
        compositions = getattr(adapter, "compositions", None)
        if compositions is not None and compositions(collective):
            entry["compositions"] = [{"value": v, "description": d} for v, d in compositions(collective)]
        collectives[collective] = entry
    data: dict = {
        "vendor": lib.vendor,
        "version": lib.version,
        "version_string": lib.version_string,
        "mpi_version": f"{info.mpi_version[0]}.{info.mpi_version[1]}",
        "device": lib.device,
        "prefix": str(lib.prefix),
        "mpicc": str(lib.mpicc),
        "mpiexec": str(lib.mpiexec),
        "embedded": lib.embedded,
        "fingerprint": lib.fingerprint,
        "collectives": collectives,
        "no_algorithms": [c for c in COLLECTIVES if not collectives.get(c, {}).get("algorithms")],
        "tuning_files": [
            {"name": name, "env": adapter.tuning_file_env(name, TUNING_FILE_PLACEHOLDER)}
            for name in adapter.tuning_file_mechanisms()
        ],
        "launch_env": adapter.launch_env(),
    }
    if with_cvars:
        data["cvars"] = [cvar_json(c) for c in info.cvars]
        data["pvars"] = [
            {k: p.get(k) for k in ("name", "class", "datatype", "bind", "readonly", "description")}
            for p in info.pvars
        ]
        if info.unreadable_cvars:
            data["unreadable_cvars"] = info.unreadable_cvars
    return data


def info_json(spec: str | None, *, with_cvars: bool = False, refresh: bool = False) -> dict:
    """The whole `tunempi info --format json` document."""
    libraries = []
    for library in find_libraries(spec):
        info = library_info(library, refresh=refresh)
        libraries.append(library_json(info, adapter_from_info(info), with_cvars=with_cvars))
    return {"libraries": libraries}


def _print_tables(document: dict, console: Console, *, with_cvars: bool) -> None:
    for lib in document["libraries"]:
        head = Table.grid(padding=(0, 2))
        head.add_column(style="bold")
        head.add_column()
        head.add_row("library", f"{lib['vendor']} {lib['version']} (MPI {lib['mpi_version']})"
                     + ("  [dim]embedded[/]" if lib["embedded"] else ""))
        head.add_row("device", lib["device"] or "-")
        head.add_row("mpicc", lib["mpicc"])
        head.add_row("mpiexec", lib["mpiexec"])
        head.add_row("fingerprint", lib["fingerprint"])
        head.add_row("tuning files", ", ".join(t["name"] for t in lib["tuning_files"]) or "-")
        console.rule(f"[bold]{lib['vendor']} {lib['version']}")
        console.print(head)
        table = Table(title="collective algorithms (name=int)", title_justify="left", expand=False)
        table.add_column("collective", style="cyan", no_wrap=True)
        table.add_column("default", no_wrap=True)
        table.add_column("algorithms")
        for name, coll in lib["collectives"].items():
            algorithms = "  ".join(f"{a['name']}={a['value']}" for a in coll["algorithms"])
            if coll.get("compositions"):
                algorithms += "\n[dim]compositions: " + "; ".join(
                    f"{c['value']}={c['description']}" for c in coll["compositions"]) + "[/]"
            table.add_row(name, f"{coll['default']['name']}={coll['default']['value']}", algorithms)
        console.print(table)
        if lib.get("no_algorithms"):
            console.print(f"no algorithm to choose from (nothing to tune): {', '.join(lib['no_algorithms'])}")
        if with_cvars:
            cvars = Table(title=f"control variables ({len(lib['cvars'])})", title_justify="left")
            for column in ("name", "type", "scope", "default", "writable", "enum"):
                cvars.add_column(column, overflow="fold")
            for cvar in lib["cvars"]:
                enum = ", ".join(f"{e['name']}={e['value']}" for e in cvar.get("enum", []))
                default = cvar["default"]
                cvars.add_row(cvar["name"], cvar["type"], cvar["scope"],
                              "" if default is None else str(default), "yes" if cvar["writable"] else "no", enum)
            console.print(cvars)


def info(
    mpi: Annotated[str | None, typer.Option(
        "--mpi", envvar="TUNEMPI_MPI", show_envvar=True,
        help="mpich, openmpi, the path of an mpicc or of an install prefix; comma-separated for several. "
             "Default: every library found.")] = None,
    output_format: Annotated[str, typer.Option("--format", help="table or json")] = "table",
    cvars: Annotated[bool, typer.Option("--cvars", help="also list every MPI_T control and performance "
                                                        "variable")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="probe the libraries again instead of using "
                                                            "the cache")] = False,
) -> None:
    """Show each MPI library: version, device, the algorithms of each collective, tuning-file mechanisms."""
    if output_format not in FORMATS:
        raise UsageError(f"unknown format {output_format!r}; valid: {', '.join(FORMATS)}")
    # The first look at a library compiles and runs the probe (seconds); later ones read the cache.
    with output_console(stderr=True).status("discovering MPI libraries (probe runs once per library)"):
        document = info_json(resolve(mpi, "MPI"), with_cvars=cvars, refresh=refresh)
    if output_format == "json":
        typer.echo(json.dumps(document, indent=2))
    else:
        _print_tables(document, output_console(), with_cvars=cvars)


def register(app: typer.Typer) -> None:
    app.command("info")(info)
