"""Option resolution shared by every command: flag > environment (TUNEMPI_*) > default.

Paths used by default follow the XDG base directories so several users and jobs do not collide.
"""

from __future__ import annotations

import os
from pathlib import Path

from tunempi.errors import UsageError

ENV_PREFIX = "TUNEMPI_"


def env_value(name: str) -> str | None:
    """The value of TUNEMPI_<NAME>, or None when unset or empty."""
    value = os.environ.get(ENV_PREFIX + name.upper())
    return value if value else None


def resolve(flag: str | None, name: str, default: str | None = None) -> str | None:
    """flag if given, else TUNEMPI_<NAME>, else default."""
    if flag is not None:
        return flag
    env = env_value(name)
    return env if env is not None else default


def not_a_directory(path: str | Path) -> str | None:
    """Why `path` cannot be (or become) a directory: it, or the nearest of its parents that exists, is a file;
    None when it can."""
    candidate = Path(path)
    for existing in (candidate, *candidate.parents):
        if existing.exists():
            if existing.is_dir():
                return None
            where = "" if existing == candidate else f" (in {candidate})"
            return f"{existing}{where} is a file, not a directory"
    return None


def directory_setting(path: str | Path, what: str) -> Path:
    """A directory option's value however it was resolved (flag, env or default), or a UsageError: a file there
    otherwise ends the command deep inside in a NotADirectoryError or FileExistsError."""
    why = not_a_directory(path)
    if why:
        raise UsageError(f"{what}: {why}")
    return Path(path)


def int_setting(flag: int | None, env: str, default: int, what: str, minimum: int) -> int:
    """flag > TUNEMPI_<env> > default, as an integer of at least `minimum` (UsageError otherwise)."""
    text = resolve(None if flag is None else str(flag), env, str(default)) or str(default)
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what} must be an integer, got {text!r} (from TUNEMPI_{env})") from None
    if value < minimum:
        raise UsageError(f"{what} must be >= {minimum}, got {value}")
    return value


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tunempi"


def cache_dir() -> Path:
    """Where compiled C parts live, keyed by library fingerprint (TUNEMPI_CACHE overrides)."""
    override = env_value("CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tunempi"


def default_db_path() -> Path:
    """The results database: --db, else TUNEMPI_DB, else a per-user file."""
    return data_dir() / "results.sqlite"


def resolve_db(flag: str | None) -> Path:
    return Path(resolve(flag, "DB", str(default_db_path())) or default_db_path())
