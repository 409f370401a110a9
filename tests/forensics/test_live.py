"""The group log read from a live cluster over the Kafka protocol: the real broker is the
cluster, stock librdkafka consumers make the groups and commits, and the tables must be the
ones that the same broker's `__consumer_offsets-*` directories give."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pyarrow.parquet as pq
import pytest

from forensics.cli import main
from forensics.job import TABLES, run
from forensics.live import (
    OFFSETS_TOPIC,
    LiveSource,
    LiveSourceError,
    OffsetRange,
    plan,
    read_range,
)
from tests.broker_process import BrokerProcess, free_port
from tests.integration.group_workers import create_topic, produce

pytestmark = pytest.mark.integration

TOPIC = "orders"
PARTITIONS = 4


class _Member(threading.Thread):
    """A librdkafka consumer in a thread that commits every record it reads, synchronously."""

    def __init__(self, bootstrap: str, group: str, client_id: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range"})
        self.assigned: list[int] = []
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign)
        self.committed = 0
        self.stop = threading.Event()

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.assigned = [p.partition for p in partitions]

    def run(self) -> None:
        while not self.stop.is_set():
            message = self.consumer.poll(0.1)
            if message is not None and message.error() is None:
                self.consumer.commit(message=message, asynchronous=False)
                self.committed += 1
        self.consumer.close()  # LeaveGroup

    def finish(self) -> None:
        self.stop.set()
        self.join(15)


def _until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The broker after two groups' life: `billing` (a member, a second joining, the second
    leaving) and `audit` (one member), every record committed."""
    work = tmp_path_factory.mktemp("live")
    broker = BrokerProcess(work / "data").start()
    try:
        create_topic(broker, TOPIC, PARTITIONS)
        produce(broker, TOPIC, (f"order-{n}" for n in range(40)), PARTITIONS)
        first = _Member(broker.bootstrap, "billing", "first")
        first.start()
        _until(lambda: first.committed >= 10, 30, "the first member's commits")
        second = _Member(broker.bootstrap, "billing", "second")
        second.start()
        _until(lambda: second.assigned and len(first.assigned) < PARTITIONS, 30,
               "the second member's assignment")
        produce(broker, TOPIC, (f"order-{n}" for n in range(40, 80)), PARTITIONS)
        _until(lambda: first.committed + second.committed >= 80 and second.committed, 30,
               "both members' commits")
        second.finish()
        produce(broker, TOPIC, (f"order-{n}" for n in range(80, 100)), PARTITIONS)
        _until(lambda: first.committed + second.committed >= 100, 30, "commits after leaving")
        audit = _Member(broker.bootstrap, "audit", "auditor")
        audit.start()
        _until(lambda: audit.committed >= 100, 30, "the audit group's commits")
        audit.finish()
        first.finish()
        yield broker
    finally:
        broker.stop()


def _kafka_log_dir(broker: BrokerProcess, target: Path) -> Path:
    """The broker's `__consumer_offsets-*` directories alone, as a Kafka log directory."""
    target.mkdir()
    for directory in broker.data_dir.glob("__consumer_offsets-*"):
        shutil.copytree(directory, target / directory.name)
    return target


def _rows(out: Path, table: str) -> list[dict[str, Any]]:
    path = out / table
    if not path.exists():
        return []
    rows = pq.read_table(path).to_pylist()
    return sorted(rows, key=repr)


def test_the_live_source_reads_every_record_the_segments_hold(cluster: BrokerProcess) -> None:
    from forensics.grouplog import GROUP_LOG_COLUMNS, decode_segment, find_segments

    on_disk = [row for path, p in find_segments(cluster.data_dir)
               for row in decode_segment(path, p)]
    ranges = plan(cluster.bootstrap, OFFSETS_TOPIC, {})
    live = [row for r in ranges for rows in read_range(cluster.bootstrap, OFFSETS_TOPIC, {}, r)
            for row in rows]
    assert len(ranges) == 50 and sum(r.records for r in ranges) >= len(live)
    skip = {GROUP_LOG_COLUMNS.index("source_file"), GROUP_LOG_COLUMNS.index("position")}

    def key(row: tuple[object, ...]) -> tuple[object, ...]:
        return tuple(v for i, v in enumerate(row) if i not in skip)

    assert sorted(map(key, live), key=repr) == sorted(map(key, on_disk), key=repr)
    assert {row[5] for row in live} == {"offset_commit", "group_metadata"}


