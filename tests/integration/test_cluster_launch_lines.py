"""The cross-node launch lines docs/launch.md gives for each library, run as written (issue 58).

Each `tunempi autotune [OPTIONS] -- LINE ./app` line of the page's block is run as `tunempi profile [OPTIONS] --
LINE PROBE` (the profile is autotune's first step, and resolves the line's library the same way) across two
emulated nodes, with the node probe built for the library the line resolves to: the profile must see 2
nodes of that library. A hostfile of the wrong syntax or a missing agent option fails here, not in a
user's hands."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import emulated_cluster, require_system

from tunempi.launch.cluster import EmulatedCluster
from tunempi.mpi.build import build_c
from tunempi.mpi.discovery import launch_line_library

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

HERE = Path(__file__).parent
DOC = HERE.parents[1] / "docs" / "launch.md"
PROBE_SOURCE = HERE / "c" / "node_probe.c"
SECTION = "### An application's own launch line across the nodes"
#: PRRTE's words when a node's daemon exited before it reported back (no rank of the job started).
PRRTE_DAEMON_NEVER_STARTED = "A daemon failed to report back after being spawned"


def documented_lines() -> list[str]:
    """The `tunempi autotune` lines of the section's first sh block."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", text[text.index(SECTION):], re.DOTALL)
    assert block is not None, f"no sh block under {SECTION!r}"
    lines = [line for line in block.group(1).splitlines() if line.startswith("tunempi autotune ")]
    assert len(lines) == 4, lines  # MPICH, Intel MPI, Open MPI 5, Open MPI 4
    return lines


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedCluster]:
    yield from emulated_cluster(tmp_path_factory.mktemp("cluster"), nodes=2, slots=1)


@pytest.mark.parametrize("index", range(4), ids=["mpich", "impi", "openmpi-5", "openmpi-4-debian"])
def test_the_documented_cross_node_line_runs_on_two_nodes(cluster: EmulatedCluster, tmp_path: Path,
                                                          index: int) -> None:
    line = documented_lines()[index]
    if ".openmpi" in line or ".mpich" in line:
        require_system("site-mpi")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}, **cluster.environment()}
    words = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], word) for word in shlex.split(line)]
    cut = words.index("--")
    options, command = words[2:cut], words[cut + 1:]
    mpi = options[options.index("--mpi") + 1] if "--mpi" in options else None
    library = launch_line_library(mpi, command)
    command[command.index("./app")] = str(build_c(library, [PROBE_SOURCE], "node_probe", werror=True))
    argv = [sys.executable, "-m", "tunempi", "profile", *options, "-o", "p.json", "--", *command]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and PRRTE_DAEMON_NEVER_STARTED in done.stderr + done.stdout:
        # Seen once in a busy CI run (load above 5), never in 160 launches of its mpirun line beside busy loops
        # (docs/launch.md): a start-up failure of the emulated node's daemon, before any rank ran. Once more.
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert '"nodes":2' in done.stdout  # the probe: two MPI_COMM_TYPE_SHARED communicators
    header = json.loads((tmp_path / "p.json").read_text())["header"]
    assert header["nodes"] == 2 and header["ranks"] == 2
    assert library.version in header["library"]
