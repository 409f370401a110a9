from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from kio.records.readers import read_batch

from storage.record_batch import encode_batch, iter_records

records_strategy = st.lists(
    st.tuples(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=200))),
    min_size=1, max_size=30)


@given(records_strategy, st.integers(0, 2**40))
def test_records_round_trip(records: list[tuple[bytes, bytes | None]], base: int) -> None:
    batch = encode_batch(records, 1_700_000_000_000, base)
    assert [(k, v) for _, k, v in iter_records(batch)] == records
    assert [o for o, _, _ in iter_records(batch)] == list(range(base, base + len(records)))


def test_batch_is_valid_for_an_independent_reader() -> None:
    batch = encode_batch([(b"key", b"value"), (b"gone", None)], 1234, 7)
    parsed, size = read_batch(batch, 0)  # checks the CRC-32C
    assert size == len(batch)
    assert [r.key for r in parsed.records] == [b"key", b"gone"]
    assert parsed.records[1].value is None
