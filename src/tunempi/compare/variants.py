"""What `tunempi compare` runs: the library's default, and variants that each set environment variables.

A variant is given as `[NAME=]PATH`:
- a tuning directory (`tune`, `verify`): its manifest's activation variables, after the same checks as
  `tunempi run` (the library it was tuned for, files the library reads back);
- a directory of tuning files without a manifest (`online best`): its env file (tuning.env);
- an env file (`search`'s best.env, `tune`'s env file, any file of `NAME=value` / `export NAME=value`
  lines; `#` comments; values in shell quoting). An empty one (search's "keep the defaults") is refused:
  it would compare the default with itself.
The name defaults to the path's last component; `default` is the baseline's and cannot be taken.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from tunempi.errors import UsageError

if TYPE_CHECKING:
    from tunempi.mpi.library import MPILibrary
    from tunempi.tune.manifest import Manifest

BASELINE = "default"
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Variant:
    """One arm of the comparison: a name, where it came from, and the variables it sets."""

    name: str
    source: str  # "tuning directory DIR", "env file FILE", or "the library's default"
    env: Mapping[str, str] = field(default_factory=dict)
    tuning_dir: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "env": dict(self.env),
                "tuning_dir": str(self.tuning_dir) if self.tuning_dir is not None else None}


def parse_env_lines(text: str, where: str) -> dict[str, str]:
    """The variables of an env file: `NAME=value` or `export NAME=value` lines, `#` comments, shell quoting."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        name, sep, value = line.partition("=")
        if not sep or not _VARIABLE.fullmatch(name):
            raise UsageError(f"{where}:{number}: not a NAME=value line: {raw!r}")
        try:
            parts = shlex.split(value, comments=True)
        except ValueError as exc:
            raise UsageError(f"{where}:{number}: {exc}: {raw!r}") from None
        if len(parts) > 1:
            raise UsageError(f"{where}:{number}: one value per line (quote values with spaces): {raw!r}")
        env[name] = parts[0] if parts else ""
    return env


def split_spec(spec: str) -> tuple[str, Path]:
    """`NAME=PATH` or `PATH` -> (name, path)."""
    name, sep, rest = spec.partition("=")
    if sep and _NAME.fullmatch(name) and not Path(spec).exists():
        return name, Path(rest)
    path = Path(spec)
    return (path.resolve().name or spec), path


def load_variant(spec: str) -> tuple[Variant, Manifest | None]:
    """A variant from `[NAME=]PATH`, and the manifest when it is a tuning directory (checked by the caller
    against the library: see `check_tuning_variants`)."""
    from tunempi.tune.files import ENV_FILE
    from tunempi.tune.manifest import MANIFEST_NAME, Manifest

    name, path = split_spec(spec)
    if not _NAME.fullmatch(name):
        raise UsageError(f"variant {spec!r}: name {name!r} may hold only letters, digits and _ . + -; "
                         "name it explicitly with NAME=PATH")
    if name == BASELINE:
        raise UsageError(f"variant {spec!r}: {BASELINE!r} is the library's default run; give it another name "
                         f"(NAME=PATH)")
    if path.is_dir() and not (path / MANIFEST_NAME).is_file() and (path / ENV_FILE).is_file():
        # `online best` writes the files and their env file, no manifest: the env file applies them
        env = parse_env_lines((path / ENV_FILE).read_text(encoding="utf-8"), str(path / ENV_FILE))
        if not env:
            raise UsageError(f"variant {spec!r}: {path / ENV_FILE} sets nothing (every choice is the library's own): "
                             "it would compare the default with itself")
        return Variant(name, f"tuning files {path} (its {ENV_FILE})", env), None
    if path.is_dir():
        if not (path / MANIFEST_NAME).is_file():
            raise UsageError(f"variant {spec!r}: {path} is a directory without {MANIFEST_NAME}: not a tuning "
                             "directory (give a directory from `tunempi tune`, `verify` or `online best`, or an "
                             "env file)")
        manifest = Manifest.load(path)
        env = manifest.activation_env()
        if not env:
            raise UsageError(f"variant {spec!r}: the tuning directory {path} sets nothing (every choice is the "
                             "library's own): it would compare the default with itself")
        return Variant(name, f"tuning directory {path}", env, path.resolve()), manifest
    if not path.is_file():
        raise UsageError(f"variant {spec!r}: {path} is neither a tuning directory nor an env file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"variant {spec!r}: cannot read {path}: {exc}") from None
    env = parse_env_lines(text, str(path))
    if not env:
        raise UsageError(f"variant {spec!r}: {path} sets no variable (a search that said \"keep the defaults\"?): "
                         "it would compare the default with itself")
    return Variant(name, f"env file {path}", env), None


def load_variants(specs: Sequence[str]) -> tuple[list[Variant], list[Manifest]]:
    """Every variant (names unique) and the manifests of those that are tuning directories."""
    if not specs:
        raise UsageError("give at least one variant: --variant DIR|FILE (a tuning directory or an env file)")
    variants: list[Variant] = []
    manifests: list[Manifest] = []
    for spec in specs:
        variant, manifest = load_variant(spec)
        if any(v.name == variant.name for v in variants):
            raise UsageError(f"two variants are named {variant.name!r}; name them with NAME=PATH")
        variants.append(variant)
        if manifest is not None:
            manifests.append(manifest)
    return variants, manifests


def check_tuning_variants(manifests: Sequence[Manifest], mpi: str | None) -> MPILibrary | None:
    """The one library every tuning directory was tuned for (checked as `tunempi run` checks it), or None
    when no variant is a tuning directory."""
    from tunempi.tune.apply import check_tuning_files, tuning_library

    library: MPILibrary | None = None
    for manifest in manifests:
        found = tuning_library(manifest, mpi)
        check_tuning_files(manifest, found)
        if library is not None and found.fingerprint != library.fingerprint:
            raise UsageError(f"{manifest.directory} was tuned for {found.name}, another variant for "
                             f"{library.name}: one application run uses one library; compare them separately")
        library = found
    return library


def as_run_applies(variant: Variant, manifest: Manifest | None, command: Sequence[str], library: MPILibrary
                   ) -> tuple[Variant, str]:
    """`variant` without the variables `tunempi run` would leave out of this job (a library whose files cannot
    leave unmeasured sizes to it, outside the layouts they measured: tune.apply.left_to_library), so that
    compare measures what run applies, and the line that says so ('' where nothing is left out). UsageError
    where nothing would be left: the job would run untuned."""
    if manifest is None:
        return variant, ""
    from tunempi.tune.apply import command_left_to_library

    left, line = command_left_to_library(manifest, command, library)
    dropped = {name for names in left.values() for name in names}
    if not dropped & set(variant.env):
        return variant, ""
    env = {name: value for name, value in variant.env.items() if name not in dropped}
    if not env:
        raise UsageError(f"variant {variant.name}: {line}; `tunempi run` would run this job with none of the "
                         f"tuning's variables, so there is nothing to compare with the default")
    return replace(variant, env=env), f"variant {variant.name}: {line}"
