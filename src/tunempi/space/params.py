"""Run-time parameter spaces: int / float / categorical parameters, conditions, JSON/TOML/PTF input.

A `ParamSpace` is plain data: an ordered tuple of parameters plus constraints. Search strategies
(search/) see only this and never a vendor name; the parameter *names* are opaque strings that mpi/
(later) knows how to apply. A configuration is a `dict[str, Value]` holding exactly the *active*
parameters (a parameter with a `when` condition is active only when the condition holds).

Sources:
- JSON (`to_json` / `from_json`): the lossless round-trip format used by the trial journal.
- TOML (`load_toml`): the user's format, see docs/search.md.
- PTF's MPI Parameters plugin files (`load_ptf`): `MPIPO_BEGIN <library>` ... `NAME=start:step:end;`
  `NAME=a,b,c;` `SEARCH=gde3;` ... `MPIPO_END`, imported as they are.

Malformed input raises `UsageError` with the file, the line and the reason.
"""

from __future__ import annotations

import ast
import json
import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tunempi.errors import UsageError

Value = int | float | str | bool
Config = dict[str, Value]

# Number of points a float range without a step offers to grid-based strategies.
DEFAULT_FLOAT_GRID_POINTS = 9
# Grid ladder factor of a log-scaled integer range without an explicit one.
DEFAULT_LOG_FACTOR = 2


# --------------------------------------------------------------------------------------------------
# Safe expressions for conditions and constraints
# --------------------------------------------------------------------------------------------------

_ALLOWED_NODES = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn,
    ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod,
    ast.Name, ast.Load, ast.Constant, ast.Tuple, ast.List,
)


class _Inactive(Exception):
    """An expression referred to a parameter that is not active in the configuration."""


@dataclass(frozen=True)
class Expr:
    """A boolean expression over parameter names: comparisons, and/or/not, + - * / // %, `in (...)`.

    Parsed with Python's `ast` and evaluated by walking the tree (never `eval`), so a space file
    cannot run code. `true`/`false` are accepted as well as Python's spelling.
    """

    source: str
    names: frozenset[str] = field(default=frozenset(), compare=False)
    tree: ast.Expression | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, source: str) -> Expr:
        text = source.strip()
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError as exc:
            raise UsageError(f"bad expression {source!r}: {exc.msg}") from None
        names: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED_NODES):
                raise UsageError(
                    f"bad expression {source!r}: {type(node).__name__} is not allowed "
                    "(use names, numbers, strings, comparisons, and/or/not, + - * / // %, in (...))"
                )
            if isinstance(node, ast.Name) and node.id not in ("true", "false", "True", "False"):
                names.add(node.id)
        return cls(text, frozenset(names), tree)

    def evaluate(self, config: Mapping[str, Value]) -> bool:
        """Truth of the expression; False when it refers to a parameter that is not active."""
        try:
            tree = self.tree if self.tree is not None else ast.parse(self.source, mode="eval")
            return bool(_eval_node(tree.body, config))
        except _Inactive:
            return False
        except (TypeError, ZeroDivisionError):
            return False


