"""Gaussian process with a linear trend: smooth interpolation, log-linear extrapolation, honest uncertainty.

Collective latency is close to linear in log-log coordinates over long stretches (alpha + beta * size,
log p trees, ...). A forest predicts flat beyond the measured range and its trees agree there, so its
uncertainty is lowest exactly where nothing was measured. This model fits a ridge-regularised linear
trend to the (log) target and a Gaussian process (ARD RBF + white noise) to the residuals: inside the
data it interpolates the residuals, beyond it it falls back to the trend, and its standard deviation
grows with the distance to the data.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel, WhiteKernel
from sklearn.utils.validation import check_array, check_is_fitted, check_X_y


def default_kernel(n_features: int) -> Kernel:
    return (ConstantKernel(0.5, (1e-3, 1e2)) * RBF(np.full(n_features, 0.3), (0.03, 30.0))
            + WhiteKernel(0.01, (1e-5, 1.0)))


class TrendGaussianProcess(RegressorMixin, BaseEstimator):
    """Linear trend + GP residual regressor; `predict(X, return_std=True)` gives the latent std.

    Parameters
    ----------
    kernel : initial kernel (default: ConstantKernel * ARD RBF + WhiteKernel); pass a fitted `kernel_`
        with `optimize=False` to refit cheaply with the same hyperparameters.
    optimize : tune kernel hyperparameters by maximum likelihood (L-BFGS-B) in `fit`.
    ridge : L2 penalty of the linear trend (features are expected on comparable scales, e.g. [0, 1]).
    """

    def __init__(self, kernel: Kernel | None = None, optimize: bool = True, ridge: float = 1e-2,
                 random_state: int | None = None) -> None:
        self.kernel = kernel
        self.optimize = optimize
        self.ridge = ridge
        self.random_state = random_state

    def fit(self, X: np.ndarray, y: np.ndarray) -> TrendGaussianProcess:
        X, y = check_X_y(X, y, y_numeric=True)
        n, d = X.shape
        design = np.hstack([np.ones((n, 1)), X])
        penalty = self.ridge * np.eye(d + 1)
        penalty[0, 0] = 0.0  # the intercept is not shrunk
        self.coef_ = np.linalg.solve(design.T @ design + penalty, design.T @ y)
        residual = y - design @ self.coef_
        kernel = self.kernel if self.kernel is not None else default_kernel(d)
        with warnings.catch_warnings():
            # Hyperparameters at their bounds are expected (e.g. an irrelevant feature's length scale).
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp_ = GaussianProcessRegressor(
                kernel=kernel, optimizer="fmin_l_bfgs_b" if (self.optimize and n >= 3) else None,
                normalize_y=False, random_state=self.random_state,
            ).fit(X, residual)
        self.kernel_ = self.gp_.kernel_
        self.noise_ = _white_noise(self.kernel_)
        self.n_features_in_ = d
        return self

    def predict(self, X: np.ndarray, return_std: bool = False) -> Any:
        check_is_fitted(self, "gp_")
        X = check_array(X)
        trend = self.coef_[0] + X @ self.coef_[1:]
        if not return_std:
            return trend + self.gp_.predict(X)
        residual, std = self.gp_.predict(X, return_std=True)
        latent = np.sqrt(np.maximum(std**2 - self.noise_, 1e-12))
        return trend + residual, latent


def _white_noise(kernel: Kernel) -> float:
    """The WhiteKernel noise level inside a (sum) kernel, 0 if there is none."""
    if isinstance(kernel, WhiteKernel):
        return float(kernel.noise_level)
    for part in ("k1", "k2"):
        sub = getattr(kernel, part, None)
        if sub is not None:
            found = _white_noise(sub)
            if found:
                return found
    return 0.0
