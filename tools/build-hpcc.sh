#!/usr/bin/env bash
# Build HPCC 1.5.0 (the HPC Challenge suite: HPL, PTRANS, RandomAccess, FFT, ...) from Debian's source
# tarball against any MPI, for applications tests and bench/applications.py: Debian ships HPCC built on its
# Open MPI only, and tunempi needs a real application for MPICH too.
# Usage: tools/build-hpcc.sh MPICC OUT_BINARY   (needs a BLAS: Debian's libblas-dev; make test installs it as root)
# The tarball is checked against the sha256 of Debian's hpcc_1.5.0-3.dsc; the build takes ~10 s on 2 cores.
set -euo pipefail
mpicc=${1:?usage: build-hpcc.sh MPICC OUT_BINARY}
out=${2:?usage: build-hpcc.sh MPICC OUT_BINARY}
url=http://deb.debian.org/debian/pool/main/h/hpcc/hpcc_1.5.0.orig.tar.gz
sha256=0a6fef7ab9f3347e549fed65ebb98234feea9ee18aea0c8f59baefbe3cf7ffb8
cache=${XDG_CACHE_HOME:-$HOME/.cache}/tunempi/sources
mkdir -p "$cache" "$(dirname "$out")"
tarball=$cache/hpcc_1.5.0.orig.tar.gz
if ! echo "$sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
  curl -fsS --retry 3 -o "$tarball.part" "$url"
  echo "$sha256  $tarball.part" | sha256sum -c --status || { echo "hpcc tarball: checksum mismatch" >&2; exit 1; }
  mv "$tarball.part" "$tarball"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "$tarball" -C "$work"
src=$work/hpcc-1.5.0
# HPL's make include for this build: the MPI compiler wrapper does the MPI flags, reference BLAS, and
# -fcommon (HPL 2.x defines globals in headers; GCC >= 10 refuses that by default).
cat >"$src/hpl/Make.tunempi" <<'MAKE'
SHELL        = /bin/sh
CD           = cd
CP           = cp
LN_S         = ln -s
MKDIR        = mkdir
RM           = /bin/rm -f
TOUCH        = touch
ARCH         = tunempi
TOPdir       = ../../..
INCdir       = $(TOPdir)/include
BINdir       = $(TOPdir)/bin/$(ARCH)
LIBdir       = $(TOPdir)/lib/$(ARCH)
HPLlib       = $(LIBdir)/libhpl.a
LAlib        = -lblas
F2CDEFS      = -DAdd_ -DF77_INTEGER=int -DStringSunStyle
HPL_INCLUDES = -I$(INCdir) -I$(INCdir)/$(ARCH)
HPL_LIBS     = $(HPLlib) $(LAlib) -lm
HPL_DEFS     = $(F2CDEFS) $(HPL_INCLUDES)
CC           = $(MPICC)
CCNOOPT      = $(HPL_DEFS)
CCFLAGS      = $(HPL_DEFS) -O2 -fcommon -w
LINKER       = $(MPICC)
LINKFLAGS    = $(CCFLAGS)
ARCHIVER     = ar
ARFLAGS      = r
RANLIB       = echo
MAKE
make -C "$src" -j2 arch=tunempi MPICC="$mpicc" >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; exit 1; }
cp "$src/hpcc" "$out.part"
mv "$out.part" "$out"
echo "$out"
