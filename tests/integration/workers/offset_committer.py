"""Commit ever higher offsets for one partition as fast as the broker acknowledges them.

Run as a script: `python offset_committer.py --bootstrap HOST:PORT --group G --topic T
--partition P --acks FILE`. It speaks the Kafka wire protocol itself (OffsetCommit v2, a
standalone commit: generation -1, no member id), so nothing sits between an acknowledgement and
the record of it: after every commit answered with error NONE it appends the offset to FILE and
fsyncs FILE before sending the next one. Refused commits, lost connections and a dead broker
are retried forever (the test kills the broker on purpose); the offset still moves on, so every
acknowledged offset is larger than all earlier ones.

`offset_fetch` is the matching OffsetFetch v1 request, for the test that checks the broker.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import time

OFFSET_COMMIT = 8
OFFSET_FETCH = 9


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


class WireClient:
    """One connection, one request in flight. Raises `OSError` when the connection breaks."""

    def __init__(self, host: str, port: int, timeout: float = 2.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation_id += 1
        header = struct.pack(">hhi", api_key, version, self.correlation_id) + _string("committer")
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._read(4))[0]
        response = self._read(size)
        if struct.unpack_from(">i", response)[0] != self.correlation_id:
            raise OSError("correlation id mismatch")
        return response[4:]

    def _read(self, size: int) -> bytes:
        parts = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise OSError("connection closed by the broker")
            parts.append(chunk)
            size -= len(chunk)
        return b"".join(parts)

    def offset_commit(self, group: str, topic: str, partition: int, offset: int) -> int:
        """OffsetCommit v2 of one partition; returns its error code."""
        body = (_string(group) + struct.pack(">i", -1) + _string("") + struct.pack(">q", -1)
                + struct.pack(">i", 1) + _string(topic)
                + struct.pack(">iiqh", 1, partition, offset, -1))
        response = self.request(OFFSET_COMMIT, 2, body)
        # topics[1]: name, partitions[1]: partition, error
        pos = 4
        name_length = struct.unpack_from(">h", response, pos)[0]
        pos += 2 + name_length + 4
        _partition, error = struct.unpack_from(">ih", response, pos)
        return int(error)

    def offset_fetch(self, group: str, topic: str, partitions: list[int]
                     ) -> dict[int, tuple[int, int]]:
        """OffsetFetch v1: partition -> (committed offset, error code)."""
        body = (_string(group) + struct.pack(">i", 1) + _string(topic)
                + struct.pack(">i", len(partitions))
                + b"".join(struct.pack(">i", p) for p in partitions))
        response = self.request(OFFSET_FETCH, 1, body)
        found: dict[int, tuple[int, int]] = {}
        pos = 0
        (topics,) = struct.unpack_from(">i", response, pos)
        pos += 4
        for _ in range(topics):
            name_length = struct.unpack_from(">h", response, pos)[0]
            pos += 2 + name_length
            (count,) = struct.unpack_from(">i", response, pos)
            pos += 4
            for _ in range(count):
                partition, offset, metadata_length = struct.unpack_from(">iqh", response, pos)
                pos += 14 + max(metadata_length, 0)
                (error,) = struct.unpack_from(">h", response, pos)
                pos += 2
                found[partition] = (offset, error)
        return found


def run(host: str, port: int, group: str, topic: str, partition: int, acks_path: str) -> None:
    acks = open(acks_path, "a", encoding="ascii")  # noqa: SIM115 - lives as long as the process
    client: WireClient | None = None
    offset = 0
    while True:
        offset += 1
        try:
            if client is None:
                client = WireClient(host, port)
            error = client.offset_commit(group, topic, partition, offset)
        except OSError:
            if client is not None:
                client.close()
                client = None
            time.sleep(0.01)
            continue
        if error == 0:
            acks.write(f"{offset}\n")
            acks.flush()
            os.fsync(acks.fileno())
        else:
            time.sleep(0.005)  # loading or failing over: try the next offset shortly


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, required=True)
    parser.add_argument("--acks", required=True)
    args = parser.parse_args()
    host, port = args.bootstrap.rsplit(":", 1)
    run(host, int(port), args.group, args.topic, args.partition, args.acks)


if __name__ == "__main__":
    main()
