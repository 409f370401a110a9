"""Down-conversion scenario: broker CPU per message of Fetch v0-v3 against a magic-2 Fetch.

One confluent-kafka producer writes `messages` values of `message_bytes` into a 1-partition topic
(magic-2 batches, as every current client writes them), and as many again gzip-compressed into a
second topic. The same data is then read from offset 0 to the end by one raw-protocol client,
once per mode:

* Fetch v4 (magic-2 batches served as stored: the modern path),
* Fetch v3 (down-converted to magic 1) and Fetch v1 (down-converted to magic 0),

with 1 MiB per partition per request, one request in flight. Broker CPU (utime+stime of the
broker process) is sampled around each read; the ratio of a legacy read's CPU per message to the
magic-2 read's is the number the target is about.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from tests.bench.brokers import Broker
from tests.bench.dataplane import ensure_topic


@dataclass(frozen=True, slots=True)
class LegacyParams:
    messages: int = 200_000
    message_bytes: int = 100
    partition_max_bytes: int = 1 << 20
    repeats: int = 3  # reads of the whole topic per mode: CPU is sampled in 10 ms ticks


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _produce(broker: Broker, topic: str, p: LegacyParams, compression: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "linger.ms": 5,
                         "compression.type": compression})
    value = b"x" * p.message_bytes
    for i in range(p.messages):
        while True:
            try:
                producer.produce(topic, value=value, key=b"%d" % i, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("produce did not complete")


def _fetch_frame(version: int, topic: str, offset: int, p: LegacyParams) -> bytes:
    name = topic.encode()
    body = struct.pack(">hhi", 1, version, 1) + _I16.pack(5) + b"bench"
    body += struct.pack(">iii", -1, 500, 1)  # replica, max wait, min bytes
    if version >= 3:
        body += _I32.pack(64 << 20)
    if version >= 4:
        body += b"\x00"  # read_uncommitted
    body += _I32.pack(1) + _I16.pack(len(name)) + name + _I32.pack(1)
    body += struct.pack(">iqi", 0, offset, p.partition_max_bytes)
    return _I32.pack(len(body)) + body


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _records_of(version: int, reply: bytes) -> tuple[int, bytes]:
    pos = 4  # correlation id
    if version >= 1:
        pos += 4  # throttle
    pos += 4  # topics
    (name_len,) = _I16.unpack_from(reply, pos)
    pos += 2 + name_len + 4  # name, partition count
    _partition, error, _hw = struct.unpack_from(">ihq", reply, pos)
    pos += 14
    if version >= 4:
        pos += 8  # last stable offset
        (aborted,) = _I32.unpack_from(reply, pos)
        pos += 4 + max(aborted, 0) * 16
    (size,) = _I32.unpack_from(reply, pos)
    pos += 4
    return error, reply[pos:pos + max(size, 0)]


def _count_and_next(version: int, records: bytes) -> tuple[int, int]:
    """(messages, next offset) of a fetched records field; magic 2 batches or legacy sets."""
    count, next_offset, pos = 0, -1, 0
    while pos + 12 <= len(records):
        base, size = struct.unpack_from(">qi", records, pos)
        if pos + 12 + size > len(records):
            break
        if version >= 4:
            last_delta, _, _, _, _, _, n = struct.unpack_from(">iqqqhii", records, pos + 23)
            count += n
            next_offset = base + last_delta + 1
        else:
            codec = records[pos + 17] & 0x07
            count += 1 if not codec else _inner_count(records[pos:pos + 12 + size])
            next_offset = base + 1
        pos += 12 + size
    return count, next_offset


def _inner_count(wrapper: bytes) -> int:
    import gzip

    magic = wrapper[16]
    key_at = 18 + (8 if magic else 0)
    (key_len,) = _I32.unpack_from(wrapper, key_at)
    value_at = key_at + 4 + max(key_len, 0)
    (value_len,) = _I32.unpack_from(wrapper, value_at)
    inner = gzip.decompress(wrapper[value_at + 4:value_at + 4 + value_len])
    count, pos = 0, 0
    while pos + 12 <= len(inner):
        (size,) = _I32.unpack_from(inner, pos + 8)
        count += 1
        pos += 12 + size
    return count


def read_all(broker: Broker, topic: str, version: int, expected: int,
             p: LegacyParams) -> dict[str, Any]:
    stats = broker.stats()
    received = 0
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        cpu0 = stats.cpu_seconds()
        started = time.monotonic()
        for _ in range(p.repeats):
            received += _read_once(sock, topic, version, expected, p)
        seconds = time.monotonic() - started
        cpu = stats.cpu_seconds() - cpu0
    return {"messages": received, "seconds": seconds,
            "msgs_per_s": received / max(seconds, 1e-9), "broker_cpu_s": cpu,
            "broker_cpu_us_per_msg": cpu / received * 1e6}


def _read_once(sock: socket.socket, topic: str, version: int, expected: int,
               p: LegacyParams) -> int:
    received = 0
    offset = 0
    while received < expected:
        sock.sendall(_fetch_frame(version, topic, offset, p))
        (size,) = _I32.unpack(_read_exactly(sock, 4))
        error, records = _records_of(version, _read_exactly(sock, size))
        if error:
            raise RuntimeError(f"Fetch v{version} error {error} at offset {offset}")
        count, next_offset = _count_and_next(version, records)
        if not count:
            raise RuntimeError(f"Fetch v{version} returned nothing at offset {offset}")
        received += count
        offset = next_offset
    return received


def down_conversion(broker: Broker, p: LegacyParams) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, topic, compression in (("plain", "bench-legacy", "none"),
                                      ("gzip", "bench-legacy-gzip", "gzip")):
        ensure_topic(broker, topic, 1)
        _produce(broker, topic, p, compression)
        modern = read_all(broker, topic, 4, p.messages, p)
        out[f"{label}_v4"] = modern
        for version in (3, 1):
            legacy = read_all(broker, topic, version, p.messages, p)
            base = modern["broker_cpu_us_per_msg"]
            # None when the magic-2 read used less CPU than the clock can see
            legacy["cpu_ratio_to_magic2"] = legacy["broker_cpu_us_per_msg"] / base if base else None
            out[f"{label}_v{version}"] = legacy
    return out
