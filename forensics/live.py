"""`__consumer_offsets` read from a live Kafka-compatible cluster over the Kafka protocol.

Lag tools read the group log this way instead of copying segment files off the brokers'
disks: a consumer that is assigned the topic's partitions (no group, nothing committed) and
fetches them. The client is confluent-kafka (librdkafka, the project's own dependency): it
fetches and decompresses batches in C (every codec Kafka has, where the segment reader does
gzip only), drops transaction markers and aborted records with `read_committed`, and takes
any client setting (`security.protocol`, `sasl.*`, `ssl.*`) as it is.

Without Spark: `plan` asks the cluster for the topic's partitions and resolves the bounds
to offsets; `read_range` reads one partition's `[start, end)` and yields the decoder's rows
(`forensics.grouplog`'s columns: `source_file` names the topic partition, `position` is the
record's offset). The data source (`forensics.datasource.LiveOffsetsDataSource`) gives each
range a Spark partition.
"""

from __future__ import annotations

import gc
import json
import socket
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.grouplog.codec import RecordDecodeError, decode_record
from forensics.grouplog import Chunks, CommitColumns, grouplog_speedups, record_row

OFFSETS_TOPIC = "__consumer_offsets"
EARLIEST, LATEST = -2, -1  # Kafka's ListOffsets timestamps, also in explicit bounds
CLIENT_PREFIX = "kafka."  # data source options passed to the client without the prefix
METADATA_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 30.0  # no record and no end of partition for this long: the read fails
FETCH_BATCH = 10_000

_I16 = struct.Struct(">h")
# Coordinator record key versions: 0-1 OffsetCommit, 2 GroupMetadata, 3-19 consumer, share
# and streams groups (counted and skipped by the decoder). A key outside that range is not
# a group coordinator record.
_KEY_VERSIONS = range(0, 20)


class LiveSourceError(Exception):
    """The cluster or the topic cannot be read; the message is one line naming why."""


@dataclass(frozen=True)
class OffsetRange:
    partition: int
    start: int
    end: int  # exclusive

    @property
    def records(self) -> int:
        return max(self.end - self.start, 0)


def client_config(bootstrap: str, settings: Mapping[str, str]) -> dict[str, Any]:
    """A consumer's settings: no group (it is assigned partitions and commits nothing),
    `settings` (security, timeouts) on top."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "rebalanced-forensics",  # required by the client; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 50,  # history is read, not waited for
        "socket.connection.setup.timeout.ms": 5000,
        "log_level": 0,  # its connection errors are reported once, as a LiveSourceError
    }
    config.update(settings)
    return config


def client_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.`-prefixed data source options, without the prefix."""
    return {k[len(CLIENT_PREFIX):]: v for k, v in options.items()
            if k.startswith(CLIENT_PREFIX) and k != "kafka.bootstrap.servers"}


