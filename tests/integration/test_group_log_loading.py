"""A group log that cannot be replayed stops the broker loudly, naming file and position.

Loading a partition that fails (a record that does not decode, a replay that raises) must not
leave it "loading" forever: its groups are answered NOT_COORDINATOR and the broker is asked to
stop with the error (the process then exits non-zero, see the integration test).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.grouplog.codec import encode_key
from coordinator.grouplog.log import GroupLog, GroupLogLoadError
from coordinator.grouplog.records import OffsetCommitKey
from coordinator.runtime.broker import Broker
from coordinator.settings import defaults
from storage.log import LogConfig
from storage.record_batch import encode_batch
from tests.integration.in_process import send


def settings(data_dir: Path) -> Any:
    return defaults().with_overrides({"log.dirs": str(data_dir),
                                      "offsets.topic.num.partitions": "1"})


def write_undecodable_commit(data_dir: Path) -> int:
    """Append an offset-commit record whose value is garbage; returns its offset."""
    log = GroupLog.open(data_dir, 1, LogConfig(), "always")
    try:
        key = encode_key(OffsetCommitKey(group="g", topic="t", partition=0))
        info = log.logs[0].append(encode_batch([(key, b"\x00\x03\xff\xff")], 1), 1)
        log.logs[0].flush()
        return info.base_offset
    finally:
        log.close()


async def stopped(broker: Broker) -> None:
    await asyncio.wait_for(broker.stop_requested.wait(), timeout=30)


def write_good_commit(data_dir: Path) -> None:
    log = GroupLog.open(data_dir, 1, LogConfig(), "always")
    try:
        key = encode_key(OffsetCommitKey(group="g", topic="t", partition=0))
        log.logs[0].append(encode_batch([(key, None)], 1), 1)  # a tombstone decodes fine
        log.logs[0].flush()
    finally:
        log.close()


async def test_an_undecodable_record_stops_the_broker_naming_file_and_position(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    offset = write_undecodable_commit(data_dir)
    broker = Broker(settings(data_dir))
    await broker.start()
    try:
        await stopped(broker)
        error = broker.failure
        assert isinstance(error, GroupLogLoadError)
        assert error.path.name.endswith(".log") and error.path.parent.name == "__consumer_offsets-0"
        assert (error.offset, error.position) == (offset, 0)
        assert str(error.path) in str(error) and "position 0" in str(error)
        # Never "loading" for ever: the partition's groups are told to look elsewhere. (Of
        # a partition that exists: an unknown one is answered before the group is asked.)
        broker.create_topic("t", 1, {}, reason="test")
        commit = send(broker, 8, 8, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
        assert [p.error_code for t in commit.answer.topics for p in t.partitions] == [
            ErrorCode.not_coordinator]
        beat = send(broker, 12, 3, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                    "group_instance_id": None})
        assert beat.answer.error_code == ErrorCode.not_coordinator
    finally:
        await broker.stop()


async def test_a_replay_that_raises_stops_the_broker(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_good_commit(data_dir)
    broker = Broker(settings(data_dir))

    def broken_apply(record: Any) -> None:
        raise AssertionError("replay invariant broken")

    broker.groups.offsets.apply = broken_apply  # type: ignore[method-assign]
    await broker.start()
    try:
        await stopped(broker)
        error = broker.failure
        assert isinstance(error, GroupLogLoadError)
        assert error.offset == 0 and "replay invariant broken" in str(error)
        assert broker.groups.failed == {0}
    finally:
        await broker.stop()


def test_replay_names_the_position_of_an_undecodable_record(tmp_path: Path) -> None:
    offset = write_undecodable_commit(tmp_path)
    log = GroupLog.open(tmp_path, 1, LogConfig(), "always")
    try:
        with pytest.raises(GroupLogLoadError) as raised:
            list(log.replay_partition(0))
        assert raised.value.offset == offset and raised.value.partition == 0
    finally:
        log.close()
