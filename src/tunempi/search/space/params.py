"""Run-time parameters (int / float / categorical; linear or log; conditions) and the space they form.

A `ParamSpace` is plain data: an ordered tuple of parameters plus constraints. Search strategies
(search/) see only this and never a vendor name; the parameter *names* are opaque strings that mpi/
knows how to apply. A configuration is a `dict[str, Value]` holding exactly the *active* parameters
(a parameter with a `when` condition is active only when the condition holds). JSON (`to_json` /
`from_json`) is the lossless round-trip format the trial journal uses.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from tunempi.errors import UsageError
from tunempi.search.space.expressions import Config, Expr, Value

# Number of points a float range without a step offers to grid-based strategies.
DEFAULT_FLOAT_GRID_POINTS = 9
# Grid ladder factor of a log-scaled integer range without an explicit one.
DEFAULT_LOG_FACTOR = 2


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


def product_size(space: ParamSpace) -> int:
    """Upper bound of the grid size (product of grid lengths), cheap for huge spaces."""
    return math.prod(len(p.grid()) for p in space.params)
