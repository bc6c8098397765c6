"""PTF (Periscope Tuning Framework) MPI Parameters plugin files, imported as PTF reads them.

`MPIPO_BEGIN <library>` ... `NAME=start:step:end;` `NAME=a,b,c;` `SEARCH=gde3;` ... `MPIPO_END`.
Malformed input raises `UsageError` with the file, the line and the reason.
"""

from __future__ import annotations

import re

from tunempi.errors import UsageError
from tunempi.search.space.expressions import Value
from tunempi.search.space.params import CategoricalParam, Param, ParamSpace
from tunempi.search.space.ranges import RANGE_RE, parse_number, parse_range

# PTF's search-control keys (everything else is a parameter).
_PTF_HINTS = {"SEARCH": "search", "INDIVIDUAL_KEEP": "individual_keep", "SAMPLE_COUNT": "sample_count",
              "GDE3_POP_SIZE": "gde3_pop_size"}
_PTF_NAME = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\s*:\s*)?([A-Za-z_][A-Za-z0-9_.]*)$")


def parse_ptf(text: str, source: str = "<ptf>") -> ParamSpace:
    """A space from a PTF MPI Parameters file, as PTF reads it.

    Accepted, per statement (`;`-terminated, one per line, `#` starts a comment):
    `NAME=start:step:end;`, `NAME=start:+step:end;`, `NAME=start:*factor:end;` (a geometric list, as
    in PTF), `NAME=a,b,c;`, `NAME=value;`, `alias:NAME=...;` (PTF's env-var alias form), K/M/G size
    suffixes, and the directives SEARCH, INDIVIDUAL_KEEP, SAMPLE_COUNT, GDE3_POP_SIZE.
    """
    library: str | None = None
    in_block = False
    ended = False
    params: list[Param] = []
    hints: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue

        def fail(reason: str, lineno: int = lineno, raw: str = raw) -> UsageError:
            return UsageError(f"{source}:{lineno}: {reason} (in {raw.strip()!r})")

        if ended:
            raise fail("text after MPIPO_END")
        if not in_block:
            m = re.fullmatch(r"MPIPO_BEGIN(?:\s+(\S+))?", line)
            if not m:
                raise fail("expected 'MPIPO_BEGIN <library>' before any parameter")
            library = m.group(1).lower() if m.group(1) else None
            in_block = True
            continue
        if line == "MPIPO_END":
            ended = True
            continue
        if line.startswith("MPIPO_BEGIN"):
            raise fail("MPIPO_BEGIN inside a block (missing MPIPO_END?)")
        if not line.endswith(";"):
            raise fail("statement must end with ';'")
        body = line[:-1].strip()
        if ";" in body:
            raise fail("one statement per line")
        if "=" not in body:
            raise fail("expected NAME=values")
        lhs, rhs = (s.strip() for s in body.split("=", 1))
        if lhs.upper() in _PTF_HINTS:
            if not re.fullmatch(r"[A-Za-z0-9_]+", rhs):
                raise fail(f"bad value {rhs!r} for {lhs}")
            hints[_PTF_HINTS[lhs.upper()]] = rhs.lower()
            continue
        if lhs.upper() == "AUTO_EAGER_LIMIT" or body.upper() == "AUTO_EAGER_LIMIT":
            raise fail("AUTO_EAGER_LIMIT (PTF's IBM-MPI shortcut) is not supported: give the range")
        m = _PTF_NAME.match(lhs)
        if not m:
            raise fail(f"bad parameter name {lhs!r}")
        name = m.group(1)
        if not rhs:
            raise fail(f"{name} has no values")
        try:
            if ":" in rhs:
                param = _ptf_range(name, rhs)
            else:
                items = [s.strip() for s in rhs.split(",")]
                if any(not s for s in items):
                    raise UsageError("empty value in the list")
                param = CategoricalParam(name, tuple(_ptf_scalar(s) for s in items))
        except UsageError as exc:
            raise fail(str(exc)) from None
        if any(p.name == name for p in params):
            raise fail(f"{name} is declared twice")
        params.append(param)
    if not in_block:
        raise UsageError(f"{source}: no MPIPO_BEGIN found (not a PTF MPI Parameters file?)")
    if not ended:
        raise UsageError(f"{source}:{len(text.splitlines())}: missing MPIPO_END")
    if not params:
        raise UsageError(f"{source}: no parameters between MPIPO_BEGIN and MPIPO_END")
    return ParamSpace(tuple(params), library=library, hints=hints)


def _ptf_range(name: str, rhs: str) -> Param:
    m = RANGE_RE.match(rhs)
    if not m:
        raise UsageError(f"{name}: range {rhs!r} is not start:step:end")
    return parse_range(name, rhs)


def _ptf_scalar(text: str) -> Value:
    try:
        return parse_number(text)
    except ValueError:
        return text
