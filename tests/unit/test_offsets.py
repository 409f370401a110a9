"""`coordinator/group/offsets.py`: the committed-offset store, driven with a fake `now_ms`."""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from coordinator.group.offsets import (
    ExpiryResult,
    FetchedOffset,
    GroupExpiryView,
    OffsetStore,
    OffsetStoreConfig,
    expire_timestamp_ms,
)
from coordinator.grouplog.records import (
    GroupMetadataKey,
    GroupMetadataRecord,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)

MINUTE = 60_000
RETENTION_MS = 10080 * MINUTE


def all_topics(_topic: str, _partition: int) -> bool:
    return True


def apply_all(store: OffsetStore, records: Iterable[OffsetCommitRecord]) -> None:
    for record in records:
        store.apply(record)


def committed(store: OffsetStore, group: str = "g", topic: str = "t", partition: int = 0,
              offset: int = 10, now_ms: int = 0, expire_timestamp: int = -1) -> None:
    _, records = store.commit(group, [(topic, [(partition, offset, 3, "meta")])], now_ms,
                              topic_exists=all_topics, expire_timestamp=expire_timestamp)
    apply_all(store, records)


def empty(since_ms: int | None, protocol_type: str = "consumer") -> GroupExpiryView:
    return GroupExpiryView(state_is_empty=True, current_state_timestamp=since_ms,
                           subscribed_topics=set(), protocol_type=protocol_type)


def stable(subscribed: set[str] | None) -> GroupExpiryView:
    return GroupExpiryView(state_is_empty=False, current_state_timestamp=0,
                           subscribed_topics=subscribed, protocol_type="consumer")


# ------------------------------------------------------------------ commit


def test_commit_builds_records_without_changing_the_view() -> None:
    store = OffsetStore()
    errors, records = store.commit("g", [("t", [(0, 10, 3, "meta"), (1, 11, -1, None)])], 500,
                                   topic_exists=all_topics)
    assert errors == [("t", [(0, ErrorCode.none), (1, ErrorCode.none)])]
    assert records == [
        OffsetCommitRecord(key=OffsetCommitKey(group="g", topic="t", partition=0),
                           value=OffsetCommitValue(offset=10, leader_epoch=3, metadata="meta",
                                                   commit_timestamp=500)),
        OffsetCommitRecord(key=OffsetCommitKey(group="g", topic="t", partition=1),
                           value=OffsetCommitValue(offset=11, leader_epoch=-1, metadata="",
                                                   commit_timestamp=500)),
    ]
    assert not store.has_offsets("g")
    assert store.fetch("g", [("t", [0])]) == [FetchedOffset("t", 0, -1, -1, "", ErrorCode.none)]


def test_applied_commit_is_fetchable() -> None:
    store = OffsetStore()
    committed(store, offset=10)
    assert store.fetch("g", [("t", [0])]) == [FetchedOffset("t", 0, 10, 3, "meta", ErrorCode.none)]
    assert store.has_offsets("g")
    assert store.groups_with_offsets() == {"g"}


def test_metadata_over_the_limit_is_rejected_per_partition() -> None:
    store = OffsetStore(OffsetStoreConfig(offset_metadata_max_bytes=4))
    errors, records = store.commit("g", [("t", [(0, 1, -1, "12345"), (1, 1, -1, "1234")])], 0,
                                   topic_exists=all_topics)
    assert errors == [("t", [(0, ErrorCode.offset_metadata_too_large), (1, ErrorCode.none)])]
    assert [r.key.partition for r in records] == [1]


def test_default_metadata_limit_is_4096() -> None:
    store = OffsetStore()
    errors, _ = store.commit("g", [("t", [(0, 1, -1, "x" * 4096), (1, 1, -1, "x" * 4097)])], 0,
                             topic_exists=all_topics)
    assert errors == [("t", [(0, ErrorCode.none), (1, ErrorCode.offset_metadata_too_large)])]


