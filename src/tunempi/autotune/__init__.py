"""`tunempi autotune`: the pipeline the advice plans, from a launch line to one HTML report.

profile (profile/) -> the plan (profile.advise.application_plan) -> tune --from-profile and verify (tune/),
online (online/), search (search/), as the plan says they can pay -> compare (compare/) -> the report.
Each step is the library call its own command makes; the work directory's state file (`state.py`) records the
steps that finished, so the same command continues after Ctrl-C (docs/autotune.md).
"""

from tunempi.autotune.pipeline import (
    STEPS,
    AutotuneListener,
    AutotuneOutcome,
    AutotuneRequest,
    Context,
    StepRunner,
    run_autotune,
)
from tunempi.autotune.plan import budget_shares, chosen_steps
from tunempi.autotune.state import STATE_NAME, WorkState

__all__ = ["STATE_NAME", "STEPS", "AutotuneListener", "AutotuneOutcome", "AutotuneRequest", "Context", "StepRunner",
           "WorkState", "budget_shares", "chosen_steps", "run_autotune"]
