"""Committed offsets survive broker restarts and crashes, and a damaged group log is refused.

* Each stock client consumes, commits, consumes more without committing, and closes; the broker
  is restarted (SIGTERM, or SIGKILL with no chance to flush); a new consumer of the same group
  gets exactly the records after the last commit: none lost, none re-delivered from before it.
* Crash loop: committer processes (`workers/offset_committer.py`) commit ever higher offsets of
  one partition each and fsync a record of every acknowledged offset; the broker, with small
  group-log segments and a cleaner running every 50 ms, is SIGKILLed at random moments and
  restarted on the same data directory; after every restart each partition's committed offset
  must be at least the last acknowledged one. (SIGKILL keeps the page cache, so this checks
  that nothing is acknowledged before it is written and that recovery and compaction lose
  nothing; that the fsync comes first is checked in
  `tests/integration/test_group_runtime_durability.py`.)
* A flipped byte in a group-log segment stops the start-up with the file and byte position;
  `--repair` cuts out the damaged batch, keeps the batches after it, says what it dropped, and
  starts.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.grouplog.placement import partition_for
from storage.batch import scan_batches
from tests.broker_process import BrokerProcess
from tests.integration.workers.offset_committer import WireClient

pytestmark = pytest.mark.integration

CLIENTS = ("confluent", "kafka-python", "aiokafka")
PARTITIONS = 3
TOPIC = "orders"
COMMITTER = Path(__file__).resolve().parent / "workers" / "offset_committer.py"
OFFSETS_PARTITIONS = 50  # the broker default, offsets.topic.num.partitions


def create_topic(broker: BrokerProcess, name: str = TOPIC, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)])
    futures[name].result(10)


def produce(broker: BrokerProcess, values: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value.encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


# -- one consumer session per client ------------------------------------------------------------
#
# A plan is a list of steps run in order by one consumer of the group: ("read", n) polls until n
# more records arrived, ("commit", None) commits the consumed positions synchronously,
# ("produce", values) produces, ("drain", seconds) keeps polling to catch anything extra.
# Every record read is returned. The consumer closes without committing.

Plan = list[tuple[str, Any]]
READ_TIMEOUT_S = 30.0


def run_plan(client: str, broker: BrokerProcess, group: str, plan: Plan) -> list[str]:
    runners: dict[str, Callable[[BrokerProcess, str, Plan], list[str]]] = {
        "confluent": _confluent, "kafka-python": _kafka_python,
        "aiokafka": lambda b, g, p: asyncio.run(_aiokafka(b, g, p)),
    }
    return runners[client](broker, group, plan)


def _steps(broker: BrokerProcess, plan: Plan, poll: Callable[[], list[str]],
           commit: Callable[[], None]) -> list[str]:
    got: list[str] = []
    for step, arg in plan:
        if step == "read":
            want = len(got) + arg
            deadline = time.monotonic() + READ_TIMEOUT_S
            while len(got) < want:
                assert time.monotonic() < deadline, f"read {len(got)} of {want}: {got}"
                got.extend(poll())
        elif step == "commit":
            commit()
        elif step == "produce":
            produce(broker, arg)
        else:
            deadline = time.monotonic() + arg
            while time.monotonic() < deadline:
                got.extend(poll())
    return got


def _confluent(broker: BrokerProcess, group: str, plan: Plan) -> list[str]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([TOPIC])

    def poll() -> list[str]:
        values = []
        for message in consumer.consume(100, timeout=0.2):
            assert message.error() is None, message.error()
            values.append((message.value() or b"").decode())
        return values

    try:
        def commit() -> None:
            consumer.commit(asynchronous=False)

        return _steps(broker, plan, poll, commit)
    finally:
        consumer.close()


def _kafka_python(broker: BrokerProcess, group: str, plan: Plan) -> list[str]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=500)
    consumer.subscribe([TOPIC])
    # kafka-python 3.0.12 can abandon a rejoin that its own metadata check started (see
    # workers/group_consumer.py): joining before it knows the topic's partitions, the leader
    # assigns nothing, rejoins when the partitions arrive, and if a short poll() times out inside
    # that round the member never takes its assignment nor heartbeats again. Learning the
    # topic's metadata before the first poll makes the first assignment the final one.
    deadline = time.monotonic() + READ_TIMEOUT_S
    while TOPIC not in consumer.topics():
        assert time.monotonic() < deadline, f"no metadata for {TOPIC}"
        time.sleep(0.1)

    def poll() -> list[str]:
        return [r.value.decode() for records in consumer.poll(timeout_ms=200).values()
                for r in records]

    try:
        return _steps(broker, plan, poll, consumer.commit)
    finally:
        consumer.close(autocommit=False)


async def _aiokafka(broker: BrokerProcess, group: str, plan: Plan) -> list[str]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=6000, heartbeat_interval_ms=500)
    await consumer.start()
    loop = asyncio.get_running_loop()

    def poll() -> list[str]:
        batches = asyncio.run_coroutine_threadsafe(consumer.getmany(timeout_ms=200), loop)
        return [r.value.decode() for records in batches.result().values() for r in records]

    def commit() -> None:
        asyncio.run_coroutine_threadsafe(consumer.commit(), loop).result()

    try:
        return await loop.run_in_executor(None, _steps, broker, plan, poll, commit)
    finally:
        await consumer.stop()


@pytest.mark.parametrize("restart", ["graceful", "sigkill"])
@pytest.mark.parametrize("client", CLIENTS)
def test_the_group_resumes_from_its_last_commit_after_a_restart(
    tmp_path: Path, client: str, restart: str,
) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker)
        first = [f"a{i}" for i in range(60)]
        after_commit = [f"b{i}" for i in range(30)]
        produce(broker, first)
        read = run_plan(client, broker, "resume", [
            ("read", len(first)), ("commit", None), ("produce", after_commit),
            ("read", len(after_commit))])
        assert sorted(read) == sorted(first + after_commit)

        if restart == "graceful":
            broker.stop()
        else:
            broker.kill()
        broker.start()

        again = run_plan(client, broker, "resume", [("read", len(after_commit)),
                                                    ("drain", 1.0)])
        assert sorted(again) == sorted(after_commit)  # exactly what followed the last commit
    finally:
        broker.stop()


# -- crash loop --------------------------------------------------------------------------------

CRASH_CYCLES = 20
CRASH_GROUP = "crash-loop"


def last_acked(path: Path) -> int:
    """The last offset the committer recorded (a line being written is not counted)."""
    if not path.exists():
        return 0
    text = path.read_text(encoding="ascii")
    lines = text.split("\n")[:-1]  # whatever follows the last newline is incomplete
    return int(lines[-1]) if lines else 0


def count_acked(path: Path) -> int:
    return path.read_text(encoding="ascii").count("\n") if path.exists() else 0


def committed_offsets(broker: BrokerProcess, group: str, partitions: int,
                      timeout: float = 15.0) -> dict[int, int]:
    """OffsetFetch, retried while the group log is still loading."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = WireClient("127.0.0.1", broker.port)
            try:
                found = client.offset_fetch(group, TOPIC, list(range(partitions)))
            finally:
                client.close()
            if all(error == 0 for _, error in found.values()):
                return {p: offset for p, (offset, _) in found.items()}
        except OSError:
            pass
        assert time.monotonic() < deadline, "OffsetFetch kept failing"
        time.sleep(0.05)


