"""Reset-offset specs of `rebalanced groups reset-offsets` (pure parsing and arithmetic)."""

from __future__ import annotations

import pytest

from coordinator.cli.reset import (
    PartitionRange,
    ResetSpec,
    ResetSpecError,
    TopicScope,
    new_offsets,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_scope,
)

PARTS = [("t", 0), ("t", 1)]
RANGES = {("t", 0): PartitionRange(2, 10), ("t", 1): PartitionRange(0, 5)}
COMMITTED = {("t", 0): 6}


def test_topic_scopes() -> None:
    assert parse_topic_scope("orders") == TopicScope("orders", None)
    assert parse_topic_scope("orders:2,0,2") == TopicScope("orders", (0, 2))
    for bad in ("", ":1", "orders:", "orders:a", "orders:-1"):
        with pytest.raises(ResetSpecError):
            parse_topic_scope(bad)


def test_durations_and_datetimes() -> None:
    assert parse_duration_ms("PT30M") == 30 * 60_000
    assert parse_duration_ms("P1DT2H3.5S") == 86_400_000 + 7_200_000 + 3_500
    assert parse_datetime_ms("1970-01-01T00:00:01.500") == 1500
    assert parse_datetime_ms("1970-01-01T01:00:00+01:00") == 0
    assert parse_datetime_ms("1970-01-01T00:00:02Z") == 2000
    for bad in ("1h", "P", "PT", "P1DT", "30M"):
        with pytest.raises(ResetSpecError):
            parse_duration_ms(bad)
    for bad in ("yesterday", "2026-13-01T00:00:00", "2026-01-01"):
        with pytest.raises(ResetSpecError):
            parse_datetime_ms(bad)


@pytest.mark.parametrize(("spec", "expected"), [
    (ResetSpec("earliest"), {("t", 0): 2, ("t", 1): 0}),
    (ResetSpec("latest"), {("t", 0): 10, ("t", 1): 5}),
    (ResetSpec("current"), {("t", 0): 6, ("t", 1): 5}),
    (ResetSpec("offset", 3), {("t", 0): 3, ("t", 1): 3}),
    (ResetSpec("shift", -5), {("t", 0): 2, ("t", 1): 0}),
    (ResetSpec("shift", 3), {("t", 0): 9, ("t", 1): 5}),
])
def test_new_offsets(spec: ResetSpec, expected: dict[tuple[str, int], int]) -> None:
    assert new_offsets(spec, PARTS, RANGES, COMMITTED) == expected


def test_timestamp_falls_back_to_the_log_end() -> None:
    found = {("t", 0): 4, ("t", 1): -1}
    assert new_offsets(ResetSpec("timestamp", 1), PARTS, RANGES, COMMITTED, found) == {
        ("t", 0): 4, ("t", 1): 5}


def test_an_explicit_offset_out_of_range_fails_the_whole_reset() -> None:
    with pytest.raises(ResetSpecError, match="out of range"):
        new_offsets(ResetSpec("offset", 7), PARTS, RANGES, COMMITTED)