def _eval_node(node: ast.AST, config: Mapping[str, Value]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("true", "True"):
            return True
        if node.id in ("false", "False"):
            return False
        if node.id not in config:
            raise _Inactive(node.id)
        return config[node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_eval_node(e, config) for e in node.elts)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval_node(v, config) for v in node.values)
        return any(_eval_node(v, config) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        operand = _eval_node(node.operand, config)
        if isinstance(node.op, ast.Not):
            return not operand
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _eval_node(node.left, config), _eval_node(node.right, config)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
        return ops[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _eval_node(node.left, config)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval_node(comparator, config)
            ok = {
                ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
                ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
                ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
                ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
            }[type(op)](left, right)
            if not ok:
                return False
            left = right
        return True
    raise UsageError(f"unsupported expression node {type(node).__name__}")  # pragma: no cover


# --------------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------------

class Param:
    """Common interface of the three parameter kinds (all frozen dataclasses).

    `grid()` is the ordered finite set grid-based strategies enumerate and step through;
    `to_unit`/`from_unit` map to and from [0, 1] for continuous optimisers (GDE3); `from_unit` always
    returns a valid value.
    """

    kind: ClassVar[str]
    name: str
    default: Any
    when: Expr | None

    def grid(self) -> tuple[Value, ...]:
        raise NotImplementedError

    def contains(self, value: Any) -> bool:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator) -> Value:
        """A random value: uniform in the unit interval, mapped by from_unit (log-uniform on log ranges)."""
        return self.from_unit(float(rng.random()))

    def to_unit(self, value: Value) -> float:
        raise NotImplementedError

    def from_unit(self, u: float) -> Value:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def ordered(self) -> bool:
        """Whether 'one step up / down' means something (numeric parameters)."""
        return True

    def start_value(self) -> Value:
        """The declared default, else the middle of the grid: where local searches start."""
        if self.default is not None:
            return self.default
        values = self.grid()
        return values[(len(values) - 1) // 2]

    def grid_index(self, value: Value) -> int:
        """Index of the grid value nearest to `value`."""
        values = self.grid()
        if not self.ordered:
            return values.index(value)
        u = self.to_unit(value)
        return int(np.argmin([abs(self.to_unit(v) - u) for v in values]))

    def step(self, value: Value, direction: int) -> Value | None:
        """The grid neighbour one step up (+1) or down (-1) of `value`, or None past an end."""
        values = self.grid()
        i = self.grid_index(value)
        current = values[i]
        # A value between two grid points steps to the grid point on the requested side.
        if self.ordered and current != value:
            if direction > 0 and self.to_unit(current) > self.to_unit(value):
                return current
            if direction < 0 and self.to_unit(current) < self.to_unit(value):
                return current
        j = i + direction
        return values[j] if 0 <= j < len(values) else None

    def format(self, value: Value) -> str:
        """The value as an environment variable / command-line string."""
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float):
            return repr(value)
        return str(value)

    def _common_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.default is not None:
            out["default"] = self.default
        if self.when is not None:
            out["when"] = self.when.source
        return out


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name or ""):
        raise UsageError(f"bad parameter name {name!r}: use letters, digits, '_' and '.'")


def _unit_in_range(value: float, low: float, high: float, top: float, log: bool) -> float:
    """`value` of a numeric range mapped to [0, 1]: by its logarithm on log ranges, else linearly up to
    `top` (the largest value the range holds); 0.5 for a range of one value."""
    if high == low:
        return 0.5
    if log:
        return math.log(value / low) / math.log(high / low)
    return (value - low) / (top - low) if top > low else 0.5


@dataclass(frozen=True)
class IntParam(Param):
    """Integers in [low, high]: every `step`-th from low, or (log=True) any integer, log-uniformly.

    A log range's grid is the ladder low, low*factor, ... plus high.
    """

    kind: ClassVar[str] = "int"
    name: str
    low: int
    high: int
    step_size: int = 1
    log: bool = False
    factor: int = DEFAULT_LOG_FACTOR
    default: int | None = None
    when: Expr | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        if self.low > self.high:
            raise UsageError(f"{self.name}: low {self.low} > high {self.high}")
        if self.step_size < 1:
            raise UsageError(f"{self.name}: step must be >= 1, got {self.step_size}")
        if self.log:
            if self.low < 1:
                raise UsageError(f"{self.name}: a log range needs low >= 1, got {self.low}")
            if self.step_size != 1:
                raise UsageError(f"{self.name}: a log range cannot also have a step")
            if self.factor < 2:
                raise UsageError(f"{self.name}: a log range needs a factor >= 2, got {self.factor}")
        if self.default is not None and not self.contains(self.default):
            raise UsageError(f"{self.name}: default {self.default} is outside {self.describe()}")

    def describe(self) -> str:
        if self.log:
            return f"{self.low}:*{self.factor}:{self.high} (log)"
        return f"{self.low}:{self.step_size}:{self.high}"

    def _top(self) -> int:
        return self.low + (self.high - self.low) // self.step_size * self.step_size

    def grid(self) -> tuple[int, ...]:
        if self.log:
            ladder = []
            v = self.low
            while v < self.high:
                ladder.append(v)
                v *= self.factor
            ladder.append(self.high)
            return tuple(ladder)
        return tuple(range(self.low, self._top() + 1, self.step_size))

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return False
        if not self.low <= value <= self.high:
            return False
        return self.log or (value - self.low) % self.step_size == 0

    def to_unit(self, value: Value) -> float:
        return _unit_in_range(float(value), self.low, self.high, self._top(), self.log)

    def from_unit(self, u: float) -> int:
        u = min(max(float(u), 0.0), 1.0)
        if self.log:
            v = round(self.low * (self.high / self.low) ** u)
            return int(min(max(v, self.low), self.high))
        n_steps = (self._top() - self.low) // self.step_size
        return int(self.low + round(u * n_steps) * self.step_size)

    def to_dict(self) -> dict[str, Any]:
        out = self._common_dict()
        out.update(low=self.low, high=self.high)
        if self.log:
            out.update(log=True, factor=self.factor)
        elif self.step_size != 1:
            out["step"] = self.step_size
        return out


