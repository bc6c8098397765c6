"""One regressor per algorithm (as OMPICollTune does with XGBoost), behind one estimator.

The algorithm is an integer code in one column of X (`algorithm_column`); the other columns are the
cell features. Algorithms never seen in `fit` predict NaN, so callers can tell "unknown" from "slow".
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y


class PerAlgorithmRegressor(RegressorMixin, BaseEstimator):
    """Fits a clone of `estimator` per distinct value of X[:, algorithm_column]."""

    def __init__(self, estimator: Any = None, algorithm_column: int = -1) -> None:
        self.estimator = estimator
        self.algorithm_column = algorithm_column

    def _split(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        column = self.algorithm_column % X.shape[1]
        codes = X[:, column].astype(int)
        return np.delete(X, column, axis=1), codes

    def fit(self, X: np.ndarray, y: np.ndarray) -> PerAlgorithmRegressor:
        if self.estimator is None:
            raise ValueError("PerAlgorithmRegressor needs an estimator")
        X, y = check_X_y(X, y, y_numeric=True)
        features, codes = self._split(X)
        self.estimators_: dict[int, Any] = {}
        for code in np.unique(codes):
            rows = codes == code
            self.estimators_[int(code)] = clone(self.estimator).fit(features[rows], y[rows])
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray, return_std: bool = False) -> Any:
        check_is_fitted(self, "estimators_")
        X = check_array(X)
        features, codes = self._split(X)
        mean = np.full(len(X), np.nan)
        std = np.full(len(X), np.nan)
        for code, model in self.estimators_.items():
            rows = codes == code
            if not rows.any():
                continue
            if return_std:
                mean[rows], std[rows] = model.predict(features[rows], return_std=True)
            else:
                mean[rows] = model.predict(features[rows])
        return (mean, std) if return_std else mean


def xgboost_per_algorithm(random_state: int | None = None, **params: Any) -> PerAlgorithmRegressor:
    """Per-algorithm gradient-boosted trees (XGBoost), OMPICollTune's model."""
    from xgboost import XGBRegressor  # imported lazily: xgboost is slow to import

    defaults = {"n_estimators": 200, "max_depth": 4, "learning_rate": 0.1, "n_jobs": 1, "verbosity": 0}
    defaults.update(params)
    return PerAlgorithmRegressor(XGBRegressor(random_state=random_state or 0, **defaults))