@pytest.fixture
def committers(tmp_path: Path) -> Iterator[Callable[[BrokerProcess], list[Path]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(broker: BrokerProcess) -> list[Path]:
        paths = []
        for partition in range(PARTITIONS):
            acks = tmp_path / f"acks-{partition}.txt"
            paths.append(acks)
            log = open(tmp_path / f"committer-{partition}.log", "wb")  # noqa: SIM115
            procs.append(subprocess.Popen(
                [sys.executable, str(COMMITTER), "--bootstrap", broker.bootstrap,
                 "--group", CRASH_GROUP, "--topic", TOPIC, "--partition", str(partition),
                 "--acks", str(acks)], stdout=log, stderr=log))
            log.close()
        return paths

    try:
        yield start
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_no_acknowledged_commit_is_lost_when_the_broker_is_killed(
    tmp_path: Path, committers: Callable[[BrokerProcess], list[Path]],
) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    # Small segments and a busy cleaner: kills also land in the middle of compactions.
    broker = BrokerProcess(tmp_path / "data", settings={"offsets.topic.segment.bytes": "16384",
                                                        "log.cleaner.backoff.ms": "50"}).start()
    create_topic(broker)
    acks = committers(broker)
    checked = 0
    try:
        for cycle in range(CRASH_CYCLES):
            before = [count_acked(p) for p in acks]
            run_for = rng.uniform(0.1, 0.8)
            deadline = time.monotonic() + 10
            # let the committers get through at least one commit each after the (re)start
            while any(count_acked(p) <= n for p, n in zip(acks, before, strict=True)):
                assert time.monotonic() < deadline, f"cycle {cycle}: no commits acknowledged"
                time.sleep(0.01)
            time.sleep(run_for)
            broker.kill()
            time.sleep(0.05)  # a response already on its way may still be recorded
            acknowledged = [last_acked(p) for p in acks]
            broker.start()
            recovered = committed_offsets(broker, CRASH_GROUP, PARTITIONS)
            for partition, acked in enumerate(acknowledged):
                assert recovered[partition] >= acked, (
                    f"cycle {cycle}: partition {partition} recovered {recovered[partition]} "
                    f"but {acked} was acknowledged\n{broker.log_text()[-2000:]}")
            checked += 1
    finally:
        broker.stop()
    total = sum(count_acked(p) for p in acks)
    compactions = broker.log_text().count('"group log compacted"')
    print(f"crash loop: {checked} SIGKILL cycles, {total} acknowledged commits, none lost; "
          f"{compactions} segment compactions")
    assert checked == CRASH_CYCLES and total > CRASH_CYCLES * PARTITIONS
    assert compactions > 0


# -- damage ------------------------------------------------------------------------------------


COORDINATOR_LOAD_IN_PROGRESS = 14


def commit_many(broker: BrokerProcess, group: str, count: int, timeout: float = 15.0) -> None:
    """Commit offsets 1..count, waiting out the group log's loading right after the start
    (COORDINATOR_LOAD_IN_PROGRESS), as a client retries it."""
    deadline = time.monotonic() + timeout
    client = WireClient("127.0.0.1", broker.port)
    try:
        for offset in range(1, count + 1):
            error = client.offset_commit(group, TOPIC, 0, offset)
            while error == COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
                time.sleep(0.05)
                error = client.offset_commit(group, TOPIC, 0, offset)
            assert error == 0
    finally:
        client.close()


def flip_a_byte_in_the_middle(segment: Path) -> int:
    """Flip a record byte of the middle batch; returns that batch's byte position."""
    data = bytearray(segment.read_bytes())
    batches, _, error = scan_batches(data)
    assert error is None and len(batches) > 2
    start = batches[len(batches) // 2][0]
    data[start + 70] ^= 0x01  # inside the records, covered by the CRC
    segment.write_bytes(bytes(data))
    return start


def group_log_dir(broker: BrokerProcess, group: str) -> Path:
    return broker.data_dir / f"__consumer_offsets-{partition_for(group, OFFSETS_PARTITIONS)}"


@pytest.mark.parametrize("where", ["active", "sealed"])
def test_a_damaged_group_log_stops_the_start_and_repair_cuts_out_only_the_damage(
    tmp_path: Path, where: str,
) -> None:
    settings = {"offsets.topic.segment.bytes": "16384"} if where == "sealed" else {}
    broker = BrokerProcess(tmp_path / "data", settings=settings).start()
    create_topic(broker)
    commit_many(broker, "damaged", 400)
    broker.stop()
    segments = sorted(group_log_dir(broker, "damaged").glob("*.log"))
    assert len(segments) > 2 if where == "sealed" else len(segments) == 1
    segment = segments[0]
    position = flip_a_byte_in_the_middle(segment)

    with pytest.raises(RuntimeError) as refused:
        broker.start()
    assert f"{segment}: corrupt log at byte {position}" in str(refused.value)

    broker.flags = ["--repair"]
    broker.start()
    try:
        recovered = committed_offsets(broker, "damaged", 1)[0]
        assert recovered == 400  # only the damaged batch is lost: the later commits are kept
        assert "repair dropped damaged bytes" in broker.log_text()
        commit_many(broker, "damaged", 3)  # and the broker serves commits again
    finally:
        broker.stop()
