from __future__ import annotations

import math

import numpy as np
import pytest

from tunempi.errors import UsageError
from tunempi.space import (
    Cell,
    FeatureSpace,
    in_between_sizes,
    is_power_of_two,
    power_of_two_ceil,
    power_of_two_floor,
    power_of_two_sizes,
)


def _space() -> FeatureSpace:
    scales = [(2, 1, 2), (4, 1, 4), (64, 2, 32)]
    sizes = power_of_two_sizes(4, 64) + in_between_sizes(4, 64, align=4)
    blocked = {Cell("allreduce", 4, 1, 4, 16): ["pair"], Cell("allreduce", 64, 2, 32, 16): ["pair", "ring"]}
    return FeatureSpace.grid("allreduce", scales, sizes, ["ring", "tree", "pair"], blocked)


def test_sizes_powers_of_two_and_in_between() -> None:
    assert power_of_two_sizes(3, 70) == [4, 8, 16, 32, 64]
    assert in_between_sizes(4, 64) == [6, 12, 24, 48]
    # Reductions need whole elements: 1.5 x 4 = 6 is not a multiple of 4 and is dropped.
    assert in_between_sizes(4, 64, align=4) == [12, 24, 48]
    assert all(not is_power_of_two(s) for s in in_between_sizes(1, 1 << 20))
    with pytest.raises(UsageError):
        power_of_two_sizes(0, 8)


def test_power_of_two_floor_and_ceil() -> None:
    assert [power_of_two_floor(v) for v in (0, 1, 2, 3, 4, 5, 1023, 1024)] == [1, 1, 2, 2, 4, 4, 512, 1024]
    assert [power_of_two_ceil(v) for v in (0, 1, 2, 3, 4, 5, 1023, 1024)] == [1, 1, 2, 4, 4, 8, 1024, 1024]
    huge = (1 << 60) + 1  # exact in integers, where a float log2 would round down to 2**60
    assert power_of_two_ceil(huge) == 1 << 61 and power_of_two_floor(huge) == 1 << 60


def test_grid_candidates_and_availability() -> None:
    space = _space()
    assert len(space) == 3 * 8
    assert space.candidates(Cell("allreduce", 64, 2, 32, 16)) == ("tree",)
    assert space.candidates(Cell("allreduce", 2, 1, 2, 16)) == ("ring", "tree", "pair")
    mask = space.availability()
    assert mask.shape == (24, 3)
    assert mask.sum() == 24 * 3 - 3


def test_features_are_log2_and_derived_bytes_per_rank() -> None:
    space = _space()
    cell = Cell("allreduce", 64, 2, 32, 16)
    row = space.features([cell], derived=True)[0]
    assert row.tolist() == [6.0, 1.0, 5.0, 4.0, 4.0 - 6.0]
    assert space.features().shape == (24, 4)
    assert Cell("bcast", 2, 1, 2, 0).features()[3] == 0.0  # size 0 counts as 1 byte: log stays finite
    assert math.isclose(Cell("bcast", 2, 1, 2, 12).features()[3], math.log2(12))


def test_restrict_keeps_unavailability_of_kept_cells() -> None:
    small = _space().restrict(max_ranks=4)
    assert {c.ranks for c in small.cells} == {2, 4}
    assert small.candidates(Cell("allreduce", 4, 1, 4, 16)) == ("ring", "tree")
    with pytest.raises(UsageError, match="no cells left"):
        _space().restrict(max_ranks=1)


def test_json_round_trip(tmp_path) -> None:
    space = _space()
    again = FeatureSpace.from_json(space.to_json())
    assert again.cells == space.cells and again.algorithms == space.algorithms
    assert dict(again.unavailable) == dict(space.unavailable)
    path = tmp_path / "space.json"
    space.to_json(path)
    assert np.array_equal(FeatureSpace.from_json(path).availability(), space.availability())


def test_invalid_inputs_raise_usage_errors() -> None:
    with pytest.raises(UsageError):
        Cell("allreduce", 0, 1, 1, 8)
    with pytest.raises(UsageError, match="valid"):
        FeatureSpace.grid("allreduse", [(2, 1, 2)], [8], ["ring"])
    with pytest.raises(UsageError):
        FeatureSpace.from_dict({"kind": "something else"})
