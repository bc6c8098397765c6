"""Parsing and printing of message sizes and durations ("64KiB", "1:1MiB", "10m")."""

from __future__ import annotations

import re

from tunempi.errors import UsageError

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """'64KiB' -> 65536, '1M' -> 1048576, '1MB' -> 1000000, '8' -> 8."""
    match = _SIZE_RE.match(text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise UsageError(f"not a size: {text!r} (examples: 8, 1KiB, 64k, 1MiB)")
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value != int(value) or value < 0:
        raise UsageError(f"not a whole number of bytes: {text!r}")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """A comma list of sizes and/or 'lo:hi' ranges (powers of two from lo to hi, both included).

    '8,1KiB' -> [8, 1024]; '1:16' -> [1, 2, 4, 8, 16]. The result is sorted and de-duplicated.
    """
    sizes: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        if ":" in part:
            lo_text, hi_text = part.split(":", 1)
            lo, hi = parse_size(lo_text), parse_size(hi_text)
            if lo <= 0 or hi < lo:
                raise UsageError(f"bad size range {part!r}: need 0 < lo <= hi")
            size = lo
            while size <= hi:
                sizes.add(size)
                size *= 2
        else:
            sizes.add(parse_size(part))
    if not sizes:
        raise UsageError(f"no sizes in {text!r}")
    return sorted(sizes)


def format_size(nbytes: int) -> str:
    """65536 -> '64KiB'; 1000 -> '1000B'. Exact only: a size that is no whole KiB/MiB stays in bytes."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return f"{nbytes}B"


_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "ms": 0.001}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_duration(text: str) -> float:
    """'10m' -> 600.0, '30s' -> 30.0, '1.5h' -> 5400.0, '45' -> 45.0 (seconds)."""
    match = _DURATION_RE.match(text.lower())
    if not match or match.group(2) not in _DURATION_UNITS:
        raise UsageError(f"not a duration: {text!r} (examples: 30s, 10m, 1h)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]