@dataclass(frozen=True)
class FloatParam(Param):
    """Reals in [low, high], uniform or log-uniform; with `step_size`, only low + k*step."""

    kind: ClassVar[str] = "float"
    name: str
    low: float
    high: float
    step_size: float | None = None
    log: bool = False
    grid_points: int = DEFAULT_FLOAT_GRID_POINTS
    default: float | None = None
    when: Expr | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise UsageError(f"{self.name}: need finite low <= high, got {self.low}, {self.high}")
        if self.step_size is not None and self.step_size <= 0:
            raise UsageError(f"{self.name}: step must be > 0, got {self.step_size}")
        if self.log and (self.low <= 0 or self.step_size is not None):
            raise UsageError(f"{self.name}: a log range needs low > 0 and no step")
        if self.grid_points < 2:
            raise UsageError(f"{self.name}: grid_points must be >= 2")
        if self.default is not None and not self.contains(self.default):
            raise UsageError(f"{self.name}: default {self.default} is outside [{self.low}, {self.high}]")

    def _n_steps(self) -> int:
        assert self.step_size is not None
        return int(math.floor((self.high - self.low) / self.step_size + 1e-9))

    def grid(self) -> tuple[float, ...]:
        if self.step_size is not None:
            return tuple(round(self.low + k * self.step_size, 12) for k in range(self._n_steps() + 1))
        if self.low == self.high:
            return (self.low,)
        points = (np.geomspace if self.log else np.linspace)(self.low, self.high, self.grid_points)
        return tuple(float(p) for p in points)

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
            return False
        if not self.low - 1e-12 <= value <= self.high + 1e-12:
            return False
        if self.step_size is None:
            return True
        k = (value - self.low) / self.step_size
        return abs(k - round(k)) < 1e-6

    def to_unit(self, value: Value) -> float:
        return _unit_in_range(float(value), self.low, self.high, self.high, self.log)

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        if self.step_size is not None:
            n = self._n_steps()
            return round(self.low + round(u * n) * self.step_size, 12)
        if self.log:
            return float(min(max(self.low * (self.high / self.low) ** u, self.low), self.high))
        return float(self.low + u * (self.high - self.low))

    def to_dict(self) -> dict[str, Any]:
        out = self._common_dict()
        out.update(low=self.low, high=self.high)
        if self.step_size is not None:
            out["step"] = self.step_size
        if self.log:
            out["log"] = True
        if self.grid_points != DEFAULT_FLOAT_GRID_POINTS:
            out["grid_points"] = self.grid_points
        return out


