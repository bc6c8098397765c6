#!/usr/bin/env bash
# System packages some tests need (Debian's own MPI builds with Fortran, real applications built on them (HPCC,
# LAMMPS, Quantum ESPRESSO), Slurm, Chromium, strace,
# Environment Modules for `catalog module`). Installed only
# when this runs as root on a Debian-like machine, as CI does; elsewhere the tests that need them skip with
# a one-line reason (and fail under CI=true: see tests/conftest.py `require_system`).
# Usage: tools/system-packages.sh STAMP_FILE
set -euo pipefail
stamp=${1:-.venv/.system-packages}

# One group a line: the name the tests ask for, then its Debian packages.
groups=(
  "site-mpi mpich libmpich-dev openmpi-bin libopenmpi-dev gfortran"
  "applications hpcc lammps libblas-dev curl"
  "quantum-espresso quantum-espresso"
  "slurm slurmd slurmctld slurm-client libpmix2 libpmix-dev"
  "browser chromium"
  "trace strace"
  "modules environment-modules"
)

packages=()
for g in "${groups[@]}"; do read -r _name pkgs <<<"$g"; packages+=($pkgs); done
want="${packages[*]}"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "system packages not installed (needs root on Debian): tests of the site MPI, Slurm and the browser will skip"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)
apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
apt-get install "${apt_opts[@]}" "${packages[@]}" >/dev/null
mkdir -p "$(dirname "$stamp")"
echo "$want" >"$stamp"
