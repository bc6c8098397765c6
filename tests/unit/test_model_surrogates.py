from __future__ import annotations

import numpy as np
import pytest

from tunempi.model import (
    PerAlgorithmRegressor,
    RandomForestSurrogate,
    TrendGaussianProcess,
    jackknife_variance,
    xgboost_per_algorithm,
)


def test_jackknife_variance_hand_computed() -> None:
    # Three trees; point 0: predictions 1, 3, 5. Leave-one-out means 4, 3, 2 around the mean 3:
    # (T-1)/T * (1 + 0 + 1) = 2/3 * 2 = 4/3. Point 1: all trees agree -> 0.
    per_tree = np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]])
    assert jackknife_variance(per_tree) == pytest.approx([4.0 / 3.0, 0.0])
    with pytest.raises(ValueError):
        jackknife_variance(np.array([[1.0, 2.0]]))


def test_forest_jackknife_matches_explicit_leave_one_tree_out() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(30, 2))
    y = 3 * X[:, 0] - X[:, 1] + rng.normal(0, 0.1, 30)
    forest = RandomForestSurrogate(n_estimators=5, random_state=1).fit(X, y)
    points = rng.uniform(size=(4, 2))
    trees = np.array([tree.predict(points) for tree in forest.forest_.estimators_])
    assert np.allclose(forest.per_tree_predict(points), trees)
    expected = []
    for k in range(len(points)):
        full = trees[:, k].mean()
        loo = [np.delete(trees[:, k], t).mean() for t in range(5)]
        expected.append(4 / 5 * sum((m - full) ** 2 for m in loo))
    assert np.allclose(forest.jackknife_variance(points), expected)
    assert np.allclose(forest.predict(points), trees.mean(axis=0))


def test_trend_gp_extrapolates_linearly_and_is_unsure_far_away() -> None:
    X = np.linspace(0, 0.5, 12)[:, None]
    y = 2.0 * X[:, 0] + 1.0
    model = TrendGaussianProcess(random_state=0).fit(X, y)
    mean, std = model.predict(np.array([[0.25], [1.0], [3.0]]), return_std=True)
    assert mean[1] == pytest.approx(3.0, abs=0.1)  # a forest would say 2.0 (flat beyond the data)
    assert std[0] < std[2]


def test_per_algorithm_regressor_routes_by_code_and_leaves_unknown_nan() -> None:
    X = np.array([[0.0, 0], [1.0, 0], [0.0, 1], [1.0, 1]])
    y = np.array([1.0, 2.0, 10.0, 20.0])
    model = PerAlgorithmRegressor(TrendGaussianProcess(optimize=False), algorithm_column=1).fit(X, y)
    mean, std = model.predict(np.array([[0.0, 0], [1.0, 1], [0.5, 7]]), return_std=True)
    assert mean[0] == pytest.approx(1.0, abs=0.2) and mean[1] == pytest.approx(20.0, abs=1.0)
    assert np.isnan(mean[2]) and np.isnan(std[2])


def test_xgboost_per_algorithm_fits_each_algorithm() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(size=60)
    codes = np.repeat([0, 1], 30)
    X = np.column_stack([x, codes])
    y = np.where(codes == 0, x, 5 + x)
    model = xgboost_per_algorithm(random_state=0, n_estimators=30).fit(X, y)
    prediction = model.predict(np.array([[0.5, 0], [0.5, 1]]))
    assert prediction[0] == pytest.approx(0.5, abs=0.15) and prediction[1] == pytest.approx(5.5, abs=0.15)
