"""Feature spaces of collective tuning (cells = collective, ranks, nodes, ppn, message size)."""

from __future__ import annotations

from tunempi.space.feature import (
    DERIVED_FEATURE_NAMES,
    FEATURE_NAMES,
    Cell,
    FeatureSpace,
    in_between_sizes,
    is_power_of_two,
    power_of_two_ceil,
    power_of_two_floor,
    power_of_two_sizes,
)

__all__ = ["DERIVED_FEATURE_NAMES", "FEATURE_NAMES", "Cell", "FeatureSpace", "in_between_sizes", "is_power_of_two",
           "power_of_two_ceil", "power_of_two_floor", "power_of_two_sizes"]
