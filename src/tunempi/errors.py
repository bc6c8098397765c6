"""Exceptions shared by every package; the CLI maps them to exit codes."""

from __future__ import annotations


class TunempiError(Exception):
    """Base class of tunempi's own errors (exit status 1 in the CLI)."""


class UsageError(TunempiError):
    """Bad input from the user: a value, name or file that cannot be used (exit status 2).

    The message must name the valid choices where there are any.
    """


class MPIError(TunempiError):
    """An MPI library could not be found, built against or run."""


class TuningFileError(TunempiError):
    """A tuning file could not be written for a rule set, or the library rejected it in the smoke run."""