def test_the_c_loop_gives_the_rows_the_python_path_gives(cluster: BrokerProcess) -> None:
    """The data source's chunks (commits unpacked by the C loop into column buffers, when it
    is built) hold the same rows as `read_range`'s Python rows."""
    import pyarrow as pa

    from forensics.datasource import _commit_batch, _record_batch, arrow_schema
    from forensics.grouplog import GROUP_LOG_COLUMNS, CommitColumns
    from forensics.live import read_range_chunks

    schema = arrow_schema()
    for r in plan(cluster.bootstrap, OFFSETS_TOPIC, {}):
        rows = [row for rows in read_range(cluster.bootstrap, OFFSETS_TOPIC, {}, r)
                for row in rows]
        chunked: list[tuple[object, ...]] = []
        for chunk in read_range_chunks(cluster.bootstrap, OFFSETS_TOPIC, {}, r, 16):
            batch = (_commit_batch(pa, schema, chunk) if isinstance(chunk, CommitColumns)
                     else _record_batch(pa, schema, chunk))
            chunked.extend(tuple(d[c] for c in GROUP_LOG_COLUMNS) for d in batch.to_pylist())
        as_arrow = _record_batch(pa, schema, rows).to_pylist() if rows else []
        assert sorted(chunked, key=repr) == sorted(
            (tuple(d[c] for c in GROUP_LOG_COLUMNS) for d in as_arrow), key=repr)


def test_bounds_pick_offsets(cluster: BrokerProcess) -> None:
    everything = [r for r in plan(cluster.bootstrap, OFFSETS_TOPIC, {}) if r.records]
    busiest = max(everything, key=lambda r: r.records)
    bounded = {r.partition: r for r in plan(
        cluster.bootstrap, OFFSETS_TOPIC, {},
        starting={busiest.partition: busiest.start + 3}, ending={busiest.partition: 10**9})}
    assert bounded[busiest.partition] == OffsetRange(busiest.partition, busiest.start + 3,
                                                     busiest.end)
    rows = [row for rows in read_range(cluster.bootstrap, OFFSETS_TOPIC, {},
                                       OffsetRange(busiest.partition, busiest.start + 3,
                                                   busiest.start + 5)) for row in rows]
    assert [row[3] for row in rows] == [busiest.start + 3, busiest.start + 4]
    latest = plan(cluster.bootstrap, OFFSETS_TOPIC, {}, starting=-1)
    assert not any(r.records for r in latest)