def parse_bound(text: str | None, default: int, topic: str) -> int | dict[int, int]:
    """`earliest`, `latest`, or Spark's Kafka source form `{"TOPIC": {"0": 23, "1": -2}}`
    (-2 earliest, -1 latest; partitions not named take `default`)."""
    if text is None or text == "":
        return default
    if text in ("earliest", "latest"):
        return EARLIEST if text == "earliest" else LATEST
    try:
        parsed = json.loads(text)
        by_partition = parsed[topic] if isinstance(parsed, dict) and topic in parsed else parsed
        return {int(p): int(o) for p, o in by_partition.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise LiveSourceError(
            f"bad offsets {text!r}: give earliest, latest or "
            f'{{"{topic}": {{"PARTITION": OFFSET}}}}') from exc


def plan(bootstrap: str, topic: str, settings: Mapping[str, str],
         starting: int | dict[int, int] = EARLIEST, ending: int | dict[int, int] = LATEST,
         check_records: bool = True, starting_ms: int | None = None,
         ending_ms: int | None = None) -> list[OffsetRange]:
    """Every partition of `topic` with its offsets to read, `[start, end)` clamped to what
    the cluster retains. `starting_ms` / `ending_ms` (milliseconds since the epoch) replace
    `starting` / `ending` with each partition's first offset whose record's timestamp is at
    or after them (ListOffsets by time; none: the high watermark). Raises `LiveSourceError`
    when the cluster cannot be reached, the topic does not exist or (`check_records`) its
    first record is not a group coordinator record."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    reachable(bootstrap)
    consumer = Consumer(client_config(bootstrap, settings))
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise LiveSourceError(f"--bootstrap-server {bootstrap}: cannot read the cluster's "
                                  f"metadata: {_kafka_error(exc)}") from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            why = found.error.str() if found is not None and found.error else "no such topic"
            raise LiveSourceError(f"topic {topic} on {bootstrap}: {why}")
        ranges = []
        for partition in sorted(found.partitions):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S)
            except KafkaException as exc:
                raise LiveSourceError(f"topic {topic} partition {partition} on {bootstrap}: "
                                      f"{_kafka_error(exc)}") from None
            start = _resolve(starting, partition, low, high, EARLIEST)
            end = _resolve(ending, partition, low, high, LATEST)
            ranges.append(OffsetRange(partition, start, max(end, start)))
        if starting_ms is not None or ending_ms is not None:
            ranges = _by_time(consumer, topic, bootstrap, ranges, starting_ms, ending_ms)
    finally:
        consumer.close()
    if check_records:
        check_topic(bootstrap, topic, settings, ranges)
    return ranges


def _by_time(consumer: Any, topic: str, bootstrap: str, ranges: list[OffsetRange],
             starting_ms: int | None, ending_ms: int | None) -> list[OffsetRange]:
    from confluent_kafka import KafkaException, TopicPartition

    def offsets_at(ms: int) -> dict[int, int]:
        try:
            found = consumer.offsets_for_times(
                [TopicPartition(topic, r.partition, ms) for r in ranges],
                timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            raise LiveSourceError(f"topic {topic} on {bootstrap}: offsets by time: "
                                  f"{_kafka_error(exc)}") from None
        return {tp.partition: tp.offset for tp in found}

    starts = offsets_at(starting_ms) if starting_ms is not None else {}
    ends = offsets_at(ending_ms) if ending_ms is not None else {}
    timed = []
    for r in ranges:
        # -1: no record at or after that time, so the partition's end
        start = starts.get(r.partition, r.start)
        end = ends.get(r.partition, r.end)
        start = r.end if start < 0 else max(start, r.start)
        end = r.end if end < 0 else min(end, r.end)
        timed.append(OffsetRange(r.partition, start, max(end, start)))
    return timed


def reachable(bootstrap: str, timeout_s: float = 5.0) -> None:
    """At least one bootstrap server accepts a connection; else `LiveSourceError` at once
    (the client would retry until its metadata timeout)."""
    failures = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout_s).close()
            return
        except (OSError, ValueError) as exc:
            failures.append(f"{server.strip()}: {getattr(exc, 'strerror', None) or exc}")
    raise LiveSourceError(f"--bootstrap-server {bootstrap}: cannot connect "
                          f"({'; '.join(failures)})")


def _resolve(bound: int | dict[int, int], partition: int, low: int, high: int,
             default: int) -> int:
    offset = bound.get(partition, default) if isinstance(bound, dict) else bound
    if offset == EARLIEST:
        return low
    if offset == LATEST:
        return high
    return min(max(offset, low), high)


def check_topic(bootstrap: str, topic: str, settings: Mapping[str, str],
                ranges: list[OffsetRange]) -> None:
    """The first record of the first partition with records must be a group coordinator
    record: a mistaken topic fails here, in one line, not as rows of undecodable records."""
    first = next((r for r in ranges if r.records), None)
    if first is None:
        return
    probe = OffsetRange(first.partition, first.start, first.end)
    for key, value in _first_records(bootstrap, topic, settings, probe, 1):
        if not is_coordinator_record(key, value):
            raise LiveSourceError(
                f"topic {topic} on {bootstrap} is not a __consumer_offsets topic: the record "
                f"at partition {first.partition} offset {first.start} is not a group "
                "coordinator record")
        return


def is_coordinator_record(key: bytes | None, value: bytes | None) -> bool:
    if key is None or len(key) < 2 or _I16.unpack_from(key, 0)[0] not in _KEY_VERSIONS:
        return False
    if _I16.unpack_from(key, 0)[0] > 2:
        return True  # a group type the decoder counts and skips
    try:
        decode_record(key, value)
    except RecordDecodeError:
        return False
    return True


def _first_records(bootstrap: str, topic: str, settings: Mapping[str, str],
                   offsets: OffsetRange, count: int) -> Iterator[tuple[bytes | None,
                                                                         bytes | None]]:
    taken = 0
    for batch in _fetch(bootstrap, topic, settings, offsets):
        for message in batch:
            yield message.key(), message.value()
            taken += 1
            if taken >= count:
                return


def source_name(bootstrap: str, topic: str, partition: int) -> str:
    """`source_file` of a live row: where the record came from."""
    return f"kafka://{bootstrap}/{topic}-{partition}"


def read_range(bootstrap: str, topic: str, settings: Mapping[str, str],
               offsets: OffsetRange) -> Iterator[list[tuple[object, ...]]]:
    """The decoder's rows of one partition's `[start, end)`, a fetched batch at a time."""
    name = source_name(bootstrap, topic, offsets.partition)
    partition = offsets.partition
    for batch in _fetch(bootstrap, topic, settings, offsets):
        rows = []
        for message in batch:
            offset = message.offset()
            rows.append(record_row(name, partition, offset, offset, message.timestamp()[1],
                                   message.key(), message.value()))
        yield rows


def read_range_chunks(bootstrap: str, topic: str, settings: Mapping[str, str],
                      offsets: OffsetRange, max_rows: int = 65536
                      ) -> Iterator[CommitColumns | list[tuple[object, ...]]]:
    """The rows of `read_range` in chunks of about `max_rows`, as `decode_segment_chunks`
    gives a segment's: the commit records unpacked by the C loop into `CommitColumns` (no
    Python object per row on their way to Arrow), every other row in lists. Without the C
    loop (or on a big-endian machine) every chunk is a list."""
    speedups = grouplog_speedups()
    if speedups is None or not hasattr(speedups, "message_columns"):  # none, or built stale
        rows: list[tuple[object, ...]] = []
        for fetched in read_range(bootstrap, topic, settings, offsets):
            rows.extend(fetched)
            if len(rows) >= max_rows:
                yield rows
                rows = []
        if rows:
            yield rows
        return
    # The client makes a Python object per record, tracked by the cyclic garbage collector:
    # with the collector on, its passes over each fetch's 10,000 new objects (and, every so
    # often, over the whole heap) took longer than decoding them. The messages hold no
    # cycles; their memory goes back as soon as each fetch is decoded.
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield from _read_range_chunks(bootstrap, topic, settings, offsets, speedups,
                                      max_rows)
    finally:
        if collecting:
            gc.enable()


def _read_range_chunks(bootstrap: str, topic: str, settings: Mapping[str, str],
                       offsets: OffsetRange, speedups: Any, max_rows: int
                       ) -> Iterator[CommitColumns | list[tuple[object, ...]]]:
    name = source_name(bootstrap, topic, offsets.partition)
    partition = offsets.partition
    chunks = Chunks(name, partition, max_rows)

    def add_others(messages: list[Any], indexes: list[int]) -> None:
        for n in indexes:
            message = messages[n]
            offset = message.offset()
            chunks.others.append(record_row(name, partition, offset, offset,
                                            message.timestamp()[1], message.key(),
                                            message.value()))

    for messages in _fetch_raw(bootstrap, topic, settings, offsets):
        # The C loop takes the messages from the front while they are records of the range;
        # what stops it (an error, the end of the partition or of the range) is looked at
        # here.
        added, rest, taken = speedups.message_columns(messages, offsets.end, chunks.buffers)
        chunks.commits += added
        add_others(messages, rest)
        if taken < len(messages):
            # An error (raised), the end of the partition or the end of the range.
            _wanted(messages[taken:taken + 1], topic, bootstrap, offsets)
            done = True
        else:
            done = taken > 0 and messages[-1].offset() == offsets.end - 1
        yield from chunks.full()
        if done:
            break
    yield from chunks.rest()


def _fetch(bootstrap: str, topic: str, settings: Mapping[str, str],
           offsets: OffsetRange) -> Iterator[list[Any]]:
    """The messages of `offsets`, in fetched batches; the end of the partition or of the
    range ends it (a compacted or transactional topic has offsets with no record)."""
    for fetched in _fetch_raw(bootstrap, topic, settings, offsets):
        wanted, done = _wanted(fetched, topic, bootstrap, offsets)
        if wanted:
            yield wanted
        if done:
            return


def _wanted(messages: list[Any], topic: str, bootstrap: str, offsets: OffsetRange
            ) -> tuple[list[Any], bool]:
    """The records of `messages` in the range, and whether the range is read to its end; an
    error other than the end of the partition is a `LiveSourceError`."""
    from confluent_kafka import KafkaError

    wanted: list[Any] = []
    for message in messages:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                # At the high watermark, which was at or past `end` when planned: the
                # offsets left before `end` hold no record.
                return wanted, True
            raise LiveSourceError(f"topic {topic} partition {offsets.partition} on "
                                  f"{bootstrap}: {error.str()}")
        offset = message.offset() or 0
        if offset >= offsets.end:
            return wanted, True
        wanted.append(message)
        if offset == offsets.end - 1:
            return wanted, True
    return wanted, False


def _fetch_raw(bootstrap: str, topic: str, settings: Mapping[str, str],
               offsets: OffsetRange) -> Iterator[list[Any]]:
    """The client's messages from `offsets.start` on, as it hands them out (records, the end
    of the partition, errors), until the consumer of this generator stops; a partition idle
    for `IDLE_TIMEOUT_S` is a `LiveSourceError`."""
    if not offsets.records:
        return
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(client_config(bootstrap, settings))
    try:
        consumer.assign([TopicPartition(topic, offsets.partition, offsets.start)])
        idle_since = time.monotonic()
        while True:
            messages = consumer.consume(FETCH_BATCH, 0.05)
            if not messages:
                if time.monotonic() - idle_since > IDLE_TIMEOUT_S:
                    raise LiveSourceError(
                        f"topic {topic} partition {offsets.partition} on {bootstrap}: "
                        f"no record for {IDLE_TIMEOUT_S:.0f} s before offset {offsets.end}")
                continue
            idle_since = time.monotonic()
            yield messages
    except KafkaException as exc:
        raise LiveSourceError(f"topic {topic} partition {offsets.partition} on {bootstrap}: "
                              f"{_kafka_error(exc)}") from None
    finally:
        consumer.close()


def _kafka_error(exc: BaseException) -> str:
    error = exc.args[0] if exc.args else exc
    text = error.str() if hasattr(error, "str") else str(error)
    return str(text).splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class LiveSource:
    """A cluster's offsets topic with the ranges to read, planned on the driver."""

    bootstrap: str
    topic: str
    settings: Mapping[str, str]
    ranges: tuple[OffsetRange, ...]

    @property
    def display(self) -> str:
        return f"kafka://{self.bootstrap}/{self.topic}"

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    def stream_options(self) -> dict[str, str]:
        """The data source's options for a stream that starts at these ranges' starts."""
        options = {"kafka.bootstrap.servers": self.bootstrap, "topic": self.topic,
                   "startingOffsets": json.dumps(
                       {self.topic: {str(r.partition): r.start for r in self.ranges}})}
        options.update({CLIENT_PREFIX + k: v for k, v in self.settings.items()})
        return options

    def options(self) -> dict[str, str]:
        """The data source's options for exactly these ranges."""
        options = {"kafka.bootstrap.servers": self.bootstrap, "topic": self.topic,
                   "ranges": json.dumps([[r.partition, r.start, r.end] for r in self.ranges])}
        options.update({CLIENT_PREFIX + k: v for k, v in self.settings.items()})
        return options
