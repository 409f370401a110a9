"""Encode a large response a slice of elements at a time.

Building a kio entity from plain values and writing it costs ~10 us per element of a response
(a topic of Metadata, a partition of OffsetFetch or ListOffsets), so one answer of 10,000
elements would hold the event loop ~100 ms. `encode_in_slices` writes the same bytes as
`protocol.codec.encode_response(build(...))`, but as a generator that pauses (yields None) after
every `per_slice` elements it has built and written; the caller resumes it on a later loop turn.
Its last value is the framed response.

An entity that holds an array of entities (a container: the response, a Metadata topic, an
OffsetFetch topic) is written here, field by field with kio's own field writers; every other
entity (a leaf: a partition) is built with `protocol.build` and written by kio whole. Containers
of the APIs that use this carry no tagged fields; one that did is written whole by kio (no
pause inside it), and so is a version older than kio's schemas (`protocol.legacy_versions`).
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

from kio.serial import entity_writer
from kio.serial._introspect import EntityTupleField, classify_field
from kio.serial._serialize import get_field_tag, get_field_writer
from kio.serial.writers import write_compact_array_length, write_int32
from kio.static.primitive import i32

from protocol.build import build
from protocol.codec import kio_has, response_codec

_SIZE = struct.Struct(">i")

# Elements built and written between two pauses: ~2-5 ms of work.
ELEMENTS_PER_SLICE = 400


@dataclasses.dataclass(frozen=True, slots=True)
class _Container:
    """How to write one container type: its positional fields in order, each either an array
    of entities (name, element type) or a plain field (name, kio writer)."""

    cls: type
    fields: tuple[tuple[str, type | None, Callable[[Any, Any], None] | None], ...]
    array_names: frozenset[str]
    flexible: bool


_containers: dict[type, _Container | None] = {}


def _container(cls: type) -> _Container | None:
    """The plan of `cls` if it is a container written here, None for one kio writes whole."""
    if cls in _containers:
        return _containers[cls]
    flexible = bool(getattr(cls, "__flexible__", False))
    plan: _Container | None = None
    fields: list[tuple[str, type | None, Callable[[Any, Any], None] | None]] = []
    tagged = False
    for field in dataclasses.fields(cls):
        if get_field_tag(field) is not None:
            tagged = True
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            fields.append((field.name, kind.type_, None))
        else:
            fields.append((field.name, None, get_field_writer(field, flexible, False, False)))
    arrays = frozenset(name for name, element, _ in fields if element is not None)
    if arrays and not tagged:
        plan = _Container(cls, tuple(fields), arrays, flexible)
    _containers[cls] = plan
    return plan


def encode_in_slices(api_key: int, api_version: int, correlation_id: int,
                     values: Mapping[str, Any], per_slice: int = ELEMENTS_PER_SLICE,
                     ) -> Generator[bytes | None, None, None]:
    """The response of (api_key, api_version) described by `values` (as for `build`), framed
    like `encode_response`'s: yields None after every `per_slice` elements, then the frame."""
    codec = response_codec(api_key, api_version)
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    codec.header_writer(buffer, codec.header_type(correlation_id=correlation_id))
    if kio_has(api_key, api_version):
        budget = [per_slice, per_slice]  # left in this slice, per slice
        yield from _write(buffer, codec.response_type, values, budget)
    else:  # a version older than kio's schemas, with a writer of its own: written whole
        codec.body_writer(buffer, build(codec.response_type, values))
    data = buffer.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    del data
    yield out


def _write(buffer: io.BytesIO, cls: type, values: Any, budget: list[int],
           ) -> Iterator[None]:
    plan = _container(cls)
    if plan is None:
        entity = values if isinstance(values, cls) else build(cls, values)
        write: Callable[[Any, Any], None] = entity_writer(cls)
        write(buffer, entity)
        yield from _spent(budget)
        return
    if isinstance(values, cls):
        values = {name: getattr(values, name) for name, _, _ in plan.fields}
    # The plain fields converted as `build` does (error codes, milliseconds, zeros).
    shell = build(cls, {k: v for k, v in values.items() if k not in plan.array_names})
    for name, element, writer in plan.fields:
        if element is None:
            assert writer is not None
            writer(buffer, getattr(shell, name))
            continue
        items = values.get(name)
        if items is None and getattr(shell, name) is None:
            _array_length(buffer, plan.flexible, None)
            continue
        items = items or ()
        _array_length(buffer, plan.flexible, len(items))
        for item in items:
            yield from _write(buffer, element, item, budget)
    if plan.flexible:
        buffer.write(b"\x00")  # no tagged fields
    yield from _spent(budget)


def _spent(budget: list[int]) -> Iterator[None]:
    """Count one entity written; pause when the slice is used up."""
    budget[0] -= 1
    if budget[0] <= 0:
        budget[0] = budget[1]
        yield None


def _array_length(buffer: io.BytesIO, flexible: bool, length: int | None) -> None:
    if flexible:
        write_compact_array_length(buffer, length)
    else:
        write_int32(buffer, i32(-1 if length is None else length))