def test_unknown_topic_or_partition_is_rejected() -> None:
    store = OffsetStore()
    errors, records = store.commit(
        "g", [("t", [(0, 1, -1, ""), (5, 1, -1, "")]), ("nope", [(0, 1, -1, "")])], 0,
        topic_exists=lambda topic, partition: topic == "t" and partition < 2,
    )
    assert errors == [
        ("t", [(0, ErrorCode.none), (5, ErrorCode.unknown_topic_or_partition)]),
        ("nope", [(0, ErrorCode.unknown_topic_or_partition)]),
    ]
    assert len(records) == 1


def test_a_later_commit_replaces_the_earlier_one() -> None:
    store = OffsetStore()
    committed(store, offset=10)
    committed(store, offset=20, now_ms=5)
    assert store.fetch("g", [("t", [0])])[0].offset == 20


def test_expire_timestamp_from_retention_time() -> None:
    assert expire_timestamp_ms(-1, 1000) == -1
    assert expire_timestamp_ms(500, 1000) == 1500


# ------------------------------------------------------------------ fetch


def test_fetch_unknown_group_and_partitions() -> None:
    store = OffsetStore()
    assert store.fetch("nobody", [("t", [0, 1])]) == [
        FetchedOffset("t", 0, -1, -1, "", ErrorCode.none),
        FetchedOffset("t", 1, -1, -1, "", ErrorCode.none),
    ]
    assert store.fetch("nobody", None) == []


def test_fetch_all_partitions_of_a_group() -> None:
    store = OffsetStore()
    committed(store, topic="b", partition=1, offset=3)
    committed(store, topic="a", partition=0, offset=1)
    committed(store, group="other", topic="a", partition=0, offset=9)
    assert store.fetch("g", None) == [
        FetchedOffset("a", 0, 1, 3, "meta", ErrorCode.none),
        FetchedOffset("b", 1, 3, 3, "meta", ErrorCode.none),
    ]


def test_require_stable_reports_pending_commits_as_unstable() -> None:
    store = OffsetStore()
    committed(store, offset=10)
    _, records = store.commit("g", [("t", [(0, 20, -1, "")])], 1, topic_exists=all_topics)
    assert store.has_pending("g")
    assert store.fetch("g", [("t", [0])], require_stable=True) == [
        FetchedOffset("t", 0, -1, -1, "", ErrorCode.unstable_offset_commit)
    ]
    # without require_stable the last durable offset is answered
    assert store.fetch("g", [("t", [0])])[0].offset == 10
    apply_all(store, records)
    assert not store.has_pending("g")
    assert store.fetch("g", [("t", [0])], require_stable=True)[0].offset == 20


def test_aborted_commit_is_neither_pending_nor_visible() -> None:
    store = OffsetStore()
    _, records = store.commit("g", [("t", [(0, 20, -1, "")])], 1, topic_exists=all_topics)
    store.abort(records)
    assert not store.has_pending("g")
    assert store.fetch("g", [("t", [0])], require_stable=True) == [
        FetchedOffset("t", 0, -1, -1, "", ErrorCode.none)
    ]


def test_a_commit_applied_at_once_is_never_pending_and_ends_the_same() -> None:
    held, direct = OffsetStore(), OffsetStore()
    committed(held, offset=10)
    committed(direct, offset=10)
    topics = [("t", [(0, 20, -1, ""), (1, 21, 4, "m")])]
    held_errors, held_records = held.commit("g", topics, 1, topic_exists=all_topics)
    errors, records = direct.commit("g", topics, 1, topic_exists=all_topics, pending=False)
    assert (errors, records) == (held_errors, held_records)
    assert not direct.has_pending("g")
    apply_all(held, held_records)
    apply_all(direct, records)
    assert direct.committed_view() == held.committed_view()
    assert not direct.has_pending("g") and not held.has_pending("g")
    _, failed = direct.commit("g", [("t", [(0, 30, -1, "")])], 2, topic_exists=all_topics,
                              pending=False)
    direct.abort(failed)  # a failed write: nothing to forget, nothing changes
    assert direct.committed_view() == held.committed_view()


# ------------------------------------------------------------------ delete


