"""ListOffsets: earliest, latest (the log end offset exactly), max timestamp, or by timestamp.

v0 is the old form: each partition asks for up to `max_num_offsets` offsets "before" a
timestamp and gets segment boundaries back, newest first (Kafka's `legacyFetchOffsetsBefore`):
the candidates are every segment's base offset, each with the segment's time, plus the log end
offset with the current time when the last segment holds data. LATEST starts from the newest
candidate, EARLIEST from the oldest, and a timestamp from the newest candidate whose time is not
after it. A segment's time is its largest record timestamp (Kafka uses the file's modification
time; for data produced now the two agree). As Kafka answers a consumer, offsets past the high
watermark are replaced by it (`Partition.legacyFetchOffsetsForTimestamp`): for a user topic
the log end is the high watermark, for `__consumer_offsets` it is the last durable offset of
the group log, whose unacknowledged tail a client must not see.

Every version looks topics up the same way, so `__consumer_offsets` is answered by each
(lag tools such as Burrow send v0 for every topic in the metadata).
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest, respond_in_slices
from coordinator.dataplane.internal_topic import TopicDirectory, topic_by_name
from protocol.build import build
from protocol.codec import response_type
from storage.transactions import PartitionTransactions

LIST_OFFSETS = 2
VERSIONS = ApiVersionRange(LIST_OFFSETS, 0, 11)  # v0: the max_num_offsets form
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = (
    -1, -2, -3, -4, -5, -6)


class StableOffsets(Protocol):
    def partition(self, topic: str, partition: int) -> PartitionTransactions | None: ...


class ListOffsetsHost(TopicDirectory, Protocol):
    """What ListOffsets uses of the broker."""

    @property
    def transactions(self) -> StableOffsets: ...

    def wall_ms(self) -> int: ...


def handle(broker: ListOffsetsHost, ctx: ClientRequest, request: Any) -> None:
    if ctx.version == 0:
        _handle_v0(broker, ctx, request)
        return
    topics_out = []
    read_committed = ctx.version >= 2 and request.isolation_level == 1
    for wanted_topic in request.topics:
        topic = topic_by_name(broker, wanted_topic.name)
        partitions_out = []
        for wanted in wanted_topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index,
                                     "error_code": ErrorCode.none, "timestamp": -1,
                                     "offset": -1, "leader_epoch": -1}
            if topic is None or not 0 <= wanted.partition_index < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                partitions_out.append(entry)
                continue
            partition_log = topic.partitions[wanted.partition_index]
            ts = wanted.timestamp
            entry["leader_epoch"] = 0
            try:
                if partition_log.offline is not None:
                    raise partition_log.offline
                if ts == LATEST:
                    entry["offset"] = partition_log.log_end_offset
                    txns = (broker.transactions.partition(topic.name, wanted.partition_index)
                            if read_committed else None)
                    if txns is not None:  # read_committed: the last stable offset
                        entry["offset"] = txns.last_stable_offset(entry["offset"])
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    entry["offset"] = partition_log.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    found = partition_log.max_timestamp_offset()
                    if found is not None:
                        entry["offset"], entry["timestamp"] = found
                elif ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
                    pass  # no tiered storage: Kafka answers -1 / -1
                elif ts < 0:
                    entry["error_code"] = ErrorCode.invalid_request
                else:
                    found = partition_log.offset_for_timestamp(ts)
                    if found is not None:
                        entry["offset"], entry["timestamp"] = found
            except OSError:
                # Offline after a disk error, or a segment file gone (logged by the log).
                entry.update(error_code=ErrorCode.kafka_storage_error, offset=-1, timestamp=-1)
            partitions_out.append(entry)
        topics_out.append({"name": wanted_topic.name, "partitions": partitions_out})
    respond_in_slices(ctx, {"throttle_time": 0, "topics": topics_out})


def _handle_v0(broker: ListOffsetsHost, ctx: ClientRequest, request: Any) -> None:
    topics_out = []
    now_ms = broker.wall_ms()
    for wanted_topic in request.topics:
        topic = topic_by_name(broker, wanted_topic.name)
        partitions_out = []
        for wanted in wanted_topic.partitions:
            entry: dict[str, Any] = {"partition_index": wanted.partition_index,
                                     "error_code": ErrorCode.none, "old_style_offsets": ()}
            if topic is None or not 0 <= wanted.partition_index < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                entry["old_style_offsets"] = offsets_before(
                    topic.partitions[wanted.partition_index], wanted.timestamp,
                    wanted.max_num_offsets, now_ms)
            partitions_out.append(entry)
        topics_out.append({"name": wanted_topic.name, "partitions": partitions_out})
    ctx.respond(build(response_type(LIST_OFFSETS, ctx.version), topics=topics_out))


def offsets_before(partition_log: Any, timestamp: int, max_num_offsets: int,
                   now_ms: int) -> tuple[int, ...]:
    segments = partition_log.segment_times()
    start_offset = partition_log.log_start_offset
    candidates = [(max(base, start_offset), time) for base, time, _ in segments]
    if segments and segments[-1][2] > 0:
        candidates.append((partition_log.log_end_offset, now_ms))
    if timestamp == LATEST:
        start = len(candidates) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(candidates) - 1
        while start >= 0 and candidates[start][1] > timestamp:
            start -= 1
    count = max(min(max_num_offsets, start + 1), 0)
    found = sorted((candidates[start - i][0] for i in range(count)), reverse=True)
    high_watermark = partition_log.log_end_offset
    if found and found[0] > high_watermark:
        # The group log's end candidate is its high watermark already: listed once.
        below = [offset for offset in found if offset < high_watermark]
        found = [high_watermark, *below]
    return tuple(found)


def error_values(request: Any, version: int, error: ErrorCode) -> dict[str, Any]:
    """Every requested partition answered `error`, as Kafka's error response does."""
    return {"throttle_time": 0, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": wanted.partition_index, "error_code": error, "timestamp": -1,
             "offset": -1, "leader_epoch": -1, "old_style_offsets": ()}
            for wanted in topic.partitions]}
        for topic in request.topics]}
