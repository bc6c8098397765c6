"""tunempi as a package: a wheel built with `python -m build`, installed into a fresh venv outside the
repository, compiles its C parts from package data on first use against the library `--mpi` names.

The venv gets no copy of the pinned dependencies (that would take minutes): it is made without pip, the
wheel goes in with `--no-deps`, and a .pth line makes the project venv's site-packages importable *after*
the venv's own. A .pth line adds a folder but runs none of the .pth files in it, so the checkout's editable
install of tunempi stays invisible: the only tunempi the fresh venv can import is the wheel's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tunempi.mpi.discovery import embedded_prefix

pytestmark = pytest.mark.mpi

REPOSITORY = Path(__file__).resolve().parents[2]
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE", "src")


def source_copy(target: Path) -> Path:
    """The files a source distribution is built from, copied (the checkout's build/ and egg-info stay clean)."""
    target.mkdir(parents=True)
    for name in PACKAGE_FILES:
        source = REPOSITORY / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, target / name)
    return target


def test_a_built_wheel_works_from_a_fresh_venv_outside_the_repository(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMPI_") and k != "PYTHONDONTWRITEBYTECODE"}
    source = source_copy(tmp_path / "source")
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, env=env, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    warnings = [line for line in (built.stdout + built.stderr).splitlines() if "warning" in line.lower()]
    assert warnings == [], "\n".join(warnings)  # metadata complete, package data declared
    wheel = next((tmp_path / "dist").glob("tunempi-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    shipped = {p.relative_to(REPOSITORY / "src").as_posix() for p in (REPOSITORY / "src").rglob("*")
               if p.suffix in (".c", ".h")}
    assert shipped and shipped <= names  # every C source and header is package data
    for field in ("License-Expression: BSD-3-Clause", "License-File: LICENSE", "Classifier: ",
                  "Requires-Python: >=3.11", "Description-Content-Type: text/markdown"):
        assert field in metadata

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, env=env, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "elsewhere"  # a cwd outside the repository, and a cache nothing was compiled into
    work.mkdir()
    cache = tmp_path / "cache"
    run_env = {**env, "XDG_CACHE_HOME": str(cache), "XDG_DATA_HOME": str(tmp_path / "data"),
               "PATH": f"{venv / 'bin'}:{env['PATH']}"}
    where = subprocess.run([str(python), "-c", "import tunempi.bench.engine as e; print(e.C_DIR)"],
                           capture_output=True, text=True, cwd=work, env=run_env, timeout=120)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # the wheel's copy, not the checkout's

    mpich = str(embedded_prefix("mpich"))
    tunempi = str(venv / "bin" / "tunempi")
    info = subprocess.run([tunempi, "info", "--mpi", mpich], capture_output=True, text=True, cwd=work,
                          env=run_env, timeout=300)
    assert info.returncode == 0, info.stdout + info.stderr
    assert "mpich" in info.stdout.lower() and "allreduce" in info.stdout
    bench = subprocess.run([tunempi, "bench", "--mpi", mpich, "--collectives", "allreduce", "--algorithms",
                            "ring", "--sizes", "8,1KiB", "--ranks", "2", "--db", str(work / "r.sqlite")],
                           capture_output=True, text=True, cwd=work, env=run_env, timeout=600)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert "2 measured" in bench.stdout and "0 failed" in bench.stdout
    built_parts = {p.name for p in (cache / "tunempi" / "build").rglob("*") if p.is_file()}
    assert any(name.startswith("tunempi_bench_engine") for name in built_parts), built_parts
