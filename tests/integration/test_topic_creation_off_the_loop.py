"""Topic creation's disk work runs on the topic-admin thread: a create the disk refuses is
answered with an error (never a closed connection), leaves nothing behind, and a later
request creates the topic."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from kio.schema.errors import ErrorCode

from storage.fs import FaultyFileSystem
from tests.integration.in_process import send, started_broker, until

EMFILE = OSError(24, "Too many open files")


def metadata(name: str) -> dict[str, object]:
    return {"topics": [{"name": name}], "allow_auto_topic_creation": True}


async def test_an_auto_create_the_disk_refuses_is_tried_again(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    broker = await started_broker(tmp_path / "data", topics_fs=fs, partitions=None)
    try:
        fs.fail_next_open(EMFILE)
        first = send(broker, 3, 4, metadata("new"))
        assert first.answer.topics[0].error_code == ErrorCode.leader_not_available
        await until(lambda: not broker.topics.is_reserved("new"), "the failed build")
        assert broker.topics.get("new") is None
        assert not list((tmp_path / "data").glob("new-*"))
        send(broker, 3, 4, metadata("new"))
        await until(lambda: broker.topics.get("new") is not None, "the second build")
        last = send(broker, 3, 4, metadata("new"))
        assert last.answer.topics[0].error_code == ErrorCode.none
    finally:
        await broker.stop()


async def test_a_create_topics_the_disk_refuses_is_answered(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    broker = await started_broker(tmp_path / "data", topics_fs=fs, partitions=None)
    try:
        fs.fail_next_open(EMFILE)
        ctx = send(broker, 19, 5, {"topics": [
            {"name": "refused", "num_partitions": 3, "replication_factor": 1,
             "assignments": [], "configs": []}],
            "timeout": timedelta(seconds=30), "validate_only": False})
        await until(lambda: ctx.responses, "the answer")
        (topic,) = ctx.answer.topics
        assert topic.error_code == ErrorCode.unknown_server_error
        assert "Too many open files" in (topic.error_message or "")
        assert broker.topics.get("refused") is None
        assert not list((tmp_path / "data").glob("refused*"))
    finally:
        await broker.stop()
