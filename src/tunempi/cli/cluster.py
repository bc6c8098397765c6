"""`tunempi cluster start|stop|status|env`: an emulated cluster of named nodes (and Slurm) on this machine."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tunempi.cli.paths import directory_option
from tunempi.launch.cluster import ClusterStatus, EmulatedCluster

cluster_app = typer.Typer(help="An emulated cluster on this machine: named nodes, a hostfile, optionally Slurm.",
                          no_args_is_help=True)
_out = Console(highlight=False)

DirOption = Annotated[Path | None, typer.Option(
    "--dir", help="State directory (env TUNEMPI_CLUSTER_DIR; default $XDG_STATE_HOME/tunempi/cluster).",
    show_default=False, callback=directory_option)]


def _show(status: ClusterStatus, cluster: EmulatedCluster) -> None:
    _out.print(f"emulated cluster in {cluster.dir}: [bold]{status.state}[/]")
    if status.nodes:
        _out.print(f"nodes: {' '.join(status.nodes)} ({status.slots} slots each); hostfile {cluster.hostfile}")
    for daemon, alive in status.daemons:
        _out.print(f"  {daemon.role:<14} pid {daemon.pid:<8} {'alive' if alive else 'DEAD'}")
    if status.sinfo:
        _out.print(status.sinfo)
    if status.state == "stale":
        _out.print(f"stale: {status.strays} process(es) left; `tunempi cluster stop` cleans up")


@cluster_app.command("start")
def start_command(
    nodes: Annotated[int, typer.Option(help="Number of nodes (named n1, n2, ...).")] = 4,
    slots: Annotated[int | None, typer.Option(help="Slots per node (default: this machine's cores).")] = None,
    slurm: Annotated[bool, typer.Option("--slurm/--no-slurm", help="Also run a private Slurm cluster.")] = False,
    group_size: Annotated[int, typer.Option(help="Nodes per network switch in Slurm's topology.conf.")] = 2,
    state_dir: DirOption = None,
) -> None:
    """Bring up N named nodes (and Slurm); prints the variables to use them (eval "$(tunempi cluster env)")."""
    cluster = EmulatedCluster(state_dir)
    began = time.monotonic()
    status = cluster.start(nodes, slots=slots, slurm=slurm, group_size=group_size)
    _show(status, cluster)
    _out.print(f"up in {time.monotonic() - began:.2f} s; use it with: eval \"$(tunempi cluster env"
               f"{'' if state_dir is None else ' --dir ' + shlex.quote(str(state_dir))})\"")


@cluster_app.command("stop")
def stop_command(state_dir: DirOption = None) -> None:
    """Stop every daemon and job of the cluster and remove its runtime files (logs stay)."""
    cluster = EmulatedCluster(state_dir)
    began = time.monotonic()
    ended = cluster.stop()
    _out.print(f"emulated cluster in {cluster.dir} stopped ({ended} process(es) ended, "
               f"{time.monotonic() - began:.2f} s)")


@cluster_app.command("status")
def status_command(state_dir: DirOption = None) -> None:
    """Nodes, daemons and (with Slurm) sinfo; exit status 1 when the cluster is stale, 3 when stopped."""
    cluster = EmulatedCluster(state_dir)
    status = cluster.status()
    _show(status, cluster)
    if status.state != "running":
        raise typer.Exit(1 if status.state == "stale" else 3)


@cluster_app.command("env")
def env_command(state_dir: DirOption = None) -> None:
    """Shell `export` lines for the running cluster (hostfile, agent, SLURM_CONF, loopback network)."""
    for key, value in EmulatedCluster(state_dir).environment().items():
        print(f"export {key}={shlex.quote(value)}")


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
