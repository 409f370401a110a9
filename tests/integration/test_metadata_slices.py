"""A Metadata request for every topic is described a slice of partitions per event-loop turn,
and the answer is the same as one built at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.dataplane import topics_admin
from tests.integration.in_process import send, started_broker, until


async def test_all_topics_are_described_over_several_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = await started_broker(tmp_path / "data", partitions=None)
    try:
        for i in range(12):
            broker.create_topic(f"s{i}", 2, {}, reason="test")
        monkeypatch.setattr(topics_admin, "PARTITIONS_PER_TURN", 5)
        ctx = send(broker, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
        assert ctx.responses == []  # not in the turn it arrived in
        await until(lambda: ctx.responses, "the answer")
        topics = {t.name: t for t in ctx.answer.topics}
        assert set(topics) == {f"s{i}" for i in range(12)} | {"__consumer_offsets"}
        assert all(len(topics[f"s{i}"].partitions) == 2 for i in range(12))
        monkeypatch.setattr(topics_admin, "PARTITIONS_PER_TURN", 10_000)
        at_once = send(broker, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        assert at_once.answer == ctx.answer
    finally:
        await broker.stop()
