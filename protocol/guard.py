"""Refuse a request body before kio reads it if it could make kio over-allocate or hand us None.

kio's native reader (the pinned 0.6.5) sizes an array from its declared count before it checks
that the bytes are there: a count of 2**32 in a 50-byte frame asks for 32 GiB, and a failed
allocation in native code aborts the whole process; there is no exception to catch. Kafka's own
generated readers refuse any collection whose count exceeds the bytes left, since every element
takes at least one byte. This module does the same, in Python, ahead of kio: it walks the body
as kio will read it and refuses

* an array whose count is larger than the bytes left in the frame (so kio can never be asked
  for more than a few bytes of memory per byte received), and
* a null array where the schema does not allow null (kio returns None there, and handlers
  iterate the field).

* a request whose decoded objects would take more than `DECODED_BYTES_PER_BYTE` times the
  frame's size plus `DECODED_BYTES_ALLOWANCE`: an element of two bytes on the wire (an empty
  topic name) becomes a Python object, a tuple slot and a string of over 100 bytes, so a 2 MB
  Metadata request of a million empty names would need hundreds of megabytes. Each array adds
  its count times an estimate of one element's objects (`_ELEMENT_OVERHEAD`, per field kind,
  above what CPython really takes) before its elements are walked, so an oversized array is
  refused in constant time.

Strings and bytes need no length check: kio bounds those against the buffer itself, and refuses
null for a non-nullable one (their content takes about as many bytes in memory as on the wire,
which the budget leaves room for). So only schemas that contain an array are walked at all;
Heartbeat costs nothing. The walk of the others is Python source generated once per schema
(straight-line code per struct, fixed-size runs folded into one addition) and stops after the
last field that can hold an array, so its cost is a few field reads per array element.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from protocol.errors import MalformedRequest
from storage.varint import VarintError, read_uvarint

# A guard: (buffer, offset of the body, end of the frame) -> None, or raises MalformedRequest.
Guard = Callable[[Any, int, int], None]
# A generated walk: (buffer, position, end, cost so far, cost limit, elements so far, element
# limit) -> (position, cost, elements).
_Walk = Callable[[Any, int, int, int, int, int, int], tuple[int, int, int]]

_FIXED_SIZES = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
    "uint64": 8, "float64": 8, "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8,
    "datetime_i64": 8, "error_code": 2,
}
_LENGTH_PREFIXED = {"string", "bytes", "records"}

# The decoded-size budget: a request may decode to at most this many bytes per frame byte,
# plus the allowance (which lets small requests of many tiny elements through).
DECODED_BYTES_PER_BYTE = 16
DECODED_BYTES_ALLOWANCE = 10 * 1024 * 1024

# Estimated bytes of the Python objects of one decoded value, beyond the bytes it held on the
# wire: an int above 256 is a 28-byte object, a str or bytes object has a ~40-byte head, a
# uuid.UUID holds an int, kio's timedelta/datetime are objects of 48 bytes. bool and int8
# values are cached objects.
_VALUE_OVERHEAD = {
    "bool": 0, "int8": 0, "int16": 32, "uint16": 32, "int32": 32, "uint32": 32, "int64": 32,
    "uint64": 32, "float64": 32, "uuid": 112, "timedelta_i32": 48, "timedelta_i64": 48,
    "datetime_i64": 48, "error_code": 32, "string": 64, "bytes": 64, "records": 64,
}
# Array elements one request of these APIs may hold, all its arrays together: each element
# costs the handler work on the event loop (looking a group, an offset or a topic up, and
# encoding its answer, 5-20 us each), so these keep one request to tens of milliseconds, yet
# far above what clients send: a consumer's OffsetFetch names every partition assigned to it,
# its Metadata every topic it subscribes to by name, and an admin tool describes every group in
# one request. Metadata is handled a slice of names per loop turn (`topics_admin`). Above a
# limit the request is answered INVALID_REQUEST (below). A request that names nothing (Metadata
# of every topic, OffsetFetch of every partition of a group) holds no element: its answer is
# bounded by what the broker holds.
#
# Up to this many times its limit, a request is still decoded and answered INVALID_REQUEST for
# each element (`protocol.errors.AnsweredOverLimits`), which costs less than handling it and is
# built a slice per loop turn; beyond, the connection is closed with one warning.
ANSWERED_ELEMENTS_FACTOR = 2
ELEMENT_LIMITS = {
    2: 5_000,   # ListOffsets: topics and their partitions
    3: 10_000,  # Metadata: topics
    9: 5_000,   # OffsetFetch: groups, topics and partitions
    15: 2_000,  # DescribeGroups: group ids
    42: 2_000,  # DeleteGroups: group ids (each deletes the group's offsets too)
    69: 2_000,  # ConsumerGroupDescribe: group ids
}
_NO_ELEMENT_LIMIT = 2**62

_OBJECT_HEAD = 48  # a slotted dataclass instance: GC and object headers
_SLOT = 8  # one field of a struct, or one element of an array's tuple
_TUPLE_HEAD = 64

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def _too_many(name: str, count: int, left: int) -> MalformedRequest:
    return MalformedRequest(f"{name}: {count} elements declared, {max(left, 0)} bytes left")


def _bad(name: str, what: str) -> MalformedRequest:
    return MalformedRequest(f"{name}: {what}")


def _null(name: str) -> MalformedRequest:
    return MalformedRequest(f"{name}: null, which the schema does not allow")


class OverLimits(MalformedRequest):
    """A well-formed request over a per-request limit (decoded size, elements)."""


class TooManyElements(OverLimits):
    """A request holding more array elements than its API allows in one request."""


class ElementsToAnswer(TooManyElements):
    """More elements than the API allows, but few enough to answer each one: the whole body
    was walked (counts bounded by the frame, decoded size within the budget)."""


def _too_many_elements(name: str, elements: int, limit: int) -> MalformedRequest:
    return TooManyElements(f"{name}: {elements} elements in one request, more than the {limit} "
                           "this API allows")


def _over_budget(name: str, cost: int, limit: int) -> MalformedRequest:
    return OverLimits(f"{name}: decoding would take about {cost} bytes, more than the "
                            f"{limit} this frame's size allows")


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str | None  # None for a struct
    struct: type | None
    is_array: bool
    nullable: bool
    tag: int | None


def _describe(field: dataclasses.Field[Any]) -> _Field:
    annotation = field.type
    nullable = False
    if get_origin(annotation) in (UnionType, Union):
        args = [a for a in get_args(annotation) if a is not NoneType]
        nullable = len(args) < len(get_args(annotation))
        if len(args) != 1:
            raise TypeError(f"unsupported union {annotation!r}")
        annotation = args[0]
    is_array = get_origin(annotation) is tuple
    if is_array:
        annotation = get_args(annotation)[0]
    struct_type: type | None = annotation if isinstance(annotation, type) and (
        dataclasses.is_dataclass(annotation)) else None
    is_struct = struct_type is not None
    kafka_type = None if is_struct else field.metadata["kafka_type"]
    if kafka_type is not None and kafka_type not in _FIXED_SIZES and (
            kafka_type not in _LENGTH_PREFIXED):
        raise TypeError(f"unsupported kafka_type {kafka_type!r}")
    return _Field(field.name, kafka_type, struct_type, is_array,
                  nullable, field.metadata.get("tag"))


def _fields(cls: type) -> list[_Field]:
    return [_describe(f) for f in dataclasses.fields(cls)]


def _holds_array(cls: type, seen: frozenset[type] = frozenset()) -> bool:
    if cls in seen:
        return False
    for field in _fields(cls):
        if field.is_array:
            return True
        if field.struct is not None and _holds_array(field.struct, seen | {cls}):
            return True
    return False


def _struct_overhead(cls: type, seen: frozenset[type] = frozenset()) -> int:
    """Estimated bytes of one decoded instance of `cls` and of its scalar and nested-struct
    fields; arrays count their tuple's head here and their elements when walked."""
    if cls in seen:
        return 0
    fields = _fields(cls)
    total = _OBJECT_HEAD + _SLOT * len(fields)
    for field in fields:
        if field.is_array:
            total += _TUPLE_HEAD
        elif field.struct is not None:
            total += _struct_overhead(field.struct, seen | {cls})
        else:
            total += _VALUE_OVERHEAD[field.kafka_type or ""]
    return total


