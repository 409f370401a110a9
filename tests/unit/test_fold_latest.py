"""The group log's replay fold: the C loop gives the same dict, in the same order, as the Python
reference, and fails where it fails."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import record_batch
from storage.record_batch import _fold_latest_py, encode_batch
from storage.transactions import encode_control_batch

needs_c = pytest.mark.skipif(record_batch._fold_latest_c is None,
                             reason="the C speedups were not built")

keys = st.sampled_from([b"a", b"b", b"group-1", b"\x00\x01" * 70, b""])
values = st.one_of(st.none(), st.binary(max_size=300))
batches = st.lists(st.lists(st.tuples(keys, values), min_size=1, max_size=20),
                   min_size=1, max_size=6)


def _chunk(runs: list[list[tuple[bytes, bytes | None]]], with_marker: bool) -> bytes:
    out = b""
    offset = 0
    for i, run in enumerate(runs):
        out += encode_batch(run, 1_700_000_000_000 + i, base_offset=offset)
        offset += len(run)
        if with_marker and i == 0:
            out += encode_control_batch(7, 0, True, 1_700_000_000_000, base_offset=offset)
            offset += 1
    return out


@needs_c
@settings(max_examples=200, deadline=None)
@given(batches, st.integers(0, 40), st.booleans())
def test_c_and_python_fold_alike(runs: list[list[tuple[bytes, bytes | None]]], min_offset: int,
                                 with_marker: bool) -> None:
    chunk = _chunk(runs, with_marker)
    start = {b"earlier": (0, b"x"), b"a": (0, None)}
    expected = dict(start)
    _fold_latest_py(chunk, expected, min_offset)
    got = dict(start)
    record_batch._fold_latest_c(chunk, got, min_offset)
    assert list(got.items()) == list(expected.items())


@needs_c
@settings(deadline=None)
@given(batches, st.data())
def test_a_cut_chunk_fails_in_c(runs: list[list[tuple[bytes, bytes | None]]],
                                data: st.DataObject) -> None:
    chunk = _chunk(runs, False)
    cut = data.draw(st.integers(61, len(chunk) - 1))
    python_failed = c_failed = False
    try:
        _fold_latest_py(chunk[:cut], {}, 0)
    except (ValueError, IndexError):
        python_failed = True
    try:
        record_batch._fold_latest_c(chunk[:cut], {}, 0)
    except ValueError:
        c_failed = True
    # The Python loop reads a key or value cut short as a shorter one; the C loop refuses it.
    assert c_failed or not python_failed
    if cut < len(encode_batch(runs[0], 0)):  # inside the first batch, past its header
        assert c_failed


def test_the_fold_keeps_the_last_write_order() -> None:
    chunk = encode_batch([(b"a", b"1"), (b"b", b"2"), (b"a", None)], 0, base_offset=10)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    record_batch.fold_latest(chunk, latest, 11)
    assert list(latest.items()) == [(b"b", (11, b"2")), (b"a", (12, None))]
