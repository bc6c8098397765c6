"""Beyond the measured scales: which algorithm a tuning may name where it measured nothing.

A tuning measures some layouts (here: every cell at <= R ranks); a job runs at others. A *policy* picks, for
a cell above the measured scales, an algorithm or the library's own choice (`default`), from what was
measured (`Evidence`: the median latency of every measured (cell, algorithm), the library's default
included, as tune measures it in every cell it decides) and, for two policies, a model's prediction at
the cell. `EXTENSION_POLICY` is the one chosen by replaying the Peak sweeps (docs/strategies.md, "Beyond
the measured scales"); tune and a catalog call `extend(EXTENSION_POLICY, evidence, cells)`.

A cell of size s at R ranks looks at the measured cells of the same size at the largest measured node
counts (a rank count on fewer nodes says little about many: the network enters). The winner there is the
tuning's selection, else the measured algorithm with the lowest median (never `default`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tunempi.collectives import DEFAULT_ALGORITHM
from tunempi.errors import UsageError
from tunempi.space import Cell
from tunempi.strategy.base import MeasurementRecord

#: `gaining` keeps a winner only where it is faster than the default by at least this fraction at the
#: largest measured node count: of 0, 2, 5, 10 and 20 %, 5 % missed issue 57's goal on the fewest Peak
#: rows (docs/measurements/strategies.md, "Beyond the measured scales").
GAIN_MARGIN = 0.05

#: `smoothed` judges a winner's gain over its size and this many measured sizes each side (geometric mean): a
#: gain seen at the neighbouring sizes too, not one cell's (docs/measurements/strategies.md, "A third search":
#: 1, the only value tried in the replay; 1-3 on the files' medians, 1 with the fewest misses).
GAIN_NEIGHBOURS = 1

#: Every policy `extend` knows, in the order the replay table lists them.
POLICIES: tuple[str, ...] = ("default", "last", "strategy", "model", "held", "agree", "gaining", "smoothed")

#: What each policy picks in a cell above the measured scales (shown by `tunempi simulate --policy`).
POLICY_HELP: dict[str, str] = {
    "default": "the library's own choice",
    "last": "the winner at the largest measured node count, same size (ACCLAiM's last bucket as =any)",
    "strategy": "the strategy's own selection there (tunempi: its carry rule)",
    "model": "the model's predicted fastest algorithm",
    "held": "the winner where it won at the two largest measured node counts, else the default",
    "agree": "the winner where the model predicts it fastest by more than its own uncertainty, else the default",
    "gaining": f"the winner where it beats the default by >= {GAIN_MARGIN:.0%} at the largest measured node "
               "count and its gain did not shrink from the one below, else the default",
    "smoothed": f"as gaining, each gain the geometric mean over the size and {GAIN_NEIGHBOURS} measured size(s) "
                "each side",
}

#: The policy the library uses beyond a tuning's measured scales: chosen by the replay of both Peak sweeps
#: (docs/measurements/strategies.md, "A third search": `smoothed` misses issue 57's goal in 3 and 2 of 20
#: rows trained on <= 128 ranks, warm and cold, where `gaining` misses 7 and 5). With one measured node count
#: it names the default everywhere above: it can never be worse than the default there.
EXTENSION_POLICY = "smoothed"


@dataclass(frozen=True)
class Prediction:
    """A model's log latency (mean, latent std) per (cell, algorithm) at the cells to extend to."""

    mean: Mapping[tuple[Cell, str], float]
    std: Mapping[tuple[Cell, str], float]


class Evidence:
    """What a tuning knows at its measured scales: the median latency of every measured (cell, algorithm),
    `default` included; optionally the tuning's own `selection` there (the winner it writes: a strategy
    measures only the contenders, so its choice can be a model's; where it kept the default, no winner: a
    faster median of another algorithm there is not carried beyond it) and its `estimates` (latency, us) of
    the algorithms it did not measure in a cell. A measurement always wins over an estimate."""

    def __init__(self, medians: Mapping[tuple[Cell, str], float], *, selection: Mapping[Cell, str] | None = None,
                 estimates: Mapping[tuple[Cell, str], float] | None = None) -> None:
        self.medians = {key: float(v) for key, v in medians.items() if np.isfinite(v) and v > 0}
        self.selection = {c: a for c, a in (selection or {}).items() if a != DEFAULT_ALGORITHM}
        self.kept_default = {c for c, a in (selection or {}).items() if a == DEFAULT_ALGORITHM}
        self.estimates = {key: float(v) for key, v in (estimates or {}).items() if np.isfinite(v) and v > 0}
        self.cells = sorted({cell for cell, _ in self.medians} | set(self.selection))
        self.node_counts = sorted({cell.nodes for cell in self.cells})
        self._sizes: dict[tuple[str, tuple[int, int, int]], list[int]] = {}
        for cell in self.cells:
            self._sizes.setdefault((cell.collective, cell.scale), []).append(cell.msg_bytes)
        for sizes in self._sizes.values():
            sizes.sort()

    @classmethod
    def from_records(cls, records: Iterable[MeasurementRecord], *, selection: Mapping[Cell, str] | None = None,
                     estimates: Mapping[tuple[Cell, str], float] | None = None) -> Evidence:
        runs: dict[tuple[Cell, str], list[float]] = {}
        for record in records:
            if record.ok:
                runs.setdefault((record.cell, record.algorithm), []).append(record.measured_us)
        return cls({key: float(np.median(values)) for key, values in runs.items()}, selection=selection,
                   estimates=estimates)

    @property
    def max_ranks(self) -> int:
        return max((cell.ranks for cell in self.cells), default=0)

    def latency(self, cell: Cell, algorithm: str) -> float | None:
        measured = self.medians.get((cell, algorithm))
        return measured if measured is not None else self.estimates.get((cell, algorithm))

    def winner(self, cell: Cell) -> str | None:
        """The tuning's selection in the cell if it has one (None where it kept the default), else the fastest
        measured algorithm."""
        if cell in self.selection:
            return self.selection[cell]
        if cell in self.kept_default:
            return None
        measured = [(v, a) for (c, a), v in self.medians.items() if c == cell and a != DEFAULT_ALGORITHM]
        return min(measured)[1] if measured else None

    def neighbours(self, cell: Cell, k: int) -> list[Cell]:
        """The measured cells of `cell`'s layout at its size and the `k` measured sizes each side of it."""
        sizes = self._sizes.get((cell.collective, cell.scale), [])
        if cell.msg_bytes not in sizes:
            return []
        i = sizes.index(cell.msg_bytes)
        return [dataclasses.replace(cell, msg_bytes=size) for size in sizes[max(0, i - k):i + k + 1]]

    def anchor(self, nodes: int, target: Cell) -> Cell | None:
        """The measured cell at `nodes` nodes and the target's size: the same ppn if measured, else the
        most ranks (`None` if that size was not measured there)."""
        same = [c for c in self.cells if c.nodes == nodes and c.msg_bytes == target.msg_bytes]
        if not same:
            return None
        return max(same, key=lambda c: (c.ppn == target.ppn, c.ranks))


