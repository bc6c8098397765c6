#!/usr/bin/env bash
# Build MPICH's own collective tests (test/mpi/coll of MPICH 4.0.2, with DTPools, the datatype generator
# its bcast test uses) from Debian's source tarball against any MPI, for bench/mpich_coll_suite.py and
# tests/integration/test_mpich_coll_suite.py.
# Usage: tools/build-mpich-coll-tests.sh MPICC OUTDIR [PROGRAM...]
#   Installs the test programs named (default: every program of test/mpi/coll that builds) into OUTDIR, with
#   the test lists (testlist: programs and arguments; testlist.dtp: the DTPools cases) and the tests' sources
#   (src/: which collectives each program calls). Programs already in OUTDIR are not built again.
#   A program that does not build against this library (Open MPI 5.0.11 has no MPI-4 large-count `_c`
#   functions: coll_large, uoplong_large) is listed in OUTDIR/unbuilt.txt.
# The tarball is checked against the sha256 of Debian's mpich_4.0.2-3.dsc. Measured on a 2-core VM, nice 10:
# configure 25-35 s, util + dtpools 8 s, a few programs 5 s, every program of coll 60-75 s.
set -euo pipefail
mpicc=${1:?usage: build-mpich-coll-tests.sh MPICC OUTDIR [PROGRAM...]}
out=${2:?usage: build-mpich-coll-tests.sh MPICC OUTDIR [PROGRAM...]}
shift 2
programs=("$@")
url=http://deb.debian.org/debian/pool/main/m/mpich/mpich_4.0.2.orig.tar.xz
sha256=b27039f964afeb6b8a3e009c56b441cbe368c26d6d6476ad3bb7190996875860
command -v xz >/dev/null || { echo "build-mpich-coll-tests: xz is needed to unpack the tarball" >&2; exit 1; }
[ -x "$mpicc" ] || { echo "build-mpich-coll-tests: $mpicc is no executable" >&2; exit 1; }
mpicc=$(cd "$(dirname "$mpicc")" && pwd)/$(basename "$mpicc")
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Programs built by another version of this script are not reused.
recipe=$(sha256sum "$0" | cut -c1-16)
stale() { [ "$(cat "$out/.recipe" 2>/dev/null)" != "$recipe" ]; }
if stale; then
  (exec 9>"$out/.lock"; flock 9
   if stale; then find "$out" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +; echo "$recipe" >"$out/.recipe"; fi)
fi
all_stamp=$out/.all-built
built() {  # whether everything asked for is in OUTDIR (programs are moved in whole); sets `missing`
  missing=()
  if [ ${#programs[@]} -eq 0 ]; then [ -f "$all_stamp" ]; return; fi
  for p in "${programs[@]}"; do [ -x "$out/$p" ] || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ]
}
built && exit 0
# One build at a time per OUTDIR (a test session and the driver may ask at once); then look again.
exec 9>"$out/.lock"
flock 9
built && exit 0

cache=${XDG_CACHE_HOME:-$HOME/.cache}/tunempi/sources
mkdir -p "$cache"
tarball=$cache/mpich_4.0.2.orig.tar.xz
if ! echo "$sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
  curl -fsS --retry 3 -o "$tarball.part" "$url"
  echo "$sha256  $tarball.part" | sha256sum -c --status || { echo "mpich tarball: checksum mismatch" >&2; exit 1; }
  mv "$tarball.part" "$tarball"
fi

# Intel MPI's mpicc finds its headers only through I_MPI_ROOT (as tunempi.mpi.library.wrapper_env says).
if [ -e "$(dirname "$mpicc")/impi_info" ] && [ -z "${I_MPI_ROOT:-}" ]; then
  I_MPI_ROOT=$(cd "$(dirname "$mpicc")/.." && pwd)
  export I_MPI_ROOT
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xJf "$tarball" -C "$work" mpich-4.0.2/test/mpi
src=$work/mpich-4.0.2/test/mpi
# DTPools 4.0.2 calls two constructors by their MPI-1 names, which MPI-3 removed and Debian's Open MPI 4.1.4
# neither declares nor exports; their MPI-2 names take the same arguments.
sed -i 's/\bMPI_Type_hvector(/MPI_Type_create_hvector(/; s/\bMPI_Type_hindexed(/MPI_Type_create_hindexed(/' \
  "$src/dtpools/src/dtpools_custom.c"
build=$work/build
mkdir -p "$build"
log=$build/build.log
fail() { echo "build-mpich-coll-tests: $1 failed (last lines of $out/build.log):" >&2; cp "$log" "$out/build.log"
         tail -20 "$log" >&2; exit 1; }
# Only C, only what coll needs: no Fortran, C++, ROMIO, spawn, RMA, partitioned or perf tests.
(cd "$build" && "$src/configure" MPICC="$mpicc" --enable-fortran=no --disable-cxx --disable-romio \
  --disable-spawn --disable-rma --disable-part --disable-ft-tests --disable-perftest --disable-checkerrors \
  --disable-dependency-tracking) >"$log" 2>&1 || fail configure
make -C "$build/util" -j2 >>"$log" 2>&1 || fail "make util"
make -C "$build/dtpools" -j2 >>"$log" 2>&1 || fail "make dtpools"
if [ ${#programs[@]} -eq 0 ]; then
  make -k -C "$build/coll" -j2 >>"$log" 2>&1 || true
  wanted=$(sed -n '/^noinst_PROGRAMS/,/^$/p' "$src/coll/Makefile.am" | tr -d '\\' | tr -s ' \t' '\n' \
           | grep -E '^[a-z_0-9]+$' | sort -u)
else
  make -k -C "$build/coll" -j2 "${missing[@]}" >>"$log" 2>&1 || true
  wanted=$(printf '%s\n' "${missing[@]}")
fi

mkdir -p "$out/src"
cp "$src/coll/"*.c "$src/coll/Makefile.am" "$out/src/"
cp "$build/coll/testlist" "$out/testlist"
cp "$build/coll/testlist.dtp" "$out/testlist.dtp"
cp "$log" "$out/build.log"
unbuilt=()
for p in $wanted; do
  if [ -x "$build/coll/$p" ]; then
    cp "$build/coll/$p" "$out/$p.part" && mv "$out/$p.part" "$out/$p"
  else
    unbuilt+=("$p")
  fi
done
# unbuilt.txt: every program asked for so far that is not in OUTDIR.
for p in $(cat "$out/unbuilt.txt" 2>/dev/null) "${unbuilt[@]}"; do
  [ -x "$out/$p" ] || echo "$p"
done | sort -u >"$out/unbuilt.txt"
if [ ${#programs[@]} -eq 0 ]; then
  touch "$all_stamp"
elif [ ${#unbuilt[@]} -gt 0 ]; then
  echo "build-mpich-coll-tests: not built against $mpicc: ${unbuilt[*]} (see $out/build.log)" >&2
  exit 1
fi
echo "$out"
