"""Surrogate models of collective latency (scikit-learn estimators with uncertainty)."""

from __future__ import annotations

from tunempi.model.forest import RandomForestSurrogate, jackknife_variance
from tunempi.model.gaussian_process import TrendGaussianProcess
from tunempi.model.per_algorithm import PerAlgorithmRegressor, xgboost_per_algorithm

__all__ = [
    "PerAlgorithmRegressor", "RandomForestSurrogate", "TrendGaussianProcess", "jackknife_variance",
    "xgboost_per_algorithm",
]