def _winner_at_top(evidence: Evidence, cell: Cell) -> tuple[str, Cell] | None:
    if not evidence.node_counts:
        return None
    anchor = evidence.anchor(evidence.node_counts[-1], cell)
    winner = evidence.winner(anchor) if anchor is not None else None
    return None if winner is None or anchor is None else (winner, anchor)


def gain_over_default(evidence: Evidence, cell: Cell | None, algorithm: str) -> float | None:
    """default / algorithm at a measured cell (> 1: the algorithm is faster), None unless both measured."""
    if cell is None:
        return None
    tuned, default = evidence.latency(cell, algorithm), evidence.latency(cell, DEFAULT_ALGORITHM)
    return None if tuned is None or default is None else default / tuned


def _smoothed_gain(evidence: Evidence, cell: Cell | None, algorithm: str) -> float | None:
    """gain_over_default's geometric mean over the cell's size and GAIN_NEIGHBOURS measured sizes each side (those where
    both are measured), None where none is."""
    gains = [g for near in (evidence.neighbours(cell, GAIN_NEIGHBOURS) if cell is not None else [])
             if (g := gain_over_default(evidence, near, algorithm)) is not None]
    return float(np.exp(np.mean(np.log(gains)))) if gains else None


def _predicted_best(prediction: Prediction, cell: Cell) -> list[tuple[float, float, str]]:
    """(mean, std, algorithm) of every algorithm predicted at the cell, fastest first."""
    return sorted((m, prediction.std.get((c, a), np.inf), a) for (c, a), m in prediction.mean.items()
                  if c == cell and a != DEFAULT_ALGORITHM and np.isfinite(m))


def pick(policy: str, evidence: Evidence, cell: Cell, *, prediction: Prediction | None = None,
         strategy_choice: str | None = None) -> str:
    """The algorithm `policy` names at `cell` (above the measured scales), `default` for the library's."""
    if policy == "default":
        return DEFAULT_ALGORITHM
    if policy == "strategy":
        return strategy_choice or DEFAULT_ALGORITHM
    if policy == "model":
        ranked = _predicted_best(prediction, cell) if prediction is not None else []
        return ranked[0][2] if ranked else DEFAULT_ALGORITHM
    top = _winner_at_top(evidence, cell)
    if top is None:
        return DEFAULT_ALGORITHM
    winner, anchor = top
    if policy == "last":
        return winner
    if policy == "agree":
        ranked = _predicted_best(prediction, cell) if prediction is not None else []
        if len(ranked) < 2 or ranked[0][2] != winner:
            return DEFAULT_ALGORITHM
        (best, best_std, _), (second, second_std, _) = ranked[0], ranked[1]
        return winner if second - best > float(np.hypot(best_std, second_std)) else DEFAULT_ALGORITHM
    # The rest need evidence at two node counts: with one, nothing is extended (the default everywhere).
    if len(evidence.node_counts) < 2:
        return DEFAULT_ALGORITHM
    below = evidence.anchor(evidence.node_counts[-2], cell)
    if policy == "held":
        return winner if below is not None and evidence.winner(below) == winner else DEFAULT_ALGORITHM
    if policy in ("gaining", "smoothed"):
        gain = gain_over_default if policy == "gaining" else _smoothed_gain
        gain_top, gain_below = gain(evidence, anchor, winner), gain(evidence, below, winner)
        if gain_top is None or gain_below is None:
            return DEFAULT_ALGORITHM
        return winner if gain_top >= 1 + GAIN_MARGIN and gain_top >= gain_below else DEFAULT_ALGORITHM
    raise UsageError(f"unknown extension policy {policy!r}; valid: {', '.join(POLICIES)}")


def extend(policy: str, evidence: Evidence, cells: Sequence[Cell], *, prediction: Prediction | None = None,
           strategy_choice: Mapping[Cell, str] | None = None) -> dict[Cell, str]:
    """`policy`'s pick at every cell of `cells` (the cells above the measured scales)."""
    if policy not in POLICIES:
        raise UsageError(f"unknown extension policy {policy!r}; valid: {', '.join(POLICIES)}")
    return {cell: pick(policy, evidence, cell, prediction=prediction,
                       strategy_choice=(strategy_choice or {}).get(cell)) for cell in cells}
