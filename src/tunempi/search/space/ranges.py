"""The range syntax both space file formats share: 'start:step:end', 'start:+step:end', 'start:*factor:end'.

Numbers take K/M/G binary suffixes, as in PTF; 'start:*factor:end' over integers expands to PTF's
geometric list.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tunempi.errors import UsageError
from tunempi.search.space.params import CategoricalParam, FloatParam, IntParam, Param

_SIZE_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3}
RANGE_RE = re.compile(r"^\s*(?P<start>[^:]+?)\s*:\s*(?P<op>[+*]?)\s*(?P<step>[^:]+?)\s*:\s*(?P<end>[^:]+?)\s*$")


def parse_number(text: str) -> int | float:
    """'4096', '64K', '1M', '0.5' -> number (K/M/G are binary multiples, as in PTF)."""
    t = text.strip()
    mult = 1
    if t and t[-1].lower() in _SIZE_SUFFIX and t[:-1].strip().replace(".", "", 1).isdigit():
        mult = _SIZE_SUFFIX[t[-1].lower()]
        t = t[:-1].strip()
    try:
        return int(t) * mult
    except ValueError:
        pass
    try:
        value = float(t) * mult
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def parse_range(name: str, text: str, kind: str | None = None, **extra: Any) -> Param:
    """'start:step:end' / 'start:+step:end' (linear) -> Int/FloatParam; 'start:*factor:end' -> the
    geometric list (integers, as PTF expands it) or a log range (floats)."""
    m = RANGE_RE.match(text)
    if not m:
        raise UsageError(f"{name}: range {text!r} is not start:step:end, start:+step:end or start:*factor:end")
    try:
        start, step, end = (parse_number(m.group(g)) for g in ("start", "step", "end"))
    except ValueError as exc:
        raise UsageError(f"{name}: range {text!r}: {exc}") from None
    if start > end:
        raise UsageError(f"{name}: range {text!r} starts above its end")
    is_float = kind == "float" or any(isinstance(v, float) for v in (start, step, end))
    if kind == "int" and is_float:
        raise UsageError(f"{name}: range {text!r} has non-integer bounds for an int parameter")
    if m.group("op") == "*":
        if is_float:
            return FloatParam(name, float(start), float(end), log=True, **extra)
        return _geometric_list(name, int(start), int(step), int(end))
    if step <= 0:
        raise UsageError(f"{name}: range {text!r} needs a positive step")
    if is_float:
        return FloatParam(name, float(start), float(end), step_size=float(step), **extra)
    return IntParam(name, int(start), int(end), step_size=int(step), **extra)


def _geometric_list(name: str, start: int, factor: int, end: int) -> CategoricalParam:
    """start:*factor:end -> the ordered list start, start*factor, ... <= end (PTF's expansion).

    A list, not a log range: byte sizes such as cell sizes often must be one of these values
    (MPICH 5 aborts in MPI_Init on a non-power-of-two shared-memory cell size); use
    low/high/log = true for a log-uniform range of every integer in between.
    """
    if start < 1 or factor < 2:
        raise UsageError(f"{name}: a start:*factor:end range needs start >= 1 and factor >= 2")
    values = []
    v = start
    while v <= end:
        values.append(v)
        v *= factor
    return CategoricalParam(name, tuple(values))
