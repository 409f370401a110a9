"""ListOffsets: earliest, latest (the log end offset exactly), max timestamp, or by timestamp."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from coordinator.context import RequestContext
from coordinator.dataplane.internal_topic import topic_by_name
from protocol.build import build
from protocol.codec import response_type

if TYPE_CHECKING:
    from coordinator.runtime import Broker

LIST_OFFSETS = 2
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = (
    -1, -2, -3, -4, -5, -6)


def handle(broker: Broker, ctx: RequestContext, request: Any) -> None:
    topics_out = []
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
            if ts == LATEST:
                entry["offset"] = partition_log.log_end_offset
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
            partitions_out.append(entry)
        topics_out.append({"name": wanted_topic.name, "partitions": partitions_out})
    ctx.respond(build(response_type(LIST_OFFSETS, ctx.version), throttle_time=0,
                      topics=topics_out))
