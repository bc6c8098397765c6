"""Bayesian search: Optuna's TPE sampler driven through Optuna's own ask/tell API.

Each parameter is suggested in declaration order with the matching `suggest_*` call (int with step
or log, float with step or log, categorical), so conditional parameters are only suggested when
active (define-by-run). Configurations that break a constraint are told to Optuna with the failure
penalty without being run; failed runs get the penalty too (2x the worst successful value), so TPE
learns to avoid them rather than ignoring them (Optuna drops FAIL trials from its model).
"""

from __future__ import annotations

import math
import warnings

import optuna

from tunempi.search.base import SearchStrategy, TrialResult
from tunempi.search.space import CategoricalParam, Config, FloatParam, IntParam, ParamSpace

# Constraint-breaking proposals in a row before giving up on the space.
MAX_INFEASIBLE_ASKS = 200


class BayesSearch(SearchStrategy):
    name = "bayes"

    def __init__(self, space: ParamSpace, *, seed: int = 0, n_startup_trials: int = 10,
                 multivariate: bool = True) -> None:
        super().__init__(space, seed=seed)
        self.n_startup_trials = n_startup_trials
        self.multivariate = multivariate
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        conditional = any(p.when is not None for p in space)
        with warnings.catch_warnings():
            # multivariate/group are marked experimental in Optuna; they model interactions.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=n_startup_trials, multivariate=multivariate,
                group=multivariate and conditional,
            )
        self.study_ = optuna.create_study(direction="minimize", sampler=sampler)
        self._optuna_trial: optuna.trial.Trial | None = None

    def _suggest(self, trial: optuna.trial.Trial) -> Config:
        config: Config = {}
        for p in self.space:
            if p.when is not None and not p.when.evaluate(config):
                continue
            if isinstance(p, IntParam):
                high = p.grid()[-1] if not p.log else p.high
                config[p.name] = int(trial.suggest_int(p.name, p.low, high, step=p.step_size, log=p.log))
            elif isinstance(p, FloatParam):
                if p.step_size is not None:
                    drawn = trial.suggest_float(p.name, p.low, p.grid()[-1], step=p.step_size)
                else:
                    drawn = trial.suggest_float(p.name, p.low, p.high, log=p.log)
                config[p.name] = p.from_unit(p.to_unit(drawn))  # snap off float rounding
            elif isinstance(p, CategoricalParam):
                choice = trial.suggest_categorical(p.name, list(p.choices))
                assert choice is not None  # a space's choices never hold None
                config[p.name] = choice
            else:  # pragma: no cover - the three kinds are exhaustive
                raise TypeError(f"unknown parameter kind {type(p).__name__}")
        return config

    def _tell_optuna(self, score: float) -> None:
        assert self._optuna_trial is not None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if math.isfinite(score):
                self.study_.tell(self._optuna_trial, score)
            else:
                self.study_.tell(self._optuna_trial, state=optuna.trial.TrialState.FAIL)
        self._optuna_trial = None

    def _ask(self) -> Config | None:
        for _ in range(MAX_INFEASIBLE_ASKS):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self._optuna_trial = self.study_.ask()
                config = self._suggest(self._optuna_trial)
            if self.space.is_feasible(config):
                return config
            penalty = self.penalty()
            self._tell_optuna(penalty if penalty is not None else math.inf)
        return None

    def _observe(self, params: Config, result: TrialResult) -> None:
        self._tell_optuna(self.score(result))
