"""Many connections with parked requests closing at once: is the broker's work linear in them?

    python -m tests.bench.close_storm --connections 2000 --connections 10000

For each count N, one broker (group.initial.rebalance.delay.ms 60 s, so JoinGroups park) gets N
connections: half park a Fetch (60 s max wait at the end of an empty partition), half park a
JoinGroup (groups of 10). Then every client socket is reset at once, and the broker's CPU is
measured from the first reset until it is idle again and answers an ApiVersions probe.
Linear handling shows as a flat CPU cost per closed connection across the counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.bench.brokers import _CLK_TCK
from tests.bench.wire import encode
from tests.broker_process import BrokerProcess
from tests.integration.group_workers import create_topic

TOPIC = "storm"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    rest = data[data.rindex(b")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / _CLK_TCK


def fetch_frame() -> bytes:
    return bytes(encode(1, 5, {
        "replica_id": -1, "max_wait": timedelta(seconds=60), "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{"topic": TOPIC, "partitions": [{
            "partition": 0, "fetch_offset": 0, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}],
    }))


def join_frame(group: str) -> bytes:
    return bytes(encode(11, 3, {
        "group_id": group, "session_timeout": timedelta(seconds=60),
        "rebalance_timeout": timedelta(seconds=60), "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00"}],
    }))


async def open_parked(port: int, count: int) -> list[socket.socket]:
    fetch = fetch_frame()
    sockets: list[socket.socket] = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(fetch if i % 2 == 0 else join_frame(f"storm-{i // 20}"))
        sockets.append(sock)
        if i % 200 == 199:
            await asyncio.sleep(0)
    return sockets


def probe(port: int) -> None:
    request = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        sock.recv(size, socket.MSG_WAITALL)


def storm(count: int, work_dir: Path) -> dict[str, Any]:
    broker = BrokerProcess(work_dir / f"data-{count}",
                           settings={"group.initial.rebalance.delay.ms": "60000"})
    broker.start(timeout=30)
    assert broker.proc is not None
    pid = broker.proc.pid
    try:
        create_topic(broker, TOPIC, 1)
        sockets = asyncio.run(open_parked(broker.port, count))
        # Wait until the broker is idle with everything parked.
        previous = -1.0
        while (now := cpu_seconds(pid)) != previous:
            previous = now
            time.sleep(0.5)
        cpu_before = cpu_seconds(pid)
        started = time.monotonic()
        for sock in sockets:
            sock.close()  # SO_LINGER 0: a reset, all at once
        probe(broker.port)
        answered_s = time.monotonic() - started
        previous = -1.0
        while (now := cpu_seconds(pid)) != previous:
            previous = now
            time.sleep(0.3)
        cpu = cpu_seconds(pid) - cpu_before
        return {"connections": count, "probe_answered_s": round(answered_s, 3),
                "broker_cpu_s": round(cpu, 3),
                "broker_cpu_us_per_connection": round(cpu / count * 1e6, 1)}
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.close_storm")
    parser.add_argument("--connections", type=int, action="append", default=[])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="close-storm-") as tmp:
        results = [storm(n, Path(tmp)) for n in args.connections or [2000, 10000]]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