def test_offset_delete_refuses_subscribed_topics() -> None:
    store = OffsetStore()
    committed(store, topic="a")
    committed(store, topic="b")
    errors, records = store.delete("g", [("a", [0]), ("b", [0, 7])], subscribed_topics={"a"})
    assert errors == [
        ("a", [(0, ErrorCode.group_subscribed_to_topic)]),
        ("b", [(0, ErrorCode.none), (7, ErrorCode.none)]),
    ]
    assert records == [
        OffsetCommitRecord(key=OffsetCommitKey(group="g", topic="b", partition=0), value=None)
    ]
    apply_all(store, records)
    assert store.fetch("g", None) == [FetchedOffset("a", 0, 10, 3, "meta", ErrorCode.none)]


def test_delete_group_tombstones_every_offset() -> None:
    store = OffsetStore()
    committed(store, topic="a")
    committed(store, topic="b", partition=2)
    records = store.delete_group("g")
    assert {(r.key.topic, r.key.partition) for r in records} == {("a", 0), ("b", 2)}
    assert all(r.value is None for r in records)
    apply_all(store, records)
    assert not store.has_offsets("g")
    assert store.groups_with_offsets() == set()


def test_delete_topics_tombstones_every_groups_offsets_of_them_only() -> None:
    store = OffsetStore()
    committed(store, group="g", topic="gone", partition=0)
    committed(store, group="g", topic="gone", partition=3)
    committed(store, group="g", topic="kept")
    committed(store, group="h", topic="gone")
    committed(store, group="i", topic="kept")
    records = store.delete_topics({"gone", "never-committed"})
    assert all(r.value is None for r in records)
    assert [(r.key.group, r.key.topic, r.key.partition) for r in records] == [
        ("g", "gone", 0), ("g", "gone", 3), ("h", "gone", 0)]
    assert store.fetch("g", [("gone", [0])])[0].offset == 10  # nothing changes before applied
    apply_all(store, records)
    assert store.committed_view() == {
        "g": {("kept", 0): store.committed_view()["g"][("kept", 0)]},
        "i": {("kept", 0): store.committed_view()["i"][("kept", 0)]}}
    assert store.fetch("h", [("gone", [0])])[0].offset == -1
    assert not store.has_offsets("h")


def test_delete_topics_also_tombstones_a_pending_commit_written_before_it() -> None:
    store = OffsetStore()
    _, pending = store.commit("g", [("gone", [(1, 5, -1, "")])], 1, topic_exists=all_topics)
    records = store.delete_topics({"gone"})
    assert [(r.key.topic, r.key.partition, r.value) for r in records] == [("gone", 1, None)]
    # The group log holds the commit before the tombstone: replay and the live view agree.
    apply_all(store, [*pending, *records])
    assert not store.has_offsets("g") and not store.has_pending("g")


def test_tombstone_for_unknown_key_is_harmless() -> None:
    store = OffsetStore()
    store.apply(OffsetCommitRecord(key=OffsetCommitKey(group="g", topic="t", partition=0),
                                   value=None))
    store.apply(GroupMetadataRecord(key=GroupMetadataKey(group="g"), value=None))
    assert store.committed_view() == {}


# ------------------------------------------------------------------ expire


def expire(store: OffsetStore, now_ms: int, views: dict[str, GroupExpiryView]) -> ExpiryResult:
    result = store.expire(now_ms, views)
    apply_all(store, result.tombstones)
    return result


def test_empty_group_offsets_expire_from_when_it_became_empty() -> None:
    store = OffsetStore()
    committed(store, now_ms=0)
    became_empty = 5 * MINUTE
    views = {"g": empty(became_empty)}
    assert expire(store, became_empty + RETENTION_MS - 1, views).tombstones == []
    result = expire(store, became_empty + RETENTION_MS, views)
    assert [r.key for r in result.tombstones] == [
        OffsetCommitKey(group="g", topic="t", partition=0)
    ]
    assert result.groups_without_offsets == ["g"]
    assert not store.has_offsets("g")


def test_empty_group_without_state_timestamp_uses_the_commit_timestamp() -> None:
    store = OffsetStore()
    committed(store, now_ms=100)
    assert expire(store, 100 + RETENTION_MS - 1, {"g": empty(None)}).tombstones == []
    assert len(expire(store, 100 + RETENTION_MS, {"g": empty(None)}).tombstones) == 1


