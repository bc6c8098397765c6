"""Noise-aware recommendation: is the best configuration really faster than the defaults?

A search's best measured value is optimistic (the minimum of noisy draws), so the winner is re-run
against the defaults, interleaved (default, best, best, default, ...: ABBA cancels a linear drift
such as a filling page cache or a neighbour job starting), `repeats` times each. Adjacent runs form
pairs, and the shared paired-evidence rule decides (tunempi.evidence, docs/evidence.md): the
recommendation is made only when the best configuration is "faster" at the stated level, i.e. the
`confidence` interval of the speedup lies above 1 and it won at least 3 of 4 pairs. Otherwise the answer
is "keep the defaults".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from tunempi import evidence
from tunempi.search.base import Objective, TrialResult
from tunempi.search.space import Value

MIN_PAIRS = evidence.MIN_PAIRS


@dataclass(frozen=True)
class Verdict:
    """The outcome of best-vs-default verification."""

    recommend: bool
    speedup: float | None          # estimated default/best time ratio (>1: best is faster)
    speedup_low: float | None      # lower bound of the two-sided `confidence` interval of the speedup
    p_value: float | None          # one-sided: H0 "best is not faster"
    pairs: int                     # usable pairs
    confidence: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def interleaved_schedule(repeats: int) -> list[str]:
    """'default'/'best' run order for `repeats` pairs: ABBA blocks, so drift hits both sides alike."""
    return [side for _, side in evidence.alternating("default", "best", repeats)]


def compare_to_default(best: Sequence[float | None], default: Sequence[float | None],
                       confidence: float = 0.95) -> Verdict:
    """Decide from paired measurements (None = failed run); `best[i]` and `default[i]` are a pair."""
    if len(best) != len(default):
        raise ValueError("best and default need the same number of measurements (pairs)")
    failed_best = sum(1 for b in best if b is None)
    if failed_best:
        return Verdict(False, None, None, None, 0, confidence,
                       f"keep the defaults: the best configuration failed {failed_best} of {len(best)} runs")
    pairs = [(b, d) for b, d in zip(best, default, strict=True) if b is not None and d is not None]
    if len(pairs) < MIN_PAIRS:
        return Verdict(False, None, None, None, len(pairs), confidence,
                       f"keep the defaults: {len(pairs)} usable pairs, at least {MIN_PAIRS} are needed")
    found = evidence.compare([b for b, _ in pairs], [d for _, d in pairs], level=(1.0 - confidence) / 2.0)
    n = found.pairs
    numbers = (f"{confidence:.0%} interval {found.low:.3f}x..{found.high:.3f}x, p={found.p_faster:.3g}, "
               f"faster in {found.wins:.0%} of {n} pairs")
    if found.verdict == "faster":
        return Verdict(True, found.speedup, found.low, found.p_faster, n, confidence,
                       f"recommend: {found.speedup:.3f}x faster than the defaults ({numbers})")
    why = ("not faster in enough pairs" if found.p_faster < found.level
           else f"not significant at {confidence:.0%}")
    return Verdict(False, found.speedup, found.low, found.p_faster, n, confidence,
                   f"keep the defaults: measured {found.speedup:.3f}x but {why} ({numbers})")


@dataclass(frozen=True)
class VerificationRun:
    role: str  # "best" or "default"
    pair: int
    result: TrialResult


def verify_against_default(
    objective: Objective,
    best_params: Mapping[str, Value],
    default_params: Mapping[str, Value],
    repeats: int,
    confidence: float = 0.95,
    done: Sequence[VerificationRun] = (),
    on_run: Callable[[VerificationRun], None] | None = None,
) -> Verdict:
    """Run the interleaved schedule (skipping runs already `done`, for resume) and decide."""
    results: dict[tuple[str, int], TrialResult] = {(r.role, r.pair): r.result for r in done}
    for index, role in enumerate(interleaved_schedule(repeats)):
        pair = index // 2
        if (role, pair) in results:
            continue
        result = objective(best_params if role == "best" else default_params)
        results[(role, pair)] = result
        if on_run is not None:
            on_run(VerificationRun(role, pair, result))
    best = [results[("best", i)].value if results[("best", i)].is_ok else None for i in range(repeats)]
    default = [results[("default", i)].value if results[("default", i)].is_ok else None for i in range(repeats)]
    return compare_to_default(best, default, confidence)
