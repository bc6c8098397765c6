"""Rule sets -> a shell env file for the libraries' simple per-collective forcing.

Forcing is one algorithm per collective for the whole run (MPICH: MPIR_CVAR_<COLL>_INTRA_ALGORITHM;
Open MPI: coll_tuned_<coll>_algorithm with use_dynamic_rules). It can only express a rule set that
picks the same algorithm everywhere; a collective whose choice depends on size or scale needs a tuning
file, and the result says which ones. A tuning's rule sets act only at the communicator sizes measured
(issue 57), which forcing cannot bound: they need the file too. The variable spellings belong to the vendor adapters: pass
`adapter.force_env` (collective, algorithm) -> {name: value}; this module stays pure and vendor-free.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tunempi.errors import UsageError
from tunempi.rules.ruleset import DEFAULT_ALGORITHM, LIBRARY, RuleSet, ranges_text

ForceEnv = Callable[[str, str], Mapping[str, str]]


@dataclass(frozen=True)
class EnvFile:
    """The env file's text, the variables it sets, and the collectives it could not express."""

    text: str
    env: dict[str, str] = field(default_factory=dict)
    needs_file: tuple[str, ...] = ()


def _merge(env: dict[str, str], more: Mapping[str, str], origin: str) -> None:
    for name, value in more.items():
        if name in env and env[name] != value:
            raise UsageError(f"{origin} sets {name}={value!r} but it is already {env[name]!r}")
        env[name] = str(value)


def write_env_file(rule_sets: Mapping[str, RuleSet] | list[RuleSet], force_env: ForceEnv, *,
                   extra_env: Mapping[str, str] | None = None, title: str = "tunempi tuning") -> EnvFile:
    """Force every collective whose rule set has a single algorithm; list the others as needing a file.

    `extra_env` (e.g. the variable that loads a tuning file, spelled by the adapter) is written first.
    """
    sets = sorted(rule_sets.values() if isinstance(rule_sets, Mapping) else rule_sets,
                  key=lambda rs: rs.collective)
    env: dict[str, str] = {}
    _merge(env, extra_env or {}, "extra_env")
    lines = [f"# {title}: source this file (sh/bash) before launching"]
    needs_file = []
    for rule_set in sets:
        single = rule_set.single_algorithm()
        if single is None:
            needs_file.append(rule_set.collective)
            chosen = [name for name in rule_set.algorithms() if name != DEFAULT_ALGORITHM]
            if len(chosen) == 1:
                where = ranges_text(c for c in rule_set.coverage() if c.basis != LIBRARY)
                lines.append(f"# {rule_set.collective}: {chosen[0]} at {where} ranks only; forcing would apply it "
                             f"at every communicator size: use the tuning file")
            else:
                lines.append(f"# {rule_set.collective}: the best algorithm depends on size "
                             f"({', '.join(rule_set.algorithms())}); use the tuning file")
            continue
        if single == DEFAULT_ALGORITHM:
            lines.append(f"# {rule_set.collective}: the library's own choice everywhere (nothing to set)")
            continue
        forced = dict(force_env(rule_set.collective, single))
        _merge(env, forced, f"forcing {rule_set.collective}={single}")
        lines.append(f"# {rule_set.collective}: {single} everywhere")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    return EnvFile("\n".join(lines) + "\n", env, tuple(needs_file))


def read_env_file(text: str) -> dict[str, str]:
    """The variables an env file written by `write_env_file` sets (for `tunempi run`)."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith("export ") or "=" not in line:
            raise UsageError(f"not an env-file line: {line!r}")
        name, _, value = line[len("export "):].partition("=")
        parts = shlex.split(value)
        env[name] = parts[0] if parts else ""
    return env