@dataclass(frozen=True)
class CategoricalParam(Param):
    """One of a list of values (strings, ints, floats, booleans), in the order given.

    The order is used by stepping strategies (individual, rl): list ordinal values in order.
    """

    kind: ClassVar[str] = "categorical"
    name: str
    choices: tuple[Value, ...]
    default: Value | None = None
    when: Expr | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.choices:
            raise UsageError(f"{self.name}: a list needs at least one value")
        if len(set(map(_key_of, self.choices))) != len(self.choices):
            raise UsageError(f"{self.name}: repeated values in {list(self.choices)}")
        for c in self.choices:
            if not isinstance(c, str | int | float | bool):
                raise UsageError(f"{self.name}: value {c!r} is not a string, number or boolean")
        if self.default is not None and not self.contains(self.default):
            raise UsageError(f"{self.name}: default {self.default!r} is not one of {list(self.choices)}")

    @property
    def ordered(self) -> bool:
        return True  # stepping moves along the declared order

    def grid(self) -> tuple[Value, ...]:
        return self.choices

    def contains(self, value: Any) -> bool:
        return any(_key_of(value) == _key_of(c) for c in self.choices)

    def _index(self, value: Value) -> int:
        for i, c in enumerate(self.choices):
            if _key_of(c) == _key_of(value):
                return i
        raise UsageError(f"{self.name}: {value!r} is not one of {list(self.choices)}")

    def grid_index(self, value: Value) -> int:
        return self._index(value)

    def step(self, value: Value, direction: int) -> Value | None:
        j = self._index(value) + direction
        return self.choices[j] if 0 <= j < len(self.choices) else None

    def sample(self, rng: np.random.Generator) -> Value:
        return self.choices[int(rng.integers(len(self.choices)))]

    def to_unit(self, value: Value) -> float:
        n = len(self.choices)
        return (self._index(value) + 0.5) / n

    def from_unit(self, u: float) -> Value:
        n = len(self.choices)
        return self.choices[min(int(min(max(u, 0.0), 1.0) * n), n - 1)]

    def to_dict(self) -> dict[str, Any]:
        out = self._common_dict()
        out["values"] = list(self.choices)
        return out


