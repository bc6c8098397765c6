"""`--space auto`: a focused parameter space from the vendor adapter's curated tunables.

The adapter (mpi/) says which run-time parameter names are worth tuning and which constraints the library
imposes between them; the library's own defaults (MPI_T, UCX) give the bounds. This module only turns that
into a `ParamSpace`: it lives above mpi/, which never imports the search.
"""

from __future__ import annotations

import re

from tunempi.errors import UsageError
from tunempi.mpi.runtime import UCX_PREFIX, RuntimeParameters
from tunempi.mpi.vendor import Tunable, VendorAdapter
from tunempi.search.space import CategoricalParam, Expr, Param, ParamSpace


def size_ladder(default: int, factor: int = 2, below: int = 4, above: int = 4, low: int = 1) -> list[int]:
    """default * factor^k for k in -below..above (the default itself included), at least `low`."""
    base = max(int(default), low)
    values = {base * factor**k for k in range(0, above + 1)}
    values |= {base // factor**k for k in range(1, below + 1) if base // factor**k >= low}
    return sorted(values)


def _tunable_param(name: str, tunable: Tunable, default: object) -> Param | None:
    if tunable.values is not None:
        choices: list[int | float | str | bool] = list(tunable.values)
        start = default if isinstance(default, (int, float, str)) else None
        if isinstance(start, str) and "auto" in start and "auto" in choices:
            choices[choices.index("auto")] = start  # UCX's "intra:auto,inter:auto" is its "auto"
        if start is not None and start not in choices:
            choices.insert(0, start)
        return CategoricalParam(name, tuple(choices), default=start)
    if not isinstance(default, int) or isinstance(default, bool):
        return None
    if tunable.kind == "bool":
        return CategoricalParam(name, (0, 1), default=default if default in (0, 1) else None)
    if default <= 0:
        return None  # "auto" / disabled sentinels have no scale to build a range from
    factor, span = (2, 4) if tunable.kind == "size" else (2, 2)
    ladder = size_ladder(default, factor, span, span, low=tunable.minimum)
    return CategoricalParam(name, tuple(ladder), default=default)


def auto_space(params: RuntimeParameters, adapter: VendorAdapter) -> ParamSpace:
    """A focused space: the adapter's curated tunables this library has, bounds from its defaults.

    Sizes/thresholds: the ladder default/16 .. default*16 (factor 2); counts: default/4 .. default*4;
    booleans: 0/1; enums: their MPI_T items; UCX knobs: the adapter's value lists (their defaults
    are `auto`). Constraints the library imposes between them (MPICH: cell size <= pack buffer size)
    come with the tunables.
    """
    built: list[Param] = []
    for tunable in adapter.tunables():
        pattern = re.compile(tunable.pattern)
        names = [n for n in params.ucx if pattern.fullmatch(n)] if tunable.pattern.startswith(UCX_PREFIX) else [
            n for n in params.cvars if pattern.fullmatch(n) and params.settable(n)]
        for name in names:
            if any(p.name == name for p in built):
                continue
            record = params.cvars.get(name)
            if record is not None and record.get("enum") and tunable.values is None and tunable.kind != "bool":
                items = tuple(str(item["name"]) for item in record["enum"])
                default = next((str(i["name"]) for i in record["enum"] if i["value"] == record.get("value")), None)
                built.append(CategoricalParam(name, items, default=default))
                continue
            current: object = record.get("value") if record is not None else params.ucx.get(name)
            if isinstance(current, bool):
                current = int(current)
            param = _tunable_param(name, tunable, current)
            if param is not None:
                built.append(param)
    if not built:
        raise UsageError(f"--space auto: none of the curated run-time parameters exist in {params.library_name}")
    present = {p.name for p in built}
    constraints = tuple(Expr.parse(c) for c in adapter.parameter_constraints() if _names(c) <= present)
    return ParamSpace(tuple(built), constraints, library=params.library_name, hints={"source": "auto"})


def _names(expression: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expression)) - {"and", "or", "not", "in"}

