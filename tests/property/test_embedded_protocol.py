"""The `consumer` embedded protocol against kio: what kio writes we read the same, and the
assignment we write by hand is byte for byte what kio's writer makes."""

from __future__ import annotations

import io
import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_writer
from kio.static.primitive import i32

from coordinator.group.embedded_protocol import (
    assignment_partitions,
    encode_assignment,
    parse_assignment,
    parse_subscription,
    subscribed_topics,
)

SUBSCRIPTIONS = (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
ASSIGNMENTS = (assignment_v0, assignment_v1, assignment_v2, assignment_v3)


def kio_bytes(version: int, entity: Any) -> bytes:
    out = io.BytesIO()
    out.write(struct.pack(">h", version))
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def merged(entries: Any) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for entry in entries:
        out[entry.topic] = out.get(entry.topic, frozenset()) | frozenset(entry.partitions)
    return out


@st.composite
def subscriptions(draw: st.DrawFn) -> tuple[int, Any]:
    version = draw(st.integers(0, 3))
    return version, draw(st.from_type(SUBSCRIPTIONS[version].ConsumerProtocolSubscription))


@st.composite
def assignments(draw: st.DrawFn) -> tuple[int, Any]:
    version = draw(st.integers(0, 3))
    return version, draw(st.from_type(ASSIGNMENTS[version].ConsumerProtocolAssignment))


@given(subscriptions())
def test_a_subscription_kio_writes_reads_the_same(case: tuple[int, Any]) -> None:
    version, written = case
    data = kio_bytes(version, written)
    read = parse_subscription(data)
    assert read.version == version
    assert read.topics == written.topics
    assert read.owned == merged(getattr(written, "owned_partitions", ()))
    assert read.rack_id == getattr(written, "rack_id", None)
    assert subscribed_topics(data) == set(written.topics)


@given(assignments())
def test_an_assignment_kio_writes_reads_the_same(case: tuple[int, Any]) -> None:
    version, written = case
    data = kio_bytes(version, written)
    assert parse_assignment(data) == merged(written.assigned_partitions)
    assert assignment_partitions(data) == [(entry.topic, p) for entry in written.assigned_partitions
                                           for p in entry.partitions]


@given(st.integers(0, 3), st.dictionaries(
    st.text(max_size=20), st.frozensets(st.integers(0, 2**31 - 1), max_size=8), max_size=6))
def test_the_assignment_we_write_is_what_kio_writes(version: int,
                                                     assigned: dict[str, frozenset[int]]) -> None:
    kind = ASSIGNMENTS[version]
    expected = kio_bytes(version, kind.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            kind.TopicPartition(topic=topic,
                                partitions=tuple(i32(p) for p in sorted(assigned[topic])))
            for topic in sorted(t for t, partitions in assigned.items() if partitions)),
        user_data=None))
    assert encode_assignment(assigned, version) == expected
    assert parse_assignment(expected) == {t: p for t, p in assigned.items() if p}


def test_a_subscription_that_ends_before_its_versions_later_fields_reads_without_them() -> None:
    v0_fields = struct.pack(">hi", 3, 1) + b"\x00\x01a" + struct.pack(">i", -1)
    read = parse_subscription(v0_fields)
    assert (read.version, read.topics, read.owned, read.rack_id) == (3, ("a",), {}, None)
