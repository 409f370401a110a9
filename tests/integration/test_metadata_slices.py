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


async def test_many_named_topics_are_described_over_several_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Names that start topics' creation (auto-create) are handled a slice per loop turn; the
    answer keeps the request's order and is the one a single turn would give."""
    broker = await started_broker(tmp_path / "data", partitions=None)
    try:
        for i in range(3):
            broker.create_topic(f"s{i}", 2, {}, reason="test")
        monkeypatch.setattr(topics_admin, "NAMES_PER_TURN", 4)
        names = [f"s{i % 3}" if i % 5 == 0 else f"new{i}" for i in range(23)] + ["__bad"]
        body = {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": True,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        ctx = send(broker, 3, 4, body)
        assert ctx.responses == []  # not in the turn it arrived in
        await until(lambda: ctx.responses, "the answer")
        assert [t.name for t in ctx.answer.topics] == names
        errors = {t.name: t.error_code.name for t in ctx.answer.topics}
        assert {errors[n] for n in names if n.startswith("new")} == {"leader_not_available"}
        assert {errors[n] for n in names if n.startswith("s")} == {"none"}
        assert errors["__bad"] == "invalid_topic_exception"
        await until(lambda: all(broker.topics.get(n) is not None
                                for n in names if n.startswith("new")), "the topics built")
        monkeypatch.setattr(topics_admin, "NAMES_PER_TURN", 10_000)
        at_once = send(broker, 3, 4, {**body, "allow_auto_topic_creation": False})
        assert [(t.name, t.error_code.name) for t in at_once.answer.topics] == [
            (n, "invalid_topic_exception" if n == "__bad" else "none") for n in names]
    finally:
        await broker.stop()
