"""Classic-protocol group members speaking raw Kafka frames, for coordinator load generation.

One `Member` is one consumer: its own TCP connection, JoinGroup (with the v4+ MEMBER_ID_REQUIRED
round trip), SyncGroup (the leader assigns every member), Heartbeat, LeaveGroup and OffsetCommit.
The same API versions are used against every broker so the comparison is like for like; they are
the newest that all three brokers advertise without flexible encoding differences mattering.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

from tests.bench.wire import Connection, decode, encode, response_header_size

JOIN_V = 5
SYNC_V = 3
HEARTBEAT_V = 3
LEAVE_V = 2  # v3+ batches members; the librdkafka mock parses only the v0-v2 layout
COMMIT_V = 7
FETCH_V = 5

NONE = 0
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
# Retried by a client after a backoff: the coordinator is still loading its group log, or has
# moved (Kafka clients back off `retry.backoff.ms`, 100 ms, growing to `retry.backoff.max.ms`).
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RETRIABLE = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0

_ERR = struct.Struct(">h")


class GroupError(RuntimeError):
    def __init__(self, api: str, code: int) -> None:
        super().__init__(f"{api} error code {code}")
        self.api = api
        self.code = code


def subscription(topics: Sequence[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for topic in topics:
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name
    out += struct.pack(">i", -1)
    return bytes(out)


def assignment(topic: str, partitions: Sequence[int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [(topic, [partition])], null user data."""
    name = topic.encode()
    out = bytearray(struct.pack(">hi", 0, 1))
    out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(partitions))
    for p in partitions:
        out += struct.pack(">i", p)
    out += struct.pack(">i", -1)
    return bytes(out)


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def encode_offset_commit_v7(group: str, generation: int, member_id: str, topic: str,
                            offsets: Sequence[tuple[int, int]],
                            client_id: str = "bench") -> bytearray:
    """OffsetCommit v7 packed by hand (the kio writer is too slow for a million records).

    Layout: header v1 (key, version, correlation id, client id), group_id, generation_id,
    member_id, group_instance_id (null), topics [name, partitions [index, offset, leader
    epoch (-1), metadata (null)]]. Checked against kio's encoder by `self_check`.
    """
    body = bytearray(struct.pack(">hhi", 8, 7, 0))
    body += _string(client_id) + _string(group) + struct.pack(">i", generation)
    body += _string(member_id) + struct.pack(">h", -1)
    body += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", len(offsets))
    part = struct.Struct(">iqih")
    for partition, offset in offsets:
        body += part.pack(partition, offset, -1, -1)
    return bytearray(struct.pack(">i", len(body))) + body


def self_check() -> None:
    """The hand-packed OffsetCommit equals kio's encoding of the same request."""
    offsets = [(0, 5), (3, 1 << 40)]
    ours = encode_offset_commit_v7("g", 7, "m-1", "t", offsets)
    theirs = encode(8, COMMIT_V, {
        "group_id": "g", "generation_id_or_member_epoch": 7, "member_id": "m-1",
        "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
             "committed_metadata": None} for p, o in offsets]}],
    })
    if bytes(ours) != bytes(theirs):
        raise AssertionError("hand-packed OffsetCommit v7 differs from kio's encoding")


