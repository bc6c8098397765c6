"""TOML space files, the user's format (docs/search.md): `[[param]]` tables and an optional `[space]`.

Malformed input raises `UsageError` with the file, the line and the reason.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from tunempi.errors import UsageError
from tunempi.search.space.expressions import Expr
from tunempi.search.space.params import Param, ParamSpace, param_from_dict
from tunempi.search.space.ranges import parse_range

_TOML_PARAM_KEYS = {"name", "kind", "range", "values", "low", "high", "step", "log", "factor", "grid_points",
                    "default", "when"}


def _toml_param(entry: Mapping[str, Any]) -> Param:
    name = entry.get("name")
    if not isinstance(name, str):
        raise UsageError("every [[param]] needs a name = \"...\"")
    unknown = set(entry) - _TOML_PARAM_KEYS
    if unknown:
        raise UsageError(f"{name}: unknown keys {sorted(unknown)}; valid: {sorted(_TOML_PARAM_KEYS)}")
    kind = entry.get("kind")
    if kind not in (None, "int", "float", "categorical"):
        raise UsageError(f"{name}: unknown kind {kind!r}; valid kinds: int, float, categorical")
    when = entry.get("when")
    default = entry.get("default")
    if "range" in entry:
        if kind == "categorical":
            raise UsageError(f"{name}: a categorical parameter takes values = [...], not a range")
        data = parse_range(name, str(entry["range"]), kind).to_dict()
        data.update({k: entry[k] for k in ("default", "when") if entry.get(k) is not None})
        return param_from_dict(data)
    if "values" in entry:
        values = entry["values"]
        if not isinstance(values, list) or not values:
            raise UsageError(f"{name}: values must be a non-empty list")
        return param_from_dict({"name": name, "kind": "categorical", "values": values,
                                "default": default, "when": when})
    if "low" in entry and "high" in entry:
        data = {k: v for k, v in entry.items() if k != "range"}
        if kind is None:
            kind = "float" if any(isinstance(entry.get(k), float) for k in ("low", "high", "step")) else "int"
        data["kind"] = kind
        return param_from_dict(data)
    raise UsageError(f"{name}: give range = \"start:step:end\", values = [...], or low/high")


def parse_toml(text: str, source: str = "<toml>") -> ParamSpace:
    """A space from TOML text (see docs/search.md for the format)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)": keep it, prefixed by the file.
        raise UsageError(f"{source}: malformed TOML: {exc}") from None
    entries = data.get("param")
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{source}: no [[param]] tables found")
    unknown_top = set(data) - {"param", "space"}
    if unknown_top:
        raise UsageError(f"{source}: unknown top-level keys {sorted(unknown_top)}; valid: param, space")
    lines = _table_lines(text, "[[param]]")
    params: list[Param] = []
    for i, entry in enumerate(entries):
        where = f"{source}:{lines[i]}" if i < len(lines) else source
        try:
            param = _toml_param(entry)
            ParamSpace((*params, param))  # conditions and duplicates, checked where they are written
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        params.append(param)
    header = data.get("space", {})
    space_line = _table_lines(text, "[space]")
    where = f"{source}:{space_line[0]}" if space_line else source
    try:
        if not isinstance(header, dict):
            raise UsageError("[space] must be a table")
        unknown = set(header) - {"constraints", "library", "search"}
        if unknown:
            raise UsageError(f"unknown [space] keys {sorted(unknown)}; valid: constraints, library, search")
        constraints = header.get("constraints", [])
        if not isinstance(constraints, list):
            raise UsageError("constraints must be a list of strings")
        hints = {"search": str(header["search"])} if "search" in header else {}
        return ParamSpace(tuple(params), tuple(Expr.parse(str(c)) for c in constraints),
                          library=header.get("library"), hints=hints)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _table_lines(text: str, header: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), start=1) if line.strip().startswith(header)]
