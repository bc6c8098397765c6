"""Which steps the plan picks, and each one's share of the budget.

The plan is `profile.advise.application_plan` (from the profile's time shares): tune (with verify after it),
online and search where it says they can pay; compare whenever one of them ran. The budget left after the
profile is split among the picked steps by weight (`WEIGHTS`): each gets `share_s` seconds, passed to its
own budget option (tune's timeout, online's runs, search's trials, compare's --budget); verify gets what tune
left of its share (`verify_share`) as its deadline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Relative weights of the steps that take a budget. tune's share includes its verify (a quarter of it).
WEIGHTS = {"tune": 4.0, "online": 2.0, "search": 2.0, "compare": 3.0}
#: tune's part of its share (verify runs in the rest).
TUNE_PART = 0.75
#: Runs of the application that online and search get at least, and at most.
MIN_RUNS, MAX_RUNS = 4, 40


def chosen_steps(plan: Sequence[Mapping[str, Any]], only: Sequence[str] = ()) -> list[str]:
    """The tuning steps the plan says can pay (`worth`), in pipeline order, then compare if any was picked.
    `only`: the user's restriction (--steps): steps outside it are left out even when worth it."""
    worth = {str(step["kind"]) for step in plan if step.get("worth")}
    picked = [kind for kind in ("tune", "online", "search") if kind in worth and (not only or kind in only)]
    return [*picked, "compare"] if picked else []


def budget_shares(steps: Sequence[str], budget_s: float) -> dict[str, float]:
    """Seconds for each of `steps` (those in WEIGHTS), proportional to its weight; empty without steps."""
    weighted = [s for s in steps if s in WEIGHTS]
    total = sum(WEIGHTS[s] for s in weighted)
    if not total:
        return {}
    return {s: max(0.0, budget_s) * WEIGHTS[s] / total for s in weighted}


def verify_share(tune_share_s: float | None, tune_seconds: float) -> float | None:
    """verify's seconds: what tune's step left of its share (tune takes TUNE_PART of it as its timeout and
    holds it, so a quarter at least unless tune overran), never below 0; run_verify begins no launch pair past
    it (issue 58: verify was not bounded within tune's share). None: tune had no share."""
    return None if tune_share_s is None else max(0.0, tune_share_s - tune_seconds)


def next_run_fits(now: float, deadline: float | None, run_s: float) -> bool:
    """Whether one more application run of about `run_s` seconds ends by the step's `deadline` (None: no
    deadline). A run begun is not cut, so a step that holds its share begins none past it (online ran 262 s of
    217, issue 58)."""
    return deadline is None or now + run_s <= deadline


def runs_for(share_s: float, run_s: float) -> int:
    """How many application runs fit in `share_s` (each about `run_s`), within MIN_RUNS..MAX_RUNS."""
    fit = int(share_s / run_s) if run_s > 0 else MAX_RUNS
    return max(MIN_RUNS, min(MAX_RUNS, fit))
