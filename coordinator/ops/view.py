"""What the operators' code reads of the broker: a narrow, read-only protocol of plain values.

The page, `/metrics` and the HTTP endpoint see `BrokerView`, the rebalance history sees
`LiveConsumerGroups`; neither is the broker. The runtime implements both
(`coordinator/runtime/ops_view.py`) and copies what is asked into the frozen values below, so
nothing here can change a group, and a change inside the core touches that adapter, not ops.

Slicing stays with the caller: the counting methods yield one chunk's counts per step, so the
endpoint decides when to give the event loop back (`coordinator/ops/http.py`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

CLASSIC = "classic"
CONSUMER = "consumer"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberView:
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    # What the member is assigned, by topic name, sorted. A classic member's is decoded from
    # its `consumer` protocol assignment, and empty for other protocol types.
    partitions: tuple[tuple[str, int], ...]
    member_epoch: int | None = None  # consumer groups only


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupView:
    group_id: str
    group_type: str  # CLASSIC | CONSUMER
    state: str  # Kafka's name of the state: "Stable", "PreparingRebalance", "Reconciling", ...
    generation_id: int  # the group epoch of a consumer group
    protocol_type: str | None
    protocol_name: str | None  # None for consumer groups
    leader_id: str | None  # None for consumer groups
    member_count: int
    members: tuple[MemberView, ...]  # the first `max_members` asked for


@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    log_end_offset: int | None  # None: the topic or the partition is not (or no longer) here


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileProgress:
    """How far a consumer group is in reconciling to its target assignment."""

    state: str  # "Empty", "Assigning", "Reconciling", "Stable" or "Dead"
    assignment_epoch: int
    member_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOf:
    """Who runs a member."""

    client_id: str
    client_host: str


class LiveConsumerGroups(Protocol):
    """What the rebalance history asks of the live consumer groups when their events arrive."""

    def is_consumer_group(self, group_id: str) -> bool: ...

    def progress(self, group_id: str) -> ReconcileProgress | None:
        """None: no such consumer group."""
        ...

    def client_of(self, group_id: str, member_id: str) -> ClientOf | None:
        """None: no such consumer group or member."""
        ...


class BrokerView(Protocol):
    """What the page and `/metrics` read of the broker."""

    @property
    def node_id(self) -> int: ...

    def wall_ms(self) -> int: ...

    def group_ids(self) -> list[str]:
        """Every group's id, classic and consumer (a new list, in no order)."""
        ...

    def group_count(self) -> int: ...

    def group(self, group_id: str, max_members: int) -> GroupView | None:
        """A copy of one group with at most `max_members` members; None: no such group."""
        ...

    def committed_offsets(self, group_id: str, limit: int) -> list[CommittedOffset]:
        """The group's first `limit` committed offsets by topic and partition, each with its
        partition's log end offset."""
        ...

    def count_group_states(self, group_type: str, chunk: int) -> Iterator[Mapping[str, int]]:
        """Groups of one type by state, `chunk` groups per step."""
        ...

    def count_committed_offsets(self, chunk: int) -> Iterator[int]:
        """Committed offsets held (Kafka's NumOffsets), the groups' of `chunk` groups per
        step."""
        ...
