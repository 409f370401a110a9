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

Strings and bytes need no length check: kio bounds those against the buffer itself, and refuses
null for a non-nullable one. So only schemas that contain an array are walked at all; Heartbeat
costs nothing. The walk of the others is Python source generated once per schema (straight-line
code per struct, fixed-size runs folded into one addition) and stops after the last field that
can hold an array, so its cost is a few field reads per array element.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from protocol.errors import MalformedRequest

# A guard: (buffer, offset of the body, end of the frame) -> None, or raises MalformedRequest.
Guard = Callable[[Any, int, int], None]

_FIXED_SIZES = {
    "bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
    "uint64": 8, "float64": 8, "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8,
    "datetime_i64": 8, "error_code": 2,
}
_LENGTH_PREFIXED = {"string", "bytes", "records"}

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def _uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's limit for lengths and counts)."""
    result = 0
    for shift in (0, 7, 14, 21, 28):
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
    raise MalformedRequest("unsigned varint longer than 5 bytes")


def _too_many(name: str, count: int, left: int) -> MalformedRequest:
    return MalformedRequest(f"{name}: {count} elements declared, {max(left, 0)} bytes left")


def _bad(name: str, what: str) -> MalformedRequest:
    return MalformedRequest(f"{name}: {what}")


def _null(name: str) -> MalformedRequest:
    return MalformedRequest(f"{name}: null, which the schema does not allow")


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


class _Compiler:
    """Generates the check of one request schema as Python source: one function whose body
    walks the top-level struct, with every nested struct's walk inlined where it occurs (a
    call per array element would cost as much as the walk itself)."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.sources: list[str] = []
        self.tag_tables: dict[str, dict[int, Callable[[Any, int, int], int]]] = {}

    def function_for(self, cls: type, *, whole: bool = True) -> str:
        name = f"_check_{len(self.sources)}_{cls.__name__}"
        self.sources.append("")  # reserve the slot: tagged fields may add functions meanwhile
        slot = len(self.sources) - 1
        lines = [f"def {name}(buf, pos, end):", *self._indent(self._struct_lines(cls, whole)),
                 "    return pos"]
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
                f"    pos = _tags(buf, pos, end, {table})",
            ]
        return lines

    def _needs_walk(self, field: _Field) -> bool:
        return field.is_array or (field.struct is not None and _holds_array(field.struct))

    def _tagged_checker(self, field: _Field, owner: type) -> Callable[[Any, int, int], int]:
        inner = _Compiler(self.flexible)
        lines = ["def _tagged(buf, pos, end):"]
        lines.extend("    " + line for line in inner._field_lines(field, owner))
        lines.append("    return pos")
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
        element_size = _FIXED_SIZES.get(kafka_type or "", 0)
        if element_size:
            lines += [
                f"elif count * {element_size} > end - pos:",
                f"    raise _too_many({label!r}, count, end - pos)",
                "else:",
                f"    pos += count * {element_size}",
            ]
            return lines
        lines += [
            "elif count > end - pos:",
            f"    raise _too_many({label!r}, count, end - pos)",
            "else:",
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
            "_I16": _I16, "_I32": _I32, "_uvarint": _uvarint, "_null": _null,
            "_too_many": _too_many, "_bad": _bad, "_tags": _tags, **self.tag_tables,
        }
        source = "\n\n".join([*self.sources, extra_source])
        exec(compile(source, f"<request guard {name}>", "exec"), namespace)
        return namespace[name]  # type: ignore[no-any-return]


def _tags(buf: Any, pos: int, end: int,
          known: dict[int, Callable[[Any, int, int], int]]) -> int:
    """A tagged-field section: each known tag that can hold an array is checked in its bounds."""
    count, pos = _uvarint(buf, pos)
    if count > end - pos:
        raise _too_many("tagged fields", count, end - pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        if size > end - pos:
            raise MalformedRequest(f"tagged field {tag}: {size} bytes declared, "
                                   f"{end - pos} left")
        check = known.get(tag)
        if check is not None:
            check(buf, pos, pos + size)
        pos += size
    return pos


def compile_guard(request_type: type) -> Guard | None:
    """The guard for one request schema, or None when the schema holds no array at all."""
    if not _holds_array(request_type):
        return None
    compiler = _Compiler(bool(getattr(request_type, "__flexible__", False)))
    top = compiler.function_for(request_type, whole=False)
    check = compiler.build_function("", top)
    return _wrapped(check, request_type)


def body_length(request_type: type) -> Callable[[Any, int, int], int]:
    """Walks the whole body and returns where it ends: tests compare it with kio's reading."""
    compiler = _Compiler(bool(getattr(request_type, "__flexible__", False)))
    top = compiler.function_for(request_type, whole=True)
    check = compiler.build_function("", top)

    def length(buf: Any, pos: int, end: int) -> int:
        try:
            return int(check(buf, pos, end)) - pos
        except (IndexError, struct.error) as exc:
            raise MalformedRequest(f"{request_type.__name__}: truncated ({exc})") from exc

    return length


def _wrapped(check: Callable[[Any, int, int], int], request_type: type) -> Guard:

    def guard(buf: Any, pos: int, end: int) -> None:
        try:
            check(buf, pos, end)
        except (IndexError, struct.error) as exc:
            raise MalformedRequest(f"{request_type.__name__}: truncated ({exc})") from exc

    return guard
