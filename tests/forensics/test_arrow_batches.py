"""The data source's Arrow batches, without a SparkSession: the same rows as the row decoder,
with and without the C loop, across chunk boundaries and damaged input."""

from __future__ import annotations

import gzip
import struct
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from forensics import datasource, grouplog
from forensics.datasource import ConsumerOffsetsReader, SegmentPartition, arrow_schema
from forensics.grouplog import COMMIT_BUFFERS, decode_segment, find_segments
from tests.forensics.test_grouplog import CASES, key_hex, segment
from tests.unit._batches import make_batch

V3 = struct.pack(">hqih", 3, 42, -1, 0) + struct.pack(">q", 1_700_000_000_123)


def commit_key(group: bytes, topic: bytes, partition: int = 7, version: int = 1) -> bytes:
    return (struct.pack(">hh", version, len(group)) + group + struct.pack(">h", len(topic))
            + topic + struct.pack(">i", partition))


def golden_pairs() -> list[tuple[bytes | None, bytes | None]]:
    """Every golden value with a key of its type, the tombstone keys, odd names, a null key."""
    pairs: list[tuple[bytes | None, bytes | None]] = []
    for case in CASES:
        value = None if case.get("tombstone") else bytes.fromhex(case["hex"])
        if case["record"].endswith("Value"):
            pairs.append((bytes.fromhex(key_hex(case["record"])), value))
        elif case.get("tombstone"):
            pairs.append((bytes.fromhex(case["hex"]), None))
    for group, topic in ((b"gr\xc3\xbcppe", b"t\xc3\xb6pic"), (b"bad\xff", b"t"),
                         (b"g", b"bad\xfe"), (b"", b""), (b"g", b"orders")):
        pairs.append((commit_key(group, topic), V3))
    pairs.append((None, V3))
    return pairs


def gzipped(plain: bytes) -> bytes:
    compressed = bytearray(plain[:61]) + gzip.compress(plain[61:])
    struct.pack_into(">h", compressed, 21, 1)  # attributes: gzip
    struct.pack_into(">i", compressed, 8, len(compressed) - 12)
    struct.pack_into(">I", compressed, 17, crc32c(bytes(compressed[21:])))
    return bytes(compressed)


def damaged_log(tmp_path: Path) -> Path:
    pairs = golden_pairs()
    golden = make_batch([v for _, v in pairs], keys=[k for k, _ in pairs])
    commits = [make_batch([V3] * 3, keys=[commit_key(b"g%d" % n, b"orders", n)] * 3,
                          base_offset=100 + 3 * n) for n in range(6)]
    bad = bytearray(commits[0])
    bad[-3] ^= 0xFF  # inside the CRC-covered bytes: one corrupt row, the rest skipped
    segment(tmp_path, golden, *commits, gzipped(commits[1]), partition=0)
    segment(tmp_path, *commits, bytes(bad), commits[2], partition=5)
    segment(tmp_path, commits[3], commits[4][:40], partition=9)  # a truncated tail
    return tmp_path


def as_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(as_tuples(v) for v in value.values())
    if isinstance(value, list):
        return [as_tuples(v) for v in value]
    return value


def arrow_rows(path: str, log_partition: int) -> list[tuple[object, ...]]:
    reader = ConsumerOffsetsReader("")
    rows = []
    for batch in reader.read(SegmentPartition(path, log_partition)):
        assert batch.schema.equals(arrow_schema())
        rows.extend(as_tuples(batch.to_pylist()))
    return sorted(rows, key=repr)


@pytest.mark.parametrize("c_loop", [True, False])
def test_arrow_batches_hold_the_rows_of_the_row_decoder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, c_loop: bool) -> None:
    if c_loop and grouplog._speedups is None:
        pytest.skip("the C loop was not built")
    if not c_loop:
        monkeypatch.setattr(grouplog, "_speedups", None)
    monkeypatch.setattr(datasource, "ROWS_PER_BATCH", 4)  # many chunks, boundaries inside
    segments = find_segments(damaged_log(tmp_path))
    assert len(segments) == 3
    kinds: set[object] = set()
    for path, log_partition in segments:
        expected = sorted((as_tuples(row) for row in decode_segment(path, log_partition)),
                          key=repr)
        assert arrow_rows(path, log_partition) == expected
        kinds.update(row[5] for row in expected)
    assert {"offset_commit", "group_metadata", "corrupt", "undecodable"} <= kinds


def columns_as_rows(head: tuple[str, int], buffers: list[bytearray], count: int
                    ) -> list[tuple[object, ...]]:
    """The commit rows of `batch_columns` buffers, in the row decoder's shape."""
    column = dict(zip(COMMIT_BUFFERS, buffers, strict=True))
    ints = {name: memoryview(data).cast("q" if len(data) == 8 * count else "i").tolist()
            for name, data in column.items() if not name.endswith(".data")
            and not name.endswith(".offsets")}

    def strings(name: str) -> list[str]:
        ends = memoryview(column[f"{name}.offsets"]).cast("i").tolist()
        data = bytes(column[f"{name}.data"])
        return [data[a:b].decode("utf-8") for a, b in pairwise(ends)]

    groups, topics = strings("group_id"), strings("topic")
    return [(*head, ints["position"][n], ints["offset"][n], ints["timestamp"][n],
             "offset_commit", ints["key_version"][n], 3, groups[n], topics[n],
             ints["partition"][n], ints["committed_offset"][n], ints["commit_timestamp"][n],
             -1, False, None, None, None, None, None, None, None)
            for n in range(count)]


@pytest.mark.skipif(grouplog._speedups is None, reason="the C loop was not built")
def test_the_column_loop_agrees_with_the_row_loop_on_cut_payloads() -> None:
    """Payloads cut short at 200 lengths: the commit rows in the buffers plus the records
    handed back are the row loop's items, and the problem text is the same."""
    pairs = golden_pairs()
    payload = make_batch([v for _, v in pairs], keys=[k for k, _ in pairs])[61:]
    for cut in range(0, len(payload), max(1, len(payload) // 200)):
        part = payload[:cut]
        rows, rows_error = grouplog._speedups.batch_rows(part, len(pairs), 100, 5, ("p", 3, 0))
        buffers = [bytearray(b"\0\0\0\0") if name.endswith(".offsets") else bytearray()
                   for name in COMMIT_BUFFERS]
        added, others, error = grouplog._speedups.batch_columns(part, len(pairs), 100, 5, 0,
                                                                buffers)
        assert error == rows_error, cut
        expected = [row for row in rows if len(row) > 4]
        assert columns_as_rows(("p", 3), buffers, added) == expected, cut
        assert others == [item for item in rows if len(item) == 4], cut
