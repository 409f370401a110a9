"""Produce: append magic-2 batches to partition logs, answer per acks, wake parked fetches.

Produce v0-v2 carry legacy message sets (magic 0/1); they are up-converted to one magic-2 batch
(`storage.legacy_convert.up_convert`) before anything is appended.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.dataplane.internal_topic import OFFSETS_TOPIC, TopicDirectory
from coordinator.dataplane.producers import ProducerSequenceError, ProducerTable
from protocol.build import build
from protocol.codec import response_type
from storage.batch import CorruptRecordError, InvalidRecordError, MessageTooLargeError
from storage.legacy import UnsupportedCompressionError
from storage.legacy_convert import up_convert
from storage.log import LogOfflineError
from storage.transactions import TRANSACTIONAL

PRODUCE = 0
VERSIONS = ApiVersionRange(PRODUCE, 0, 11)  # v0-v2: legacy message sets, up-converted
LEGACY_MAX_VERSION = 2  # v0-v2: legacy message sets
log = structlog.get_logger("rebalanced.produce")
_PRODUCER_ID = struct.Struct(">q")  # at batch offset 43
_PRODUCER_AND_EPOCH = struct.Struct(">qh")


class TransactionalAppends(Protocol):
    def refuse_append(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      topic: str, partition: int) -> ErrorCode | None: ...

    def appended(self, topic: str, partition: int, producer_id: int,
                 first_offset: int) -> None: ...


class ProduceHost(TopicDirectory, Protocol):
    """What Produce uses of the broker."""

    @property
    def producers(self) -> ProducerTable: ...

    @property
    def transactions(self) -> TransactionalAppends: ...

    def wall_ms(self) -> int: ...

    def partition_appended(self, topic: str, partition: int) -> None:
        """Wake the fetches parked on this partition."""
        ...


def handle(broker: ProduceHost, ctx: ClientRequest, request: Any) -> None:
    if request.acks not in (-1, 0, 1):
        ctx.respond(_all_failed(ctx, request, ErrorCode.invalid_required_acks,
                                f"acks must be -1, 0 or 1, not {request.acks}"))
        return
    now_ms = broker.wall_ms()
    topics_out = []
    for topic_data in request.topic_data:
        topic = broker.topics.get(topic_data.name)
        partitions_out = []
        for data in topic_data.partition_data:
            entry: dict[str, Any] = {"index": data.index, "error_code": ErrorCode.none,
                                     "base_offset": -1, "log_start_offset": -1,
                                     "record_errors": (), "error_message": None}
            if topic_data.name == OFFSETS_TOPIC:
                # Kafka: "Cannot append to internal topic"; only the coordinator writes it.
                entry["error_code"] = ErrorCode.invalid_topic_exception
                entry["error_message"] = f"cannot produce to internal topic {OFFSETS_TOPIC}"
                partitions_out.append(entry)
                continue
            if topic is None or not 0 <= data.index < len(topic.partitions):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                partitions_out.append(entry)
                continue
            partition_log = topic.partitions[data.index]
            records = data.records or b""
            if not records:
                entry["error_code"] = ErrorCode.invalid_record
                entry["error_message"] = "a produce request must carry a record batch"
                partitions_out.append(entry)
                continue
            try:
                if ctx.version <= LEGACY_MAX_VERSION:
                    records = up_convert(records)
                if request.transactional_id is not None and len(records) > 60 \
                        and records[22] & TRANSACTIONAL:
                    producer_id, epoch = _PRODUCER_AND_EPOCH.unpack_from(records, 43)
                    refusal = broker.transactions.refuse_append(
                        request.transactional_id, producer_id, epoch, topic.name, data.index)
                    if refusal is not None:
                        entry["error_code"] = refusal
                        entry["error_message"] = "not in an ongoing transaction of this epoch"
                        partitions_out.append(entry)
                        continue
                producer = broker.producers.check(topic.name, data.index, records)
                if producer.duplicate_offset is not None:
                    entry["base_offset"] = producer.duplicate_offset
                else:
                    appended = partition_log.append(records, now_ms)
                    producer.record(appended.base_offset)
                    if len(records) > 60 and records[22] & TRANSACTIONAL:
                        broker.transactions.appended(topic.name, data.index,
                                                     _PRODUCER_ID.unpack_from(records, 43)[0],
                                                     appended.base_offset)
                    entry["base_offset"] = appended.base_offset
                    broker.partition_appended(topic.name, data.index)
                entry["log_start_offset"] = partition_log.log_start_offset
            except CorruptRecordError as exc:
                log.warning("produce rejected", topic=topic.name, partition=data.index,
                            client_id=ctx.client_id, reason=str(exc))
                if isinstance(exc, MessageTooLargeError):
                    entry["error_code"] = ErrorCode.message_too_large
                elif isinstance(exc, UnsupportedCompressionError):
                    entry["error_code"] = ErrorCode.unsupported_compression_type
                elif isinstance(exc, InvalidRecordError):
                    entry["error_code"] = ErrorCode.invalid_record
                else:
                    entry["error_code"] = ErrorCode.corrupt_message
                entry["error_message"] = str(exc)
            except ProducerSequenceError as exc:
                entry["error_code"] = exc.code
                entry["error_message"] = str(exc)
            except OSError as exc:
                if not isinstance(exc, LogOfflineError):  # offline: logged once by the log
                    log.error("produce append failed", topic=topic.name, partition=data.index,
                              error=str(exc))
                entry["error_code"] = ErrorCode.kafka_storage_error
                entry["error_message"] = str(exc)
            partitions_out.append(entry)
        topics_out.append({"name": topic_data.name, "partition_responses": partitions_out})
    if request.acks == 0:
        ctx.respond_raw(None)
        return
    ctx.respond(build(response_type(PRODUCE, ctx.version), responses=topics_out,
                      throttle_time=0))


def _all_failed(ctx: ClientRequest, request: Any, code: ErrorCode, message: str) -> Any:
    return build(
        response_type(PRODUCE, ctx.version),
        throttle_time=0,
        responses=[
            {"name": t.name, "partition_responses": [
                {"index": p.index, "error_code": code, "base_offset": -1,
                 "record_errors": (), "error_message": message}
                for p in t.partition_data]}
            for t in request.topic_data
        ],
    )