class SyncBarrier:
    """Lets a group's leader send SyncGroup after its followers have sent theirs.

    Kafka parks followers' SyncGroup until the leader's arrives, in any order. The librdkafka mock
    completes the sync as soon as the leader's assignment covers every member and then answers
    later followers INVALID_REQUEST; real leaders compute an assignment first, so followers
    usually arrive first. Sending the leader's request last keeps the workload valid everywhere.
    """

    def __init__(self) -> None:
        self._sent: dict[int, int] = {}
        self._changed = asyncio.Event()

    def follower_sent(self, generation: int) -> None:
        self._sent[generation] = self._sent.get(generation, 0) + 1
        self._changed.set()

    async def wait(self, generation: int, followers: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._sent.get(generation, 0) < followers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return
        if followers:
            await asyncio.sleep(0.005)


class Member:
    """One group member on its own connection."""

    def __init__(self, conn: Connection, group: str, *, session_ms: int, rebalance_ms: int,
                 topic: str = "bench", index: int = 0,
                 barrier: SyncBarrier | None = None) -> None:
        self.conn = conn
        self.barrier = barrier or SyncBarrier()
        self.group = group
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.topic = topic
        self.index = index
        self.member_id = ""
        self.generation = -1
        self.synced_generation = -1
        self.leader = ""
        self.members: list[str] = []
        self._hb_frame: bytearray | None = None
        self._hb_error_at = response_header_size(12, HEARTBEAT_V) + (4 if HEARTBEAT_V >= 1 else 0)
        self.heartbeats = 0
        self.last_heartbeat_sent = 0.0
        self.first_added_at: float | None = None  # when the JoinGroup that got it in was sent

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.leader == self.member_id

    async def join(self, timeout: float = 120.0) -> None:
        body: dict[str, Any] = {
            "group_id": self.group, "session_timeout": self.session_ms,
            "rebalance_timeout": self.rebalance_ms, "member_id": self.member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription([self.topic])}],
        }
        deadline = time.monotonic() + timeout
        backoff = RETRY_BACKOFF_S
        attempts = 0
        while attempts < 4:
            sent_at = time.monotonic()
            reply = await self.conn.call(11, JOIN_V, body, timeout)
            code = reply.error_code.value
            if code in RETRIABLE and sent_at + backoff < deadline:
                # Not an attempt of the member-id handshake: wait and ask again.
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
                continue
            attempts += 1
            if code == MEMBER_ID_REQUIRED:
                self.member_id = body["member_id"] = reply.member_id
                continue
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = body["member_id"] = ""
                continue
            if code != NONE:
                raise GroupError("JoinGroup", code)
            if self.first_added_at is None:
                self.first_added_at = sent_at
            self.member_id = reply.member_id
            self.generation = reply.generation_id
            self.leader = reply.leader
            self.members = [m.member_id for m in reply.members]
            return
        raise GroupError("JoinGroup", code)

    async def sync(self, timeout: float = 120.0) -> bool:
        """True when synced at the joined generation; False if a new rebalance began."""
        assignments = []
        if self.is_leader:
            assignments = [{"member_id": m, "assignment": assignment(self.topic, [i])}
                           for i, m in enumerate(self.members)]
            await self.barrier.wait(self.generation, len(self.members) - 1, 2.0)
        frame = encode(14, SYNC_V, {
            "group_id": self.group, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None, "assignments": assignments,
        })
        pending = self.conn.send_raw(frame)
        if not self.is_leader:
            self.barrier.follower_sent(self.generation)
        reply = decode(14, SYNC_V, await asyncio.wait_for(pending, timeout))
        code = reply.error_code.value
        if code in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
            return False
        if code == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return False
        if code != NONE:
            raise GroupError("SyncGroup", code)
        self.synced_generation = self.generation
        self._hb_frame = encode(12, HEARTBEAT_V, {
            "group_id": self.group, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None,
        })
        return True

    async def join_and_sync(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            await self.join(max(deadline - time.monotonic(), 1.0))
            if await self.sync(max(deadline - time.monotonic(), 1.0)):
                return
        raise TimeoutError(f"member {self.index} not synced before the deadline")

    async def heartbeat(self, timeout: float = 30.0) -> int:
        """One heartbeat at the synced generation; the error code."""
        assert self._hb_frame is not None
        self.last_heartbeat_sent = time.monotonic()
        frame = await asyncio.wait_for(self.conn.send_raw(self._hb_frame), timeout)
        self.heartbeats += 1
        return int(_ERR.unpack_from(frame, self._hb_error_at)[0])

    async def leave(self, timeout: float = 30.0) -> int:
        reply = await self.conn.call(13, LEAVE_V, {
            "group_id": self.group, "member_id": self.member_id,
        }, timeout)
        return int(reply.error_code.value)

    async def live(self, heartbeat_s: float, stop: asyncio.Event,
                   on_synced: Callable[[Member], None],
                   on_rebalance: Callable[[Member, int], None] | None = None,
                   deadline: float | None = None) -> None:
        """Join, sync, heartbeat every `heartbeat_s`; rejoin on a rebalance; until `stop`."""
        deadline = deadline or time.monotonic() + 600
        while not stop.is_set() and time.monotonic() < deadline:
            await self.join_and_sync(deadline)
            on_synced(self)
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), heartbeat_s)
                    return
                except TimeoutError:
                    pass
                code = await self.heartbeat()
                if code == NONE:
                    continue
                if on_rebalance is not None:
                    on_rebalance(self, code)
                if code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                if code in (REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                    break
                raise GroupError("Heartbeat", code)


class SyncTracker:
    """Signals when `expected` members are synced at one generation newer than `after`."""

    def __init__(self, expected: int, after: int = -1) -> None:
        self.expected = expected
        self.after = after
        self.by_generation: dict[int, set[int]] = {}
        self.done = asyncio.Event()
        self.done_at: float | None = None
        self.generation: int | None = None

    def reset(self, expected: int, after: int) -> None:
        self.expected = expected
        self.after = after
        self.by_generation = {}
        self.done = asyncio.Event()
        self.done_at = None
        self.generation = None

    def synced(self, member: Member) -> None:
        gen = member.synced_generation
        if gen <= self.after or self.done.is_set():
            return
        members = self.by_generation.setdefault(gen, set())
        members.add(member.index)
        if len(members) >= self.expected:
            self.done_at = time.monotonic()
            self.generation = gen
            self.done.set()


async def open_connections(host: str, port: int, count: int, parallel: int = 100,
                           deadline: float | None = None) -> list[Connection]:
    """`count` connections, opened `parallel` at a time (listen backlogs are small)."""
    conns: list[Connection] = []
    try:
        for start in range(0, count, parallel):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"only {len(conns)} of {count} connections opened in time")
            batch = await asyncio.gather(
                *[Connection.open(host, port) for _ in range(min(parallel, count - start))])
            conns.extend(batch)
    except BaseException:
        await close_all(conns)
        raise
    return conns


async def close_all(conns: Sequence[Connection]) -> None:
    await asyncio.gather(*[c.close() for c in conns], return_exceptions=True)


async def gather_bounded(coros: Sequence[Any], timeout: float) -> list[Any]:
    """Run all, return their results or exceptions; cancel what is left at `timeout`."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    results: list[Any] = []
    for task in tasks:
        if task.cancelled():
            results.append(TimeoutError("timed out"))
        elif task.exception() is not None:
            results.append(task.exception())
        else:
            results.append(task.result())
    return results

