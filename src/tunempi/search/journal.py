"""The trial journal of a real search, kept in the results database (store/searches.py).

Every finished trial and every verification run is written (one SQLite transaction, WAL) before the
next run starts. Resuming replays the recorded trials through a fresh strategy with the same seed
(`SearchStrategy.replay`), which reproduces its state exactly, then continues; verification resumes
from the runs already recorded. A search is found again by its header (space, strategy, seed,
command, metric, library): the same command continues it, any other setting starts a new search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunempi.search.base import Trial, TrialResult, TrialStatus
from tunempi.search.verify import VerificationRun
from tunempi.store.results import ResultStore
from tunempi.store.searches import SearchLog, SearchRun


def _result(run: SearchRun) -> TrialResult:
    return TrialResult(run.value, TrialStatus(run.status), run.reason, run.metrics, run.duration_s)


class TrialJournal:
    """Trials and verification runs of one search, read back on open and appended as they finish."""

    def __init__(self, log: SearchLog) -> None:
        self.log = log
        self.trials: list[Trial] = []
        self.verification: list[tuple[dict[str, Any], VerificationRun]] = []
        for run in log.runs():
            if run.kind == "trial":
                self.trials.append(Trial(run.number, dict(run.params), _result(run)))
            else:
                self.verification.append((dict(run.params), VerificationRun(run.role, run.number, _result(run))))

    @classmethod
    def open(cls, store: ResultStore, header: Mapping[str, Any], library_fingerprint: str = "") -> TrialJournal:
        return cls(SearchLog(store, header, library_fingerprint))

    @property
    def search_id(self) -> str:
        return self.log.search_id

    def append_trial(self, trial: Trial, launch_argv: Sequence[str] = (), env: Mapping[str, str] | None = None
                     ) -> None:
        r = trial.result
        self.log.add(SearchRun("trial", trial.number, dict(trial.params), r.status.value, r.value, r.reason,
                               metrics=dict(r.metrics), duration_s=r.duration, launch_argv=tuple(launch_argv),
                               env=dict(env or {})))
        self.trials.append(trial)

    def append_verification(self, params: Mapping[str, Any], run: VerificationRun, launch_argv: Sequence[str] = (),
                            env: Mapping[str, str] | None = None) -> None:
        r = run.result
        self.log.add(SearchRun("verify", run.pair, dict(params), r.status.value, r.value, r.reason, role=run.role,
                               metrics=dict(r.metrics), duration_s=r.duration, launch_argv=tuple(launch_argv),
                               env=dict(env or {})))
        self.verification.append((dict(params), run))
