"""Random-forest surrogate with the jackknife variance of its trees (ACCLAiM's uncertainty measure)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import RandomForestRegressor
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y


def jackknife_variance(per_tree: np.ndarray) -> np.ndarray:
    """Leave-one-tree-out jackknife variance of a forest's mean prediction.

    `per_tree` has shape (n_trees, n_points): every tree's prediction at every point. With the forest
    mean m and the mean m_(-t) of all trees but t, the estimate is (T-1)/T * sum_t (m_(-t) - m)^2,
    which equals the trees' sample variance divided by T. ACCLAiM ranks candidate points by it.
    """
    per_tree = np.asarray(per_tree, dtype=float)
    if per_tree.ndim != 2 or per_tree.shape[0] < 2:
        raise ValueError("per_tree must be (n_trees >= 2, n_points)")
    n_trees = per_tree.shape[0]
    mean = per_tree.mean(axis=0)
    leave_one_out = (n_trees * mean - per_tree) / (n_trees - 1)
    return (n_trees - 1) / n_trees * ((leave_one_out - mean) ** 2).sum(axis=0)


class RandomForestSurrogate(RegressorMixin, BaseEstimator):
    """A scikit-learn random forest that also reports per-tree predictions and their jackknife variance."""

    def __init__(self, n_estimators: int = 100, min_samples_leaf: int = 1, max_features: float | str = 1.0,
                 random_state: int | None = None) -> None:
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: np.ndarray) -> RandomForestSurrogate:
        X, y = check_X_y(X, y, y_numeric=True)
        self.forest_ = RandomForestRegressor(
            n_estimators=self.n_estimators, min_samples_leaf=self.min_samples_leaf,
            max_features=self.max_features, random_state=self.random_state, n_jobs=1,
        ).fit(X, y)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "forest_")
        return self.forest_.predict(check_array(X))

    def per_tree_predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions of every tree, shape (n_trees, n_points)."""
        check_is_fitted(self, "forest_")
        X = check_array(X)
        return np.stack([tree.predict(X) for tree in self.forest_.estimators_])

    def jackknife_variance(self, X: np.ndarray) -> np.ndarray:
        return jackknife_variance(self.per_tree_predict(X))
