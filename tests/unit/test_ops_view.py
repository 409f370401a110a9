"""The operators' view of a broker (`coordinator/runtime/ops_view.py`): copies of the groups,
their members and assignments, their offsets with the partitions' log ends, and counts."""

from __future__ import annotations

from pathlib import Path

from coordinator.group.offsets import OffsetStore
from coordinator.grouplog.records import offset_commit_record, offset_commit_value
from coordinator.ops.view import CLASSIC, CONSUMER, CommittedOffset
from coordinator.runtime.ops_view import BrokerOpsView, assigned_partitions
from storage.log import LogConfig
from storage.topics import TopicStore
from tests.builders import JoinGroupBuilder
from tests.context import GroupTestContext


class _Broker:
    """The parts of a broker the view reads, over a test context and a real topic store."""

    node_id = 7

    def __init__(self, ctx: GroupTestContext, topics: TopicStore) -> None:
        self.ctx = ctx
        self.groups = self
        self.service = ctx.service
        self.offsets = OffsetStore()
        self.topics = topics

    def wall_ms(self) -> int:
        return self.ctx.now_ms


def _commit(offsets: OffsetStore, group: str, topic: str, partition: int, offset: int) -> None:
    offsets.apply(offset_commit_record(group, topic, partition,
                                       offset_commit_value(offset, -1, "", 0, -1)))


def test_a_consumer_protocol_assignment_is_decoded_and_anything_else_is_none() -> None:
    # version 0, one topic "t" with partitions 2 and 0, no user data
    data = (b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02"
            + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff")
    assert assigned_partitions(data) == (("t", 0), ("t", 2))
    assert assigned_partitions(b"\x00") == ()
    assert assigned_partitions(b"") == ()


def test_a_classic_group_is_copied_with_its_members(tmp_path: Path) -> None:
    ctx = GroupTestContext()
    view = BrokerOpsView(_Broker(ctx, TopicStore.open(tmp_path, LogConfig())))
    members = ctx.stable_group(3)
    assert view.node_id == 7 and view.group_count() == 1 and view.group_ids() == ["g"]
    group = view.group("g", max_members=2)
    assert group is not None
    assert (group.group_type, group.state, group.generation_id, group.member_count) == (
        CLASSIC, "Stable", 1, 3)
    assert group.leader_id == members[0] and group.protocol_name == "range"
    assert [m.client_id for m in group.members] == ["c0", "c1"]  # at most max_members
    assert view.group("nope", 10) is None


def test_committed_offsets_carry_their_partitions_log_end(tmp_path: Path) -> None:
    ctx = GroupTestContext()
    topics = TopicStore.open(tmp_path, LogConfig())
    topics.create("t", 2)
    topics.get("t").partitions[1].append_records([(b"k", b"v")] * 3, 0)  # type: ignore[union-attr]
    broker = _Broker(ctx, topics)
    view = BrokerOpsView(broker)
    ctx.send(JoinGroupBuilder(group="g"))
    _commit(broker.offsets, "g", "t", 1, 2)
    _commit(broker.offsets, "g", "t", 5, 0)  # a partition the topic does not have
    _commit(broker.offsets, "g", "gone", 0, 1)
    _commit(broker.offsets, "h", "t", 0, 0)
    assert view.committed_offsets("g", 10) == [
        CommittedOffset(topic="gone", partition=0, offset=1, log_end_offset=None),
        CommittedOffset(topic="t", partition=1, offset=2, log_end_offset=3),
        CommittedOffset(topic="t", partition=5, offset=0, log_end_offset=None)]
    assert len(view.committed_offsets("g", 2)) == 2
    assert sum(view.count_committed_offsets(chunk=1)) == 4
    assert list(view.count_group_states(CONSUMER, 1000)) == []
    assert [dict(c) for c in view.count_group_states(CLASSIC, 1000)] == [{"Empty": 1}]
    topics.close()
