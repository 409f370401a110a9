"""Legacy message sets (magic 0/1, uncompressed and gzip) against kafka-python's encoder.

`legacy_message_sets.json` was recorded with kafka-python's `LegacyRecordBatchBuilder`
(`record_legacy_vectors.py`). Checked byte for byte:

* our encoder writes every uncompressed vector exactly, and the inner message set of every
  compressed one exactly (gzip output itself is not canonical: kafka-python stamps the time in
  its gzip header, so the compressed bytes are compared after decompression, and the wrapper
  around them is re-encoded exactly);
* our reader decodes every vector to its messages;
* up-converting a vector to a magic-2 batch and down-converting it back to the same magic gives
  the vector again (uncompressed), or a wrapper whose inner messages are the vector's (gzip).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from storage.legacy import (
    CODEC_GZIP,
    encode_message,
    inner_messages,
    read_message_set,
)
from storage.legacy_convert import down_convert, up_convert

VECTORS = json.loads(Path(__file__).with_name("legacy_message_sets.json").read_text())
CASES = VECTORS["cases"]
UNCOMPRESSED = [c for c in CASES if c["codec"] == "none"]
COMPRESSED = [c for c in CASES if c["codec"] == "gzip"]


def _expected(case: dict[str, Any]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(m["offset"], m["timestamp"],
             None if m["key"] is None else bytes.fromhex(m["key"]),
             None if m["value"] is None else bytes.fromhex(m["value"]))
            for m in case["messages"]]


def _encode_all(case: dict[str, Any]) -> bytes:
    magic = case["magic"]
    return b"".join(encode_message(offset, magic, 0, timestamp, key, value)
                    for offset, timestamp, key, value in _expected(case))


def test_vectors_cover_both_magics_and_codecs() -> None:
    assert {(c["magic"], c["codec"]) for c in CASES} == {
        (0, "none"), (1, "none"), (0, "gzip"), (1, "gzip")}


@pytest.mark.parametrize("case", UNCOMPRESSED, ids=lambda c: c["name"])
def test_uncompressed_encoding_is_byte_identical(case: dict[str, Any]) -> None:
    assert _encode_all(case).hex() == case["hex"]


@pytest.mark.parametrize("case", UNCOMPRESSED, ids=lambda c: c["name"])
def test_uncompressed_decoding(case: dict[str, Any]) -> None:
    messages = read_message_set(bytes.fromhex(case["hex"]))
    assert [(m.offset, m.timestamp, m.key, m.value) for m in messages] == _expected(case)
    assert {m.magic for m in messages} == {case["magic"]}


@pytest.mark.parametrize("case", COMPRESSED, ids=lambda c: c["name"])
def test_compressed_wrapper_and_inner_set_are_byte_identical(case: dict[str, Any]) -> None:
    data = bytes.fromhex(case["hex"])
    (wrapper,) = read_message_set(data)
    assert wrapper.codec == CODEC_GZIP and wrapper.key is None
    assert wrapper.value is not None
    # The inner message set, as kafka-python wrote it before compressing, is ours exactly.
    assert gzip.decompress(wrapper.value) == _encode_all(case)
    # And so is the wrapper around the recorded compressed payload.
    assert encode_message(wrapper.offset, wrapper.magic, wrapper.attributes, wrapper.timestamp,
                          None, wrapper.value) == data
    inner = inner_messages(wrapper)
    assert [(m.offset, m.timestamp, m.key, m.value) for m in inner] == _expected(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_up_conversion_keeps_every_message(case: dict[str, Any]) -> None:
    batch = up_convert(bytes.fromhex(case["hex"]))
    records = list(DefaultRecordBatch(batch))
    assert [(r.offset, r.timestamp if case["magic"] else -1, r.key, r.value)
            for r in records] == [
        (o, t, k, v) for o, t, k, v in _expected(case)]
    assert DefaultRecordBatch(batch).validate_crc()
    assert DefaultRecordBatch(batch).compression_type == (1 if case["codec"] == "gzip" else 0)


@pytest.mark.parametrize("case", UNCOMPRESSED, ids=lambda c: c["name"])
def test_round_trip_through_magic_2_gives_the_vector_back(case: dict[str, Any]) -> None:
    batch = up_convert(bytes.fromhex(case["hex"]))
    assert down_convert(batch, case["magic"], 0, 1 << 20).hex() == case["hex"]


@pytest.mark.parametrize("case", COMPRESSED, ids=lambda c: c["name"])
def test_round_trip_of_compressed_vector(case: dict[str, Any]) -> None:
    batch = up_convert(bytes.fromhex(case["hex"]))
    converted = down_convert(batch, case["magic"], 0, 1 << 20)
    (wrapper,) = read_message_set(converted)
    last = case["messages"][-1]
    assert wrapper.offset == last["offset"]  # the wrapper carries the last offset
    assert wrapper.value is not None
    assert gzip.decompress(wrapper.value) == _encode_all(case)
    if case["magic"]:
        assert wrapper.timestamp == max(m["timestamp"] for m in case["messages"])
    # kafka-python reads our wrapper back to the same messages, CRCs valid.
    records = MemoryRecords(converted)
    batch_read = records.next_batch()
    assert batch_read.validate_crc()
    assert [(r.offset, r.key, r.value) for r in batch_read] == [
        (o, k, v) for o, _, k, v in _expected(case)]