def test_bounds_pick_times(cluster: BrokerProcess) -> None:
    """A time bound is each partition's first offset at or after it (ListOffsets by time)."""
    everything = [r for r in plan(cluster.bootstrap, OFFSETS_TOPIC, {}) if r.records]
    busiest = max(everything, key=lambda r: r.records)
    stamped = [(cast(int, row[3]), cast(int, row[4])) for rows in read_range(
        cluster.bootstrap, OFFSETS_TOPIC, {}, busiest) for row in rows]  # (offset, time)
    at = stamped[len(stamped) // 2][1]
    first_at = min(offset for offset, ts in stamped if ts >= at)
    timed = {r.partition: r for r in plan(cluster.bootstrap, OFFSETS_TOPIC, {}, starting_ms=at)}
    assert timed[busiest.partition] == OffsetRange(busiest.partition, first_at, busiest.end)
    before = {r.partition: r for r in plan(cluster.bootstrap, OFFSETS_TOPIC, {},
                                           ending_ms=at)}
    assert before[busiest.partition] == OffsetRange(busiest.partition, busiest.start,
                                                     first_at)
    later = plan(cluster.bootstrap, OFFSETS_TOPIC, {}, starting_ms=int(time.time() * 1000)
                 + 3_600_000)
    assert not any(r.records for r in later)


def test_live_tables_match_the_log_directory_tables(spark: Any, cluster: BrokerProcess,
                                                    tmp_path: Path) -> None:
    """The job on the live cluster and on a copy of the same broker's offsets directories
    (both without the journal) writes the same tables, row for row."""
    kafka_dir = _kafka_log_dir(cluster, tmp_path / "kafka")
    on_disk = run(spark, kafka_dir, tmp_path / "from-disk", timelines=0)
    ranges = tuple(plan(cluster.bootstrap, OFFSETS_TOPIC, {}))
    source = LiveSource(cluster.bootstrap, OFFSETS_TOPIC, {}, ranges)
    live = run(spark, None, tmp_path / "from-cluster", timelines=0, live=source)
    assert on_disk.rebalances == live.rebalances >= 3
    assert on_disk.groups == live.groups == 2
    for table in TABLES:
        assert _rows(tmp_path / "from-cluster", table) == _rows(tmp_path / "from-disk", table), \
            table
    rebalances = _rows(tmp_path / "from-cluster", "rebalances")
    assert {"member_join", "member_left"} <= {r["cause"] for r in rebalances}
    commits = _rows(tmp_path / "from-cluster", "commits")
    assert {(r["group_id"], r["topic"]) for r in commits} == {("billing", TOPIC),
                                                              ("audit", TOPIC)}
    page = (tmp_path / "from-cluster" / "report.html").read_text("utf-8")
    assert f"kafka://{cluster.bootstrap}/{OFFSETS_TOPIC}" in page


def test_the_command_line_reads_a_live_cluster(spark: Any, cluster: BrokerProcess,
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bootstrap-server", cluster.bootstrap, "--out", str(tmp_path / "out"),
                 "--timelines", "0", "--consumer-property", "client.id=forensics-test"]) == 0
    assert "rebalances in 2 groups" in capsys.readouterr().out
    assert (tmp_path / "out" / "rebalances" / "_SUCCESS").exists()


def test_a_topic_that_is_not_an_offsets_topic_gets_one_line(
        cluster: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bootstrap-server", cluster.bootstrap, "--topic", TOPIC,
                 "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a __consumer_offsets topic" in err
    assert main(["--bootstrap-server", cluster.bootstrap, "--topic", "no-such-topic",
                 "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-topic" in err
    assert not (tmp_path / "out").exists()


def test_an_unreachable_cluster_gets_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    assert main(["--bootstrap-server", bootstrap, "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and bootstrap in err and "Traceback" not in err
    assert "cannot connect" in err and time.monotonic() - started < 10
    with pytest.raises(LiveSourceError):
        plan(f"{bootstrap},127.0.0.1:{free_port()}", OFFSETS_TOPIC, {})


def test_follow_reads_only_new_records_and_shows_a_new_rebalance(
        spark: Any, cluster: BrokerProcess, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--follow --once` on the live cluster, a new member joining, and `--follow --once`
    again: the second micro-batch holds exactly the new records (the checkpoint), and the
    report has the new rebalance. Runs last: it changes the cluster's history."""
    out = tmp_path / "out"
    args = ["--bootstrap-server", cluster.bootstrap, "--out", str(out), "--timelines", "0",
            "--follow", "--once"]
    assert main(args) == 0
    before = _rows(out, "rebalances")
    first_total = sum(r.records for r in plan(cluster.bootstrap, OFFSETS_TOPIC, {}))
    assert pq.read_table(out / "_group_log" / "batch_id=0").num_rows == first_total

    newcomer = _Member(cluster.bootstrap, "billing", "newcomer")
    newcomer.start()
    produce(cluster, TOPIC, (f"order-{n}" for n in range(100, 104)), PARTITIONS)
    _until(lambda: newcomer.committed >= 4, 30, "the newcomer's commits")
    newcomer.finish()
    total = sum(r.records for r in plan(cluster.bootstrap, OFFSETS_TOPIC, {}))

    assert main(args) == 0
    assert "batch 1:" in capsys.readouterr().out
    assert pq.read_table(out / "_group_log" / "batch_id=1").num_rows == total - first_total
    after = _rows(out, "rebalances")
    joined = [r for r in after if r not in before and "newcomer" in (r["members_joined"] or [])]
    assert joined and len(after) > len(before)
