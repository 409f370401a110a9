"""ListOffsets v0's list of offsets (`offsets_before`), as Kafka's legacy form answers a
consumer: segment boundaries newest first, nothing past the high watermark."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.dataplane.list_offsets import EARLIEST, LATEST, offsets_before

NOW_MS = 10_000


@dataclass
class Partition:
    segments: list[tuple[int, int, int]]  # (base offset, largest timestamp, size in bytes)
    log_end_offset: int  # the high watermark
    log_start_offset: int = 0

    def segment_times(self) -> list[tuple[int, int, int]]:
        return self.segments


THREE_SEGMENTS = Partition([(0, 1000, 50), (10, 2000, 50), (20, 3000, 50)], 30)


def test_latest_lists_the_log_end_then_each_segment_base_newest_first() -> None:
    assert offsets_before(THREE_SEGMENTS, LATEST, 10, NOW_MS) == (30, 20, 10, 0)
    assert offsets_before(THREE_SEGMENTS, LATEST, 2, NOW_MS) == (30, 20)


def test_earliest_is_the_log_start() -> None:
    assert offsets_before(THREE_SEGMENTS, EARLIEST, 10, NOW_MS) == (0,)
    started_later = Partition([(0, 1000, 50), (10, 2000, 50)], 20, log_start_offset=4)
    assert offsets_before(started_later, EARLIEST, 10, NOW_MS) == (4,)


def test_a_timestamp_starts_at_the_newest_segment_not_after_it() -> None:
    assert offsets_before(THREE_SEGMENTS, 2500, 10, NOW_MS) == (10, 0)
    assert offsets_before(THREE_SEGMENTS, 500, 10, NOW_MS) == ()


def test_an_empty_log_answers_its_start() -> None:
    assert offsets_before(Partition([(0, -1, 0)], 0), LATEST, 10, NOW_MS) == (0,)


def test_offsets_past_the_high_watermark_become_the_high_watermark() -> None:
    # The group log's last segment starts past its durable end: a client sees neither the
    # undurable tail nor that segment's base.
    undurable_tail = Partition([(0, 1000, 50), (40, 2000, 50)], 35)
    assert offsets_before(undurable_tail, LATEST, 10, NOW_MS) == (35, 0)
    assert offsets_before(undurable_tail, LATEST, 1, NOW_MS) == (35,)