def _element_overhead(field: _Field) -> int:
    """Estimated bytes of one element of an array field: its tuple slot and its objects."""
    if field.struct is not None:
        return _SLOT + _struct_overhead(field.struct)
    return _SLOT + _VALUE_OVERHEAD[field.kafka_type or ""]


class _Compiler:
    """Generates the check of one request schema as Python source: one function whose body
    walks the top-level struct, with every nested struct's walk inlined where it occurs (a
    call per array element would cost as much as the walk itself)."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.sources: list[str] = []
        self.tag_tables: dict[str, dict[int, _Walk]] = {}

    def function_for(self, cls: type, *, whole: bool = True) -> str:
        name = f"_check_{len(self.sources)}_{cls.__name__}"
        self.sources.append("")  # reserve the slot: tagged fields may add functions meanwhile
        slot = len(self.sources) - 1
        lines = [f"def {name}(buf, pos, end, cost, limit, elements, max_elements):",
                 *self._indent(self._struct_lines(cls, whole)),
                 "    return pos, cost, elements"]
        self.sources[slot] = "\n".join(lines)
        return name

    @staticmethod
    def _indent(lines: list[str], depth: int = 1) -> list[str]:
        return ["    " * depth + line for line in lines]

    def _struct_lines(self, cls: type, whole: bool) -> list[str]:
        """Advance `pos` over one struct, checking its arrays on the way."""
        lines: list[str] = []
        fields = _fields(cls)
        positional = [f for f in fields if f.tag is None]
        tagged = [f for f in fields if f.tag is not None]
        if not whole:
            # The top level only needs to be walked as far as its last array (or all of it,
            # when a tagged field after it can hold one).
            tagged = [f for f in tagged if self._needs_walk(f)]
            if not tagged:
                last = max((i for i, f in enumerate(positional) if self._needs_walk(f)),
                           default=-1)
                positional = positional[:last + 1]
        fixed = 0
        for field in positional:
            if field.kafka_type in _FIXED_SIZES and not field.is_array:
                fixed += _FIXED_SIZES[field.kafka_type]
                continue
            if fixed:
                lines.append(f"pos += {fixed}")
                fixed = 0
            lines.extend(self._field_lines(field, cls))
        if fixed:
            lines.append(f"pos += {fixed}")
        if self.flexible and (whole or tagged):
            table = f"_tags_{len(self.tag_tables)}_{cls.__name__}"
            self.tag_tables[table] = {}
            for field in tagged:
                if self._needs_walk(field) and field.tag is not None:
                    self.tag_tables[table][field.tag] = self._tagged_checker(field, cls)
            lines += [
                "if buf[pos] == 0:",
                "    pos += 1",
                "else:",
                f"    pos, cost, elements = _tags(buf, pos, end, {table}, cost, limit, elements,"
                " max_elements)",
            ]
        return lines

    def _needs_walk(self, field: _Field) -> bool:
        return field.is_array or (field.struct is not None and _holds_array(field.struct))

    def _tagged_checker(self, field: _Field, owner: type) -> _Walk:
        inner = _Compiler(self.flexible)
        lines = ["def _tagged(buf, pos, end, cost, limit, elements, max_elements):"]
        lines.extend("    " + line for line in inner._field_lines(field, owner))
        lines.append("    return pos, cost, elements")
        return inner.build_function("\n".join(lines), "_tagged")

    def _field_lines(self, field: _Field, owner: type) -> list[str]:
        label = f"{owner.__name__}.{field.name}"
        kafka_type = field.kafka_type
        if not field.is_array:
            if field.struct is not None:
                walk = self._struct_lines(field.struct, True)
                if field.nullable:  # an int8 marker: -1 null, 1 present
                    return [
                        "marker = buf[pos]",
                        "pos += 1",
                        "if marker == 1:",
                        *self._indent(walk),
                        "elif marker != 0xFF:",
                        f"    raise _bad({label!r}, 'bad null marker')",
                    ]
                return walk
            return self._skip_value_lines(kafka_type)
        # An array: its count, then its elements.
        if self.flexible:  # unsigned varint count + 1, 0 for null
            lines = [
                "b = buf[pos]",
                "if b < 0x80:",
                "    pos += 1",
                "    count = b - 1",
                "else:",
                "    n, pos = _uvarint(buf, pos)",
                "    count = n - 1",
            ]
        else:
            lines = ["count = _I32(buf, pos)[0]", "pos += 4"]
        lines += [
            "if count < 0:",
            "    if count != -1:",
            f"        raise _bad({label!r}, 'negative count')",
            *([] if field.nullable else [f"    raise _null({label!r})"]),
        ]
        # Counted before the elements are walked, so an oversized array costs no walk.
        budget = [
            f"    cost += count * {_element_overhead(field)}",
            "    if cost > limit:",
            f"        raise _over_budget({label!r}, cost, limit)",
            "    elements += count",
            "    if elements > max_elements:",
            f"        raise _too_many_elements({label!r}, elements, max_elements)",
        ]
        element_size = _FIXED_SIZES.get(kafka_type or "", 0)
        if element_size:
            lines += [
                f"elif count * {element_size} > end - pos:",
                f"    raise _too_many({label!r}, count, end - pos)",
                "else:",
                *budget,
                f"    pos += count * {element_size}",
            ]
            return lines
        lines += [
            "elif count > end - pos:",
            f"    raise _too_many({label!r}, count, end - pos)",
            "else:",
            *budget,
            "    for _ in range(count):",
        ]
        if field.struct is not None:
            lines += self._indent(self._struct_lines(field.struct, True), 2)
        else:
            lines += ["        " + line for line in self._skip_value_lines(kafka_type)]
        return lines

    def _skip_value_lines(self, kafka_type: str | None) -> list[str]:
        """Step over one string, bytes or records value (kio checks its bounds itself)."""
        if kafka_type in _FIXED_SIZES:
            return [f"pos += {_FIXED_SIZES[kafka_type]}"]
        if self.flexible:
            return [
                "b = buf[pos]",
                "if b < 0x80:",
                "    pos += b or 1",
                "else:",
                "    n, pos = _uvarint(buf, pos)",
                "    if n:",
                "        pos += n - 1",
            ]
        if kafka_type == "string":
            return ["n = _I16(buf, pos)[0]", "pos += 2", "if n > 0:", "    pos += n"]
        return ["n = _I32(buf, pos)[0]", "pos += 4", "if n > 0:", "    pos += n"]

    def build_function(self, extra_source: str, name: str) -> Callable[..., Any]:
        namespace: dict[str, Any] = {
            "_I16": _I16, "_I32": _I32, "_uvarint": read_uvarint, "_null": _null,
            "_too_many": _too_many, "_bad": _bad, "_tags": _tags, "_over_budget": _over_budget,
            "_too_many_elements": _too_many_elements,
            **self.tag_tables,
        }
        source = "\n\n".join([*self.sources, extra_source])
        exec(compile(source, f"<request guard {name}>", "exec"), namespace)
        return namespace[name]  # type: ignore[no-any-return]


def _tags(buf: Any, pos: int, end: int, known: dict[int, _Walk], cost: int, limit: int,
          elements: int, max_elements: int) -> tuple[int, int, int]:
    """A tagged-field section: each known tag that can hold an array is checked in its bounds."""
    count, pos = read_uvarint(buf, pos)
    if count > end - pos:
        raise _too_many("tagged fields", count, end - pos)
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if size > end - pos:
            raise MalformedRequest(f"tagged field {tag}: {size} bytes declared, "
                                   f"{end - pos} left")
        check = known.get(tag)
        if check is not None:
            _, cost, elements = check(buf, pos, pos + size, cost, limit, elements,
                                      max_elements)
        pos += size
    return pos, cost, elements


def compile_guard(request_type: type, max_elements: int | None = None) -> Guard | None:
    """The guard for one request schema, or None when the schema holds no array at all.
    `max_elements` bounds the elements of all its arrays together (`ELEMENT_LIMITS`)."""
    if not _holds_array(request_type):
        return None
    compiler = _Compiler(bool(getattr(request_type, "__flexible__", False)))
    top = compiler.function_for(request_type, whole=False)
    check = compiler.build_function("", top)
    return _wrapped(check, request_type, _NO_ELEMENT_LIMIT if max_elements is None
                    else max_elements)


def body_length(request_type: type) -> Callable[[Any, int, int], int]:
    """Walks the whole body and returns where it ends: tests compare it with kio's reading."""
    compiler = _Compiler(bool(getattr(request_type, "__flexible__", False)))
    top = compiler.function_for(request_type, whole=True)
    check = compiler.build_function("", top)

    def length(buf: Any, pos: int, end: int) -> int:
        try:
            return int(check(buf, pos, end, 0, decoded_size_limit(end - pos), 0,
                             _NO_ELEMENT_LIMIT)[0]) - pos
        except (IndexError, struct.error) as exc:
            raise MalformedRequest(f"{request_type.__name__}: truncated ({exc})") from exc
        except VarintError as exc:
            raise MalformedRequest(f"{request_type.__name__}: {exc}") from exc

    return length


def decoded_size_limit(body_bytes: int) -> int:
    """The estimated object bytes a body of `body_bytes` may decode to: the budget less the
    strings' content, which takes about one byte in memory per byte on the wire."""
    return (DECODED_BYTES_PER_BYTE - 1) * body_bytes + DECODED_BYTES_ALLOWANCE


def _wrapped(check: Callable[..., tuple[int, int, int]], request_type: type,
             max_elements: int) -> Guard:

    answered = (max_elements * ANSWERED_ELEMENTS_FACTOR if max_elements < _NO_ELEMENT_LIMIT
                else max_elements)

    def guard(buf: Any, pos: int, end: int) -> None:
        try:
            _, _, elements = check(buf, pos, end, 0, decoded_size_limit(end - pos), 0,
                                   answered)
        except (IndexError, struct.error) as exc:
            raise MalformedRequest(f"{request_type.__name__}: truncated ({exc})") from exc
        except VarintError as exc:
            raise MalformedRequest(f"{request_type.__name__}: {exc}") from exc
        if elements > max_elements:
            raise ElementsToAnswer(f"{request_type.__name__}: {elements} elements in one "
                                   f"request, more than the {max_elements} this API allows")

    return guard
