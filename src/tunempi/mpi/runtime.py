"""Run-time parameters of a library: which names exist, how values reach the ranks, an automatic space.

A run-time parameter is one of
- an MPI_T control variable the library reports (MPICH `MPIR_CVAR_...`, Open MPI MCA names such as
  `btl_sm_eager_limit`; the Open MPI environment spelling `OMPI_MCA_btl_sm_eager_limit` is accepted too);
- a UCX knob (`UCX_...`), for libraries that use UCX (names asked from UCX itself, mpi/ucx.py).

Settable means "can be given at launch": every cvar whose scope is not `constant`. Open MPI reports
many MCA parameters as `readonly` (MPI_T cannot change them after MPI_Init) but reads them from the
environment at start (measured: OMPI_MCA_btl_sm_eager_limit=8192 reads back 8192 through MPI_T), so
they are settable here.

`check_parameters` rejects unknown or constant names before anything runs, naming close matches.
The spelling of each value (env var name, boolean form) is the vendor adapter's
`parameter_env(name, value)`. `auto_space` builds a focused parameter space from a curated list of
name patterns per vendor (`MpichAdapter.TUNABLES`, `OpenMPIAdapter.TUNABLES`) with bounds from the
library's own defaults.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tunempi.errors import UsageError
from tunempi.mpi.discovery import LibraryInfo
from tunempi.mpi.ucx import ucx_knobs
from tunempi.mpi.vendor import Tunable, VendorAdapter
from tunempi.search.space import CategoricalParam, Expr, Param, ParamSpace

UCX_PREFIX = "UCX_"


@dataclass(frozen=True)
class RuntimeParameters:
    """Every run-time parameter name of one library, with what is known about each."""

    library_name: str
    cvars: Mapping[str, dict]        # MPI_T name -> probe record (datatype, scope, value, enum, description)
    ucx: Mapping[str, str]           # UCX_NAME -> default ({} when the library does not use UCX)

    @classmethod
    def of(cls, info: LibraryInfo, adapter: VendorAdapter) -> RuntimeParameters:
        knobs = ucx_knobs(info.library) if adapter.uses_ucx() else {}
        return cls(info.library.name, {c["name"]: c for c in info.cvars}, knobs)

    def settable(self, name: str) -> bool:
        record = self.cvars.get(name)
        return record is not None and record.get("scope") != "constant"

    def known_names(self) -> list[str]:
        return [n for n in self.cvars if self.settable(n)] + list(self.ucx)


def check_parameters(names: Iterable[str], params: RuntimeParameters, adapter: VendorAdapter) -> None:
    """UsageError (exit 2) listing every name the library does not have, or cannot take at launch."""
    problems: list[str] = []
    known = params.known_names()
    for name in names:
        canonical = adapter.canonical_parameter(name)
        if canonical.startswith(UCX_PREFIX):
            if not params.ucx:
                problems.append(f"{name}: {params.library_name} does not use UCX")
            elif canonical not in params.ucx:
                problems.append(f"{name}: not a UCX knob{_close(canonical, params.ucx)}")
            continue
        record = params.cvars.get(canonical)
        if record is None:
            problems.append(f"{name}: {params.library_name} has no such control variable{_close(canonical, known)}")
        elif record.get("scope") == "constant":
            problems.append(f"{name}: a constant of {params.library_name} (scope constant), it cannot be set")
    if problems:
        raise UsageError("unknown run-time parameter(s), checked against the library before any run:\n  "
                         + "\n  ".join(problems))


def _close(name: str, candidates: Iterable[str]) -> str:
    pool = list(candidates)
    matches = difflib.get_close_matches(name, pool, n=4, cutoff=0.6)
    if not matches:  # a misspelt word inside a long name: try the names sharing the most words
        words = set(name.lower().split("_"))
        scored = sorted(pool, key=lambda c: -len(words & set(c.lower().split("_"))))
        matches = [c for c in scored[:3] if words & set(c.lower().split("_"))]
    return f"; close matches: {', '.join(matches)}" if matches else ""


# ---------------------------------------------------------------------------------------- auto space


def size_ladder(default: int, factor: int = 2, below: int = 4, above: int = 4, low: int = 1) -> list[int]:
    """default * factor^k for k in -below..above (the default itself included), at least `low`."""
    base = max(int(default), low)
    values = {base * factor**k for k in range(0, above + 1)}
    values |= {base // factor**k for k in range(1, below + 1) if base // factor**k >= low}
    return sorted(values)


def _tunable_param(name: str, tunable: Tunable, default: object) -> Param | None:
    if tunable.values is not None:
        choices = list(tunable.values)
        if isinstance(default, str) and "auto" in default and "auto" in choices:
            choices[choices.index("auto")] = default  # UCX's "intra:auto,inter:auto" is its "auto"
        if default is not None and default not in choices:
            choices.insert(0, default)  # type: ignore[arg-type]
        return CategoricalParam(name, tuple(choices), default=default)  # type: ignore[arg-type]
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
            default = record.get("value") if record is not None else params.ucx.get(name)
            if isinstance(default, bool):
                default = int(default)
            param = _tunable_param(name, tunable, default)
            if param is not None:
                built.append(param)
    if not built:
        raise UsageError(f"--space auto: none of the curated run-time parameters exist in {params.library_name}")
    present = {p.name for p in built}
    constraints = tuple(Expr.parse(c) for c in adapter.parameter_constraints() if _names(c) <= present)
    return ParamSpace(tuple(built), constraints, library=params.library_name, hints={"source": "auto"})


def _names(expression: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expression)) - {"and", "or", "not", "in"}