def _key_of(value: Any) -> tuple[str, Any]:
    """A hashable key that keeps True apart from 1 and 1 apart from 1.0 ('1' != 1)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | np.integer):
        return ("num", int(value))
    if isinstance(value, float | np.floating):
        return ("num", float(value)) if not float(value).is_integer() else ("num", int(value))
    return ("str", str(value))


def config_key(config: Mapping[str, Value]) -> tuple[tuple[str, tuple[str, Any]], ...]:
    """A hashable, order-independent identity of a configuration (for caches and dedup)."""
    return tuple(sorted((k, _key_of(v)) for k, v in config.items()))


def param_from_dict(data: Mapping[str, Any]) -> Param:
    """Inverse of `Param.to_dict` (also the per-parameter table of the TOML format)."""
    data = dict(data)
    kind = data.pop("kind", None)
    name = data.pop("name", None)
    if not isinstance(name, str):
        raise UsageError("every parameter needs a 'name' (a string)")
    when = data.pop("when", None)
    when_expr = Expr.parse(when) if isinstance(when, str) else None
    if when is not None and when_expr is None:
        raise UsageError(f"{name}: 'when' must be a string expression")
    default = data.pop("default", None)
    try:
        if kind == "int":
            p: Param = IntParam(
                name, int(data.pop("low")), int(data.pop("high")), step_size=int(data.pop("step", 1)),
                log=bool(data.pop("log", False)), factor=int(data.pop("factor", DEFAULT_LOG_FACTOR)),
                default=None if default is None else _as_int(name, default), when=when_expr,
            )
        elif kind == "float":
            step = data.pop("step", None)
            p = FloatParam(
                name, float(data.pop("low")), float(data.pop("high")),
                step_size=None if step is None else float(step), log=bool(data.pop("log", False)),
                grid_points=int(data.pop("grid_points", DEFAULT_FLOAT_GRID_POINTS)),
                default=None if default is None else float(default), when=when_expr,
            )
        elif kind == "categorical":
            values = data.pop("values")
            if not isinstance(values, list):
                raise UsageError(f"{name}: 'values' must be a list")
            p = CategoricalParam(name, tuple(values), default=default, when=when_expr)
        else:
            raise UsageError(f"{name}: unknown kind {kind!r}; valid kinds: int, float, categorical")
    except KeyError as exc:
        raise UsageError(f"{name}: missing key {exc.args[0]!r} for kind {kind}") from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{name}: {exc}") from None
    if data:
        raise UsageError(f"{name}: unknown keys {sorted(data)}")
    return p


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name}: default {value!r} is not an integer")
    return value


# --------------------------------------------------------------------------------------------------
# The space
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamSpace:
    """An ordered set of parameters, constraints between them, and PTF-style search hints.

    `when` conditions may only refer to parameters declared *before* (so a configuration can be
    built in declaration order); `constraints` may refer to any parameter and must all hold for a
    configuration to be run (a constraint naming an inactive parameter counts as satisfied).
    """

    params: tuple[Param, ...]
    constraints: tuple[Expr, ...] = ()
    library: str | None = None
    hints: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.params:
            raise UsageError("the parameter space is empty")
        seen: set[str] = set()
        for p in self.params:
            if p.name in seen:
                raise UsageError(f"parameter {p.name} is declared twice")
            if p.when is not None:
                unknown = p.when.names - seen
                if unknown:
                    raise UsageError(
                        f"{p.name}: condition {p.when.source!r} refers to {sorted(unknown)}, which "
                        f"must be parameters declared before it (declared so far: {sorted(seen)})"
                    )
            seen.add(p.name)
        for c in self.constraints:
            unknown = c.names - seen
            if unknown:
                raise UsageError(
                    f"constraint {c.source!r} refers to unknown {sorted(unknown)}; parameters: {sorted(seen)}"
                )

    # -- access ------------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise UsageError(f"unknown parameter {name!r}; parameters: {', '.join(self.names)}")

    # -- configurations ----------------------------------------------------------------------------
    def normalize(self, values: Mapping[str, Value]) -> Config:
        """Keep the active parameters of a full assignment, in declaration order."""
        out: Config = {}
        for p in self.params:
            if p.when is not None and not p.when.evaluate(out):
                continue
            if p.name not in values:
                raise UsageError(f"configuration lacks active parameter {p.name}")
            out[p.name] = values[p.name]
        return out

    def is_feasible(self, config: Mapping[str, Value]) -> bool:
        """Whether every constraint holds (constraints over inactive parameters are ignored)."""
        for c in self.constraints:
            if c.names <= config.keys() and not c.evaluate(config):
                return False
        return True

    def check(self, config: Mapping[str, Value]) -> None:
        """Raise UsageError unless `config` is exactly an active, in-range, feasible configuration."""
        unknown = set(config) - set(self.names)
        if unknown:
            raise UsageError(f"unknown parameters {sorted(unknown)}; parameters: {', '.join(self.names)}")
        for name, value in config.items():
            p = self[name]
            if not p.contains(value):
                raise UsageError(f"{name}={value!r} is outside the space")
        expected = self.normalize({**self.start_config(), **config})
        if set(expected) != set(config):
            raise UsageError(f"active parameters are {sorted(expected)}, got {sorted(config)}")
        if not self.is_feasible(config):
            raise UsageError(f"configuration {config} violates a constraint")

    def contains(self, config: Mapping[str, Value]) -> bool:
        try:
            self.check(config)
        except UsageError:
            return False
        return True

    def start_config(self) -> Config:
        """Each parameter at its default (else its grid middle); may violate a constraint."""
        return self.normalize({p.name: p.start_value() for p in self.params})

    def sample(self, rng: np.random.Generator, max_tries: int = 1000) -> Config:
        """A uniformly drawn feasible configuration (rejection sampling over the constraints)."""
        for _ in range(max_tries):
            config = self.normalize({p.name: p.sample(rng) for p in self.params})
            if self.is_feasible(config):
                return config
        raise UsageError(f"no feasible configuration found in {max_tries} draws: check the constraints")

    def grid_configs(self) -> Iterator[Config]:
        """Every feasible configuration of the grid, in lexicographic order, without duplicates.

        Inactive parameters collapse (a conditional parameter only multiplies the configurations
        where it is active).
        """
        yield from self._grid_from(0, {})

    def _grid_from(self, index: int, partial: Config) -> Iterator[Config]:
        if index == len(self.params):
            if self.is_feasible(partial):
                yield dict(partial)
            return
        p = self.params[index]
        if p.when is not None and not p.when.evaluate(partial):
            yield from self._grid_from(index + 1, partial)
            return
        for v in p.grid():
            partial[p.name] = v
            yield from self._grid_from(index + 1, partial)
        del partial[p.name]

    def grid_size(self) -> int:
        """Number of grid configurations (counted, so conditions and constraints are honoured)."""
        return sum(1 for _ in self.grid_configs())

    def to_unit_vector(self, config: Mapping[str, Value]) -> np.ndarray:
        """[0,1]^d coordinates; inactive parameters sit at their start value."""
        full = {p.name: p.start_value() for p in self.params}
        full.update(config)
        return np.array([p.to_unit(full[p.name]) for p in self.params], dtype=float)

    def from_unit_vector(self, u: np.ndarray) -> Config:
        return self.normalize({p.name: p.from_unit(float(x)) for p, x in zip(self.params, u, strict=True)})

    def format_env(self, config: Mapping[str, Value]) -> dict[str, str]:
        """Values as strings, keyed by parameter name."""
        return {name: self[name].format(value) for name, value in config.items()}

    # -- serialisation -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"params": [p.to_dict() for p in self.params]}
        if self.constraints:
            out["constraints"] = [c.source for c in self.constraints]
        if self.library:
            out["library"] = self.library
        if self.hints:
            out["hints"] = dict(self.hints)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ParamSpace:
        params = data.get("params")
        if not isinstance(params, list):
            raise UsageError("a space needs a 'params' list")
        constraints = data.get("constraints", [])
        if not isinstance(constraints, list) or not all(isinstance(c, str) for c in constraints):
            raise UsageError("'constraints' must be a list of strings")
        hints = data.get("hints", {})
        return cls(
            tuple(param_from_dict(p) for p in params),
            tuple(Expr.parse(c) for c in constraints),
            library=data.get("library"),
            hints={str(k): str(v) for k, v in dict(hints).items()},
        )

    @classmethod
    def from_json(cls, text: str) -> ParamSpace:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise UsageError(f"bad space JSON at line {exc.lineno}: {exc.msg}") from None


# --------------------------------------------------------------------------------------------------
# TOML
# --------------------------------------------------------------------------------------------------

_SIZE_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3}
_RANGE_RE = re.compile(r"^\s*(?P<start>[^:]+?)\s*:\s*(?P<op>[+*]?)\s*(?P<step>[^:]+?)\s*:\s*(?P<end>[^:]+?)\s*$")


def _number(text: str) -> int | float:
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
    m = _RANGE_RE.match(text)
    if not m:
        raise UsageError(f"{name}: range {text!r} is not start:step:end, start:+step:end or start:*factor:end")
    try:
        start, step, end = (_number(m.group(g)) for g in ("start", "step", "end"))
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


# --------------------------------------------------------------------------------------------------
# PTF (Periscope Tuning Framework) MPI Parameters plugin files
# --------------------------------------------------------------------------------------------------

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
    m = _RANGE_RE.match(rhs)
    if not m:
        raise UsageError(f"{name}: range {rhs!r} is not start:step:end")
    return parse_range(name, rhs)


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


def _ptf_scalar(text: str) -> Value:
    try:
        return _number(text)
    except ValueError:
        return text


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------

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


def product_size(space: ParamSpace) -> int:
    """Upper bound of the grid size (product of grid lengths), cheap for huge spaces."""
    return math.prod(len(p.grid()) for p in space.params)


__all__ = [
    "CategoricalParam", "Config", "Expr", "FloatParam", "IntParam", "Param", "ParamSpace", "Value",
    "config_key", "load_space", "param_from_dict", "parse_ptf", "parse_range", "parse_toml", "product_size",
]
