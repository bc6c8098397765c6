"""A space from a file, by its format: .toml, .json (the journal's round-trip form) or PTF."""

from __future__ import annotations

from pathlib import Path

from tunempi.errors import UsageError
from tunempi.search.space.params import ParamSpace
from tunempi.search.space.ptf import parse_ptf
from tunempi.search.space.toml import parse_toml


def load_space(path: str | Path) -> ParamSpace:
    """A space from a .toml, .json or PTF (.conf, .ptf, anything with MPIPO_BEGIN) file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read space file {p}: {exc.strerror}") from None
    suffix = p.suffix.lower()
    if suffix == ".json":
        try:
            return ParamSpace.from_json(text)
        except UsageError as exc:
            raise UsageError(f"{p}: {exc}") from None
    if suffix == ".toml":
        return parse_toml(text, str(p))
    if "MPIPO_BEGIN" in text or suffix in (".conf", ".ptf"):
        return parse_ptf(text, str(p))
    raise UsageError(f"{p}: unknown space format; valid: .toml, .json, PTF file (MPIPO_BEGIN ... MPIPO_END)")