def test_live_group_keeps_offsets_of_subscribed_topics_forever() -> None:
    store = OffsetStore()
    committed(store, topic="sub", now_ms=0)
    committed(store, topic="gone", now_ms=0)
    result = expire(store, 10 * RETENTION_MS, {"g": stable({"sub"})})
    assert [r.key.topic for r in result.tombstones] == ["gone"]
    assert result.groups_without_offsets == []
    assert store.fetch("g", None)[0].topic == "sub"


def test_live_group_unsubscribed_topics_expire_from_the_commit() -> None:
    store = OffsetStore()
    committed(store, topic="gone", now_ms=1000)
    assert expire(store, 1000 + RETENTION_MS - 1, {"g": stable(set())}).tombstones == []
    assert len(expire(store, 1000 + RETENTION_MS, {"g": stable(set())}).tombstones) == 1


def test_consumer_group_with_unknown_subscriptions_expires_nothing() -> None:
    store = OffsetStore()
    committed(store, now_ms=0)
    assert expire(store, 10 * RETENTION_MS, {"g": stable(None)}).tombstones == []


def test_live_group_while_rebalancing_expires_nothing() -> None:
    store = OffsetStore()
    committed(store, topic="gone", now_ms=0)
    view = GroupExpiryView(state_is_empty=False, current_state_timestamp=0,
                           subscribed_topics=set(), protocol_type="consumer",
                           state_is_stable=False)
    assert expire(store, 10 * RETENTION_MS, {"g": view}).tombstones == []


def test_standalone_consumer_offsets_expire_from_the_commit() -> None:
    store = OffsetStore()
    committed(store, group="solo", now_ms=0)
    committed(store, group="solo", partition=1, now_ms=RETENTION_MS)
    result = expire(store, RETENTION_MS, {"solo": empty(0, protocol_type="")})
    assert [r.key.partition for r in result.tombstones] == [0]
    assert result.groups_without_offsets == []
    # a group with offsets but no view counts as standalone
    result = expire(store, 2 * RETENTION_MS, {})
    assert [r.key.partition for r in result.tombstones] == [1]
    assert result.groups_without_offsets == ["solo"]


def test_explicit_expire_timestamp_wins_over_retention() -> None:
    store = OffsetStore()
    committed(store, now_ms=0, expire_timestamp=1000)
    views = {"g": stable({"t"})}  # even a subscribed topic: no, subscribed offsets never expire
    assert expire(store, 10 * RETENTION_MS, views).tombstones == []
    views = {"g": empty(0)}
    assert expire(store, 999, views).tombstones == []
    assert len(expire(store, 1000, views).tombstones) == 1


def test_empty_group_without_offsets_is_reported_for_deletion() -> None:
    store = OffsetStore()
    result = store.expire(0, {"g": empty(0), "live": stable({"t"})})
    assert result.groups_without_offsets == ["g"]


def test_pending_commit_blocks_expiry_and_group_deletion() -> None:
    store = OffsetStore()
    committed(store, now_ms=0)
    store.commit("g", [("t", [(0, 1, -1, "")])], RETENTION_MS, topic_exists=all_topics)
    result = store.expire(2 * RETENTION_MS, {"g": empty(0)})
    assert result == ExpiryResult(tombstones=[], groups_without_offsets=[])


def test_retention_is_configurable() -> None:
    store = OffsetStore(OffsetStoreConfig(offsets_retention_minutes=1))
    committed(store, now_ms=0)
    assert len(expire(store, MINUTE, {"g": empty(0)}).tombstones) == 1


def test_offset_commit_v1_timestamps_are_kept_as_the_commit_timestamp() -> None:
    store = OffsetStore()
    _, records = store.commit("g", [("t", [(0, 5, -1, None), (1, 6, -1, None)])], 1_000,
                              topic_exists=all_topics, commit_timestamps={("t", 0): 42})
    assert [(r.key.partition, r.value.commit_timestamp) for r in records
            if r.value is not None] == [(0, 42), (1, 1_000)]
