"""Reset-offset specs: parse the options and compute new offsets (pure, no I/O).

The rules follow Kafka's `kafka-consumer-groups.sh --reset-offsets`, except that an explicit
`--to-offset` outside a partition's [earliest, latest] range is refused rather than clamped:
an operator who names an offset gets that offset or an error, never a silent substitute.
`--shift-by` is relative and is clamped to the range, as Kafka does.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TopicPartition = tuple[str, int]


class ResetSpecError(ValueError):
    """An invalid reset option: the message is one line, shown to the operator as is."""


@dataclass(frozen=True, slots=True)
class TopicScope:
    topic: str
    partitions: tuple[int, ...] | None  # None: every partition of the topic


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Exactly one of the ways to pick new offsets."""

    kind: str  # earliest | latest | current | offset | shift | timestamp
    value: int = 0  # the offset, the shift, or the epoch-ms timestamp


def parse_topic_scope(text: str) -> TopicScope:
    """`orders` or `orders:0,2,5`."""
    topic, sep, partitions = text.partition(":")
    if not topic:
        raise ResetSpecError(f"invalid --topic {text!r}: expected TOPIC or TOPIC:P[,P...]")
    if not sep:
        return TopicScope(topic, None)
    try:
        numbers = tuple(sorted({int(p) for p in partitions.split(",") if p.strip()}))
    except ValueError:
        raise ResetSpecError(
            f"invalid --topic {text!r}: partitions must be integers, e.g. {topic}:0,1") from None
    if not numbers or any(p < 0 for p in numbers):
        raise ResetSpecError(f"invalid --topic {text!r}: expected TOPIC:P[,P...] with P >= 0")
    return TopicScope(topic, numbers)


_DURATION = re.compile(
    r"^P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Kafka's `--by-duration` takes it: `PnDTnHnMnS`, e.g. `PT30M`."""
    match = _DURATION.match(text.strip().upper())
    if match is None or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ResetSpecError(
            f"invalid --by-duration {text!r}: expected an ISO-8601 duration such as PT30M or "
            "P1DT2H")
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    seconds = (parts.get("days", 0) * 86400 + parts.get("hours", 0) * 3600
               + parts.get("minutes", 0) * 60 + parts.get("seconds", 0))
    return int(seconds * 1000)


def parse_datetime_ms(text: str) -> int:
    """`YYYY-MM-DDTHH:mm:SS[.sss][zone]` as Kafka's `--to-datetime`; no zone means UTC."""
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ResetSpecError(
            f"invalid --to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss, e.g. "
            "2026-01-31T08:00:00.000") from None
    if "T" not in value:
        raise ResetSpecError(
            f"invalid --to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss (with a time)")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return int(parsed.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class PartitionRange:
    earliest: int
    latest: int


def new_offsets(spec: ResetSpec, partitions: Sequence[TopicPartition],
                ranges: Mapping[TopicPartition, PartitionRange],
                committed: Mapping[TopicPartition, int],
                by_timestamp: Mapping[TopicPartition, int] | None = None
                ) -> dict[TopicPartition, int]:
    """The new offset of every partition; raises `ResetSpecError` if any is invalid, so that
    nothing is written unless all of them are."""
    out: dict[TopicPartition, int] = {}
    for tp in partitions:
        bounds = ranges[tp]
        current = committed.get(tp)
        if spec.kind == "earliest":
            target = bounds.earliest
        elif spec.kind == "latest":
            target = bounds.latest
        elif spec.kind == "current":
            # Kafka resets a partition without a committed offset to its log end.
            target = current if current is not None else bounds.latest
        elif spec.kind == "offset":
            target = spec.value
            if not bounds.earliest <= target <= bounds.latest:
                raise ResetSpecError(
                    f"offset {target} is out of range for {tp[0]}:{tp[1]} "
                    f"(earliest {bounds.earliest}, latest {bounds.latest})")
        elif spec.kind == "shift":
            base = current if current is not None else bounds.latest
            target = min(max(base + spec.value, bounds.earliest), bounds.latest)
        elif spec.kind == "timestamp":
            found = (by_timestamp or {}).get(tp, -1)
            # No record at or after the time: the log end, as Kafka does.
            target = found if found >= 0 else bounds.latest
        else:
            raise ResetSpecError(f"unknown reset kind {spec.kind!r}")
        out[tp] = target
    return out
