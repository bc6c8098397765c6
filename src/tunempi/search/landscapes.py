"""Built-in noisy landscapes: synthetic 'applications' with a known optimum, for evaluating strategies.

Each landscape is a parameter space plus a noise-free time function (None where a run fails) and a
noise level. Measurements are `true * (1 + noise * U[0, 1))`: one-sided, as timing noise is (other
jobs and daemons only ever slow a run down). The optimum is found by enumerating the grid, so the
"within 5% of the optimum" criterion is exact. Landscapes also emit performance-variable-like
metrics (what rl uses as state), derived from the configuration, with their own noise.

- parabola: AITuning's test case: one parameter, a parabola, 30% noise.
- interact: four parameters whose best values depend on each other (the eager limit's optimum moves
  with the progress mode; the polling spin's with the number of shared-memory cells), 10% noise.
- cliff: the interact landscape plus a cliff: past an eager-limit x cells memory budget runs fail,
  the optimum sits just below it, and with the progress thread a high spin count makes runs 3x
  slower (oversubscribed cores); a conditional parameter (THREAD_CORE, only with the thread), 10% noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tunempi.errors import UsageError
from tunempi.search.base import Objective, TrialResult, TrialStatus
from tunempi.search.space import CategoricalParam, Config, Expr, IntParam, ParamSpace, Value


@dataclass(frozen=True)
class Landscape:
    name: str
    description: str
    space: ParamSpace
    true_time: Callable[[Mapping[str, Value]], float | None] = field(repr=False)
    noise: float
    metrics: Callable[[Mapping[str, Value]], dict[str, float]] = field(repr=False, default=lambda c: {})

    @cached_property
    def optimum(self) -> tuple[float, Config]:
        """(best noise-free time, a configuration reaching it), by enumerating the grid."""
        best: tuple[float, Config] | None = None
        for config in self.space.grid_configs():
            t = self.true_time(config)
            if t is not None and (best is None or t < best[0]):
                best = (t, config)
        assert best is not None, f"landscape {self.name} has no successful configuration"
        return best

    def slowdown(self, config: Mapping[str, Value] | None) -> float:
        """True time of `config` over the optimum (inf when it fails or there is none)."""
        if config is None:
            return math.inf
        t = self.true_time(config)
        return math.inf if t is None else t / self.optimum[0]

    def objective(self, seed: int) -> Objective:
        """A seeded noisy objective; parameters left out take their start (default) value."""
        rng = np.random.default_rng(seed)
        full_start = {p.name: p.start_value() for p in self.space}

        def run(params: Mapping[str, Value]) -> TrialResult:
            config = self.space.normalize({**full_start, **params})
            t = self.true_time(config)
            u = float(rng.random())
            if t is None:
                return TrialResult(None, TrialStatus.FAILED, "out of memory: eager buffers exceed the budget")
            metrics = {k: v * (1 + self.noise * float(rng.random())) for k, v in self.metrics(config).items()}
            return TrialResult.ok(t * (1 + self.noise * u), metrics)

        return run


# -- parabola ----------------------------------------------------------------------------------------

def _parabola_time(c: Mapping[str, Value]) -> float:
    x = float(c["CVAR"])
    return 1.0 + ((x - 200.0) / 100.0) ** 2


PARABOLA = Landscape(
    "parabola",
    "AITuning's test: one parameter CVAR in 0..400, time 1 + ((CVAR - 200)/100)^2, 30% noise",
    ParamSpace((IntParam("CVAR", 0, 400, default=50),)),
    _parabola_time,
    0.30,
    lambda c: {"unexpected_queue": abs(float(c["CVAR"]) - 200.0)},
)


# -- interact / cliff --------------------------------------------------------------------------------

_PROGRESS_BEST_EAGER_KB = {"poll": 64, "thread": 160, "interrupt": 32}
_PROGRESS_COST = {"poll": 1.00, "thread": 0.93, "interrupt": 1.10}


def _interact_time(c: Mapping[str, Value]) -> float:
    eager = float(c["EAGER_KB"])
    spin = float(c["SPIN"])
    cells = float(c["CELLS"])
    progress = str(c["PROGRESS"])
    # Eager limit: the best depends on the progress mode (interaction), log-scale bowl.
    e = math.log2(eager / _PROGRESS_BEST_EAGER_KB[progress])
    eager_term = 1.0 + 0.12 * e * e
    # Spin: the best spin count grows with the number of shared-memory cells (interaction).
    best_spin = 100.0 + 3.0 * cells
    spin_term = 1.0 + 0.35 * ((spin - best_spin) / 500.0) ** 2
    cells_term = 1.0 + 0.05 * (math.log2(cells / 128.0)) ** 2
    return 10.0 * _PROGRESS_COST[progress] * eager_term * spin_term * cells_term


def _interact_metrics(c: Mapping[str, Value]) -> dict[str, float]:
    return {"unexpected_queue": 1000.0 / float(c["EAGER_KB"]),
            "posted_queue": float(c["CELLS"])}


_INTERACT_PARAMS = (
    IntParam("EAGER_KB", 8, 512, step_size=8, default=16),
    IntParam("SPIN", 0, 1600, step_size=50, default=0),
    IntParam("CELLS", 16, 256, step_size=16, default=64),
    CategoricalParam("PROGRESS", ("poll", "thread", "interrupt"), default="poll"),
)

INTERACT = Landscape(
    "interact",
    "4 parameters with interactions (eager limit x progress mode, spin x cells), 10% noise",
    ParamSpace(_INTERACT_PARAMS),
    _interact_time,
    0.10,
    _interact_metrics,
)

# Memory budget of eager buffers, in KB x cells: past it the run dies.
_CLIFF_BUDGET = 160 * 96


def _cliff_time(c: Mapping[str, Value]) -> float | None:
    eager = float(c["EAGER_KB"])
    cells = float(c["CELLS"])
    if eager * cells > _CLIFF_BUDGET:
        return None
    t = _interact_time(c)
    if c["PROGRESS"] == "thread":
        if float(c["SPIN"]) > 600:
            t *= 3.0  # the progress thread and a spinning main thread fight for the core
        if c.get("THREAD_CORE") == "same":
            t *= 1.25
    return t


CLIFF = Landscape(
    "cliff",
    "interact + failing runs past EAGER_KB x CELLS > 15360 (optimum at the edge), 3x slower with the "
    "progress thread and SPIN > 600, conditional THREAD_CORE, 10% noise",
    ParamSpace(_INTERACT_PARAMS + (
        CategoricalParam("THREAD_CORE", ("same", "sibling", "other"), default="same",
                         when=Expr.parse("PROGRESS == 'thread'")),
    )),
    _cliff_time,
    0.10,
    _interact_metrics,
)

LANDSCAPES: dict[str, Landscape] = {ls.name: ls for ls in (PARABOLA, INTERACT, CLIFF)}


def get_landscape(name: str) -> Landscape:
    try:
        return LANDSCAPES[name]
    except KeyError:
        raise UsageError(f"unknown landscape {name!r}; valid: {', '.join(LANDSCAPES)}") from None
