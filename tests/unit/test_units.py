from __future__ import annotations

import pytest

from tunempi.errors import UsageError
from tunempi.units import format_size, parse_duration, parse_size, parse_sizes


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8), ("1KiB", 1024), ("64k", 65536), ("1MiB", 1 << 20), ("1MB", 10**6), ("2 gib", 2 << 30)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1.5", "-4", "3 parsecs"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_size(text)


def test_parse_sizes_list_and_range() -> None:
    assert parse_sizes("1KiB,8") == [8, 1024]
    assert parse_sizes("1:16") == [1, 2, 4, 8, 16]
    assert parse_sizes("4:1KiB,3000") == [4, 8, 16, 32, 64, 128, 256, 512, 1024, 3000]
    with pytest.raises(UsageError):
        parse_sizes("64:8")


def test_format_size_round_trips_whole_units() -> None:
    for size in (1, 1000, 1024, 65536, 3 << 20):
        assert parse_size(format_size(size)) == size
    assert format_size(1536) == "1536B"


def test_parse_duration() -> None:
    assert parse_duration("10m") == 600
    assert parse_duration("30s") == 30
    assert parse_duration("45") == 45
    with pytest.raises(UsageError):
        parse_duration("soon")
