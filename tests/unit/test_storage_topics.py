"""`storage/topics.py`: the persisted topic registry."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from storage.fs import FaultyFileSystem
from storage.log import CorruptLogError, InvalidConfigError, LogConfig
from storage.topics import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    TopicStore,
    UnknownTopicError,
    valid_topic_name,
)
from tests.unit._batches import decode, make_batch

NOW = 1_700_000_000_000
CONFIG = LogConfig(index_interval_bytes=128)


def test_create_makes_partitions_and_an_id(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    topic = store.create("orders", 3)
    assert [p.log_end_offset for p in topic.partitions] == [0, 0, 0]
    assert topic.topic_id.version == 4
    assert store.get("orders") is topic
    assert store.by_id(topic.topic_id) is topic
    assert store.topics() == [topic]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "orders-0", "orders-1", "orders-2", "orders.topic.json",
    ]


def test_topics_ids_and_data_survive_a_reopen(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    a = store.create("a", 2, {"retention.ms": "-1"})
    b = store.create("b.c-d_e", 1)
    a.partitions[1].append(make_batch([b"hello"]), NOW)
    store.close()
    store = TopicStore.open(tmp_path, CONFIG)
    again = store.get("a")
    assert again is not None
    assert again.topic_id == a.topic_id
    assert again.configs == {"retention.ms": "-1"}
    assert again.log_config.retention_ms == -1
    assert decode(again.partitions[1].read(0, 1000)) == [(0, b"hello")]
    assert store.by_id(b.topic_id) is store.get("b.c-d_e")


def test_the_metadata_file_is_readable_json(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    topic = store.create("t", 2, {"cleanup.policy": "delete"})
    document = json.loads((tmp_path / "t.topic.json").read_text())
    assert document == {
        "version": 1,
        "name": "t",
        "topic_id": str(topic.topic_id),
        "partitions": 2,
        "configs": {"cleanup.policy": "delete"},
    }


def test_create_refuses_an_existing_name(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    store.create("t", 1)
    with pytest.raises(TopicExistsError):
        store.create("t", 1)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "x" * 250, "ü"])
def test_create_refuses_an_invalid_name(tmp_path: Path, name: str) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    with pytest.raises(InvalidTopicError):
        store.create(name, 1)
    assert list(tmp_path.iterdir()) == []


def test_create_refuses_internal_names_and_dot_underscore_collisions(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    with pytest.raises(InvalidTopicError, match="reserved"):
        store.create("__consumer_offsets", 1)
    store.create("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        store.create("a_b", 1)


def test_create_refuses_bad_counts_and_configs(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    with pytest.raises(InvalidPartitionsError):
        store.create("t", 0)
    with pytest.raises(InvalidConfigError):
        store.create("t", 1, {"retention.ms": "never"})
    assert list(tmp_path.iterdir()) == []


def test_valid_topic_name_follows_kafka() -> None:
    assert valid_topic_name("a-Z_0.9")
    assert valid_topic_name("x" * 249)
    assert not valid_topic_name("x" * 250)
    assert not valid_topic_name("..")
    assert valid_topic_name("...")


def test_delete_removes_everything(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    topic = store.create("t", 2)
    store.delete("t")
    assert store.get("t") is None
    assert store.by_id(topic.topic_id) is None
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UnknownTopicError):
        store.delete("t")
    again = store.create("t", 1)
    assert again.topic_id != topic.topic_id


def test_recreating_a_topic_starts_from_empty_partitions(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    store.create("t", 1).partitions[0].append(make_batch([b"old"]), NOW)
    store.delete("t")
    assert store.create("t", 1).partitions[0].log_end_offset == 0


def test_add_partitions_grows_the_topic(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    store.create("t", 1)
    store.add_partitions("t", 4)
    topic = store.get("t")
    assert topic is not None and len(topic.partitions) == 4
    with pytest.raises(InvalidPartitionsError):
        store.add_partitions("t", 4)
    with pytest.raises(UnknownTopicError):
        store.add_partitions("nope", 2)
    store.close()
    reopened = TopicStore.open(tmp_path, CONFIG).get("t")
    assert reopened is not None and len(reopened.partitions) == 4


def test_uncommitted_partition_directories_are_removed_on_open(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    store.create("t", 1)
    store.close()
    (tmp_path / "t-5").mkdir()  # an add_partitions that never wrote its metadata
    (tmp_path / "ghost-0").mkdir()  # a create that never wrote its metadata
    (tmp_path / "__consumer_offsets-7").mkdir()  # not ours
    (tmp_path / "notes").mkdir()  # not a partition directory
    TopicStore.open(tmp_path, CONFIG).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "__consumer_offsets-7", "notes", "t-0", "t.topic.json",
    ]


def test_internal_topics_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "__consumer_offsets.topic.json").write_text("not json")
    store = TopicStore.open(tmp_path, CONFIG)
    assert store.topics() == []


def test_a_failed_metadata_write_leaves_no_topic(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    store = TopicStore.open(tmp_path, CONFIG, fs)
    fs.fail_next_rename()
    with pytest.raises(OSError):
        store.create("t", 2)
    assert store.get("t") is None
    store.close()
    assert TopicStore.open(tmp_path, CONFIG).topics() == []
    assert list(tmp_path.iterdir()) == []


def test_a_failed_metadata_write_leaves_the_partition_count(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    store = TopicStore.open(tmp_path, CONFIG, fs)
    store.create("t", 1)
    fs.fail_next_rename()
    with pytest.raises(OSError):
        store.add_partitions("t", 3)
    topic = store.get("t")
    assert topic is not None and len(topic.partitions) == 1
    assert not (tmp_path / "t-1").exists()


def test_unreadable_metadata_stops_the_open_unless_repairing(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    store.create("good", 1)
    store.create("bad", 1)
    store.close()
    (tmp_path / "bad.topic.json").write_text("{")
    with pytest.raises(CorruptLogError) as info:
        TopicStore.open(tmp_path, CONFIG)
    assert info.value.path == tmp_path / "bad.topic.json"
    repaired = TopicStore.open(tmp_path, CONFIG, repair=True)
    assert [t.name for t in repaired.topics()] == ["good"]
    assert (tmp_path / "bad-0").exists()  # left for the operator


def test_metadata_with_a_wrong_version_is_refused(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    store.create("t", 1)
    store.close()
    path = tmp_path / "t.topic.json"
    document = json.loads(path.read_text())
    document["version"] = 99
    path.write_text(json.dumps(document))
    with pytest.raises(CorruptLogError, match="unsupported version 99"):
        TopicStore.open(tmp_path, CONFIG)


def test_a_damaged_partition_stops_the_store_open(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, LogConfig(index_interval_bytes=0))
    log = store.create("t", 1).partitions[0]
    for i in range(3):
        log.append(make_batch([bytes([i]) * 50]), NOW)
    store.close()
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF  # first batch; two valid ones follow
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError):
        TopicStore.open(tmp_path, CONFIG)
    repaired = TopicStore.open(tmp_path, CONFIG, repair=True).get("t")
    assert repaired is not None and repaired.partitions[0].log_end_offset == 3
    assert repaired.partitions[0].read(0, 1 << 20)[:8] == (1).to_bytes(8, "big")  # kept


def test_flush_all_flushes_every_partition(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    store = TopicStore.open(tmp_path, CONFIG, fs)
    store.create("t", 3)
    before = fs.ops.get("fsync", 0)
    store.flush_all()
    assert fs.ops["fsync"] == before + 3
    fs.fail_next_fsync()
    with pytest.raises(OSError):
        store.flush_all()
    assert fs.ops["fsync"] == before + 6  # kept going after the failure


def test_topic_ids_are_distinct(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    ids = {store.create(f"t{i}", 1).topic_id for i in range(20)}
    assert len(ids) == 20
    assert uuid.UUID(int=0) not in ids


def test_a_reserved_name_is_held_until_commit_or_release(tmp_path: Path) -> None:
    store = TopicStore.open(tmp_path, CONFIG)
    pending = store.reserve("a.b", 2)
    assert store.is_reserved("a.b") and store.get("a.b") is None
    assert store.partition_count() == 2
    with pytest.raises(TopicExistsError):
        store.reserve("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        store.reserve("a_b", 1)
    store.release(pending)
    assert store.partition_count() == 0
    topic = store.build(store.reserve("a_b", 3))
    assert store.get("a_b") is None  # built, not yet visible
    store.commit(topic)
    assert store.get("a_b") is topic and store.partition_count() == 3
    with pytest.raises(InvalidTopicError, match="collides"):
        store.reserve("a.b", 1)
    store.delete("a_b")
    assert store.partition_count() == 0
    store.create("a.b", 1)  # the folded name is free again


def test_a_build_that_cannot_open_a_partition_leaves_nothing(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    store = TopicStore.open(tmp_path, CONFIG, fs)
    store.create("other", 1)
    fs.fail_next_open(OSError(24, "Too many open files"))
    with pytest.raises(OSError, match="Too many open files"):
        store.create("t", 3)
    assert store.get("t") is None and not store.is_reserved("t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-0", "other.topic.json"]
    assert store.partition_count() == 1
