"""tunempi: an autotuner for MPI collectives and runtime parameters."""

from __future__ import annotations

__version__ = "0.1.0"
