"""Replaying every durable record into a fresh `OffsetStore` rebuilds the live view exactly."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from coordinator.group.offsets import GroupExpiryView, OffsetStore, OffsetStoreConfig
from coordinator.grouplog.records import OffsetCommitRecord

GROUPS = st.sampled_from(["g1", "g2", "g3"])
TOPICS = st.sampled_from(["a", "b", "c"])
PARTITIONS = st.integers(0, 2)
RETENTION_MINUTES = 1

views = st.builds(
    GroupExpiryView,
    state_is_empty=st.booleans(),
    current_state_timestamp=st.none() | st.integers(0, 5 * 60_000),
    subscribed_topics=st.none() | st.sets(TOPICS).map(frozenset),
    protocol_type=st.sampled_from(["", "consumer", "connect"]),
    state_is_stable=st.booleans(),
)


class OffsetReplay(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = OffsetStoreConfig(offsets_retention_minutes=RETENTION_MINUTES)
        self.store = OffsetStore(self.config)
        self.log: list[OffsetCommitRecord] = []
        self.now_ms = 0
        # Commits written but not yet durable: made durable together by `group_commit`.
        self.in_flight: list[OffsetCommitRecord] = []

    def _durable(self, records: list[OffsetCommitRecord]) -> None:
        for record in records:
            self.log.append(record)
            self.store.apply(record)

    @rule(
        group=GROUPS,
        topics=st.lists(
            st.tuples(
                TOPICS,
                st.lists(
                    st.tuples(
                        PARTITIONS,
                        st.integers(0, 1000),
                        st.integers(-1, 5),
                        st.none() | st.text(max_size=6),
                    ),
                    max_size=3,
                ),
            ),
            max_size=3,
        ),
        expire_after=st.none() | st.integers(0, 120_000),
        fsync_ok=st.booleans(),
        wait=st.booleans(),
    )
    def commit(
        self,
        group: str,
        topics: list[tuple[str, list[tuple[int, int, int, str | None]]]],
        expire_after: int | None,
        fsync_ok: bool,
        wait: bool,
    ) -> None:
        expire_ts = -1 if expire_after is None else self.now_ms + expire_after
        _, records = self.store.commit(
            group, topics, self.now_ms, topic_exists=lambda t, p: t != "c" or p == 0,
            expire_timestamp=expire_ts,
        )
        if wait:
            self.in_flight.extend(records)
        elif fsync_ok:
            self.log.extend(records)
            self.store.apply_all(records)  # as the runtime applies a commit
        else:
            self.store.abort(records)

    @rule(fsync_ok=st.booleans())
    def group_commit(self, fsync_ok: bool) -> None:
        """Every commit waiting on one fsync: several groups, maybe one partition twice."""
        records, self.in_flight = self.in_flight, []
        if fsync_ok:
            self.log.extend(records)
            self.store.apply_all(records)
        else:
            self.store.abort(records)

    @rule(group=GROUPS, topics=st.lists(st.tuples(TOPICS, st.lists(PARTITIONS, max_size=3))),
          subscribed=st.sets(TOPICS))
    def delete(self, group: str, topics: list[tuple[str, list[int]]], subscribed: set[str]) -> None:
        _, records = self.store.delete(group, topics, subscribed)
        self._durable(records)

    @rule(group=GROUPS)
    def delete_group(self, group: str) -> None:
        self._durable(self.store.delete_group(group))

    @rule(topics=st.sets(TOPICS, min_size=1), wait=st.booleans())
    def delete_topics(self, topics: set[str], wait: bool) -> None:
        """DeleteTopics: tombstones written behind the commits in flight (made durable with
        them, or not), or at once when none waits; then no group has an offset of them."""
        tombstones = self.store.delete_topics(topics)
        if wait or self.in_flight:
            self.in_flight.extend(tombstones)
            return
        self._durable(tombstones)
        assert not any(topic in topics for view in self.store.committed_view().values()
                       for topic, _ in view)

    @rule(ms=st.integers(0, 90_000))
    def sleep(self, ms: int) -> None:
        self.now_ms += ms

    @rule(group_views=st.dictionaries(GROUPS, views))
    def expire(self, group_views: dict[str, GroupExpiryView]) -> None:
        result = self.store.expire(self.now_ms, group_views)
        self._durable(result.tombstones)
        for group in result.groups_without_offsets:
            assert not self.store.has_offsets(group)

    @invariant()
    def replay_equals_live_view(self) -> None:
        fresh = OffsetStore(self.config)
        for record in self.log:
            fresh.apply(record)
        assert fresh.committed_view() == self.store.committed_view()

    @invariant()
    def only_waiting_commits_are_pending(self) -> None:
        # every commit was made durable or aborted, unless it still waits for its fsync
        waiting = {r.key.group for r in self.in_flight if r.value is not None}
        for group in ("g1", "g2", "g3"):
            assert self.store.has_pending(group) == (group in waiting)

    @invariant()
    def fetch_answers_the_last_durable_value(self) -> None:
        last: dict[tuple[str, str, int], int | None] = {}
        for r in self.log:
            last[(r.key.group, r.key.topic, r.key.partition)] = (
                None if r.value is None else r.value.offset
            )
        waiting = {(r.key.group, r.key.topic, r.key.partition) for r in self.in_flight
                   if r.value is not None}  # a tombstone in flight leaves the value fetchable
        for (group, topic, partition), offset in last.items():
            (fetched,) = self.store.fetch(group, [(topic, [partition])], require_stable=True)
            if (group, topic, partition) in waiting:
                assert fetched.error is ErrorCode.unstable_offset_commit
            else:
                assert fetched.offset == (-1 if offset is None else offset)


OffsetReplay.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                          deadline=None)
TestOffsetReplay = OffsetReplay.TestCase
