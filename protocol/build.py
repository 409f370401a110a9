"""Build a kio response entity of any version from plain values.

Kafka responses change shape across versions (fields appear, become nullable, get renamed in
kio with the `Ms` suffix dropped). API modules describe a response once, as keyword values and
nested dicts; `build` keeps the fields that version has, converts ints to `ErrorCode` and
milliseconds to `timedelta`, and fills absent required fields with the zero of their type.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

_ZERO_TIMEDELTA = datetime.timedelta(0)


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    kind: str  # "error", "timedelta", "entity_tuple", "entity", "plain"
    nested: type | None
    optional: bool
    required: bool
    zero: Any


_specs: dict[type, tuple[_FieldSpec, ...]] = {}


def _spec(cls: type) -> tuple[_FieldSpec, ...]:
    cached = _specs.get(cls)
    if cached is not None:
        return cached
    specs = []
    for f in dataclasses.fields(cls):
        tp = f.type
        optional = False
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = len(args) != len(typing.get_args(tp))
            tp = args[0] if args else tp
            origin = typing.get_origin(tp)
        nested: type | None = None
        zero: Any
        if tp is ErrorCode:
            kind, zero = "error", ErrorCode.none
        elif isinstance(tp, type) and issubclass(tp, datetime.timedelta):
            kind, zero = "timedelta", _ZERO_TIMEDELTA
        elif origin is tuple:
            inner = typing.get_args(tp)[0]
            if dataclasses.is_dataclass(inner):
                kind, nested = "entity_tuple", inner  # type: ignore[assignment]
            else:
                kind = "plain"
            zero = ()
        elif dataclasses.is_dataclass(tp):
            kind, nested, zero = "entity", tp, None  # type: ignore[assignment]
        else:
            kind = "plain"
            if isinstance(tp, type) and issubclass(tp, bool):
                zero = False
            elif isinstance(tp, type) and issubclass(tp, int):
                zero = 0
            elif isinstance(tp, type) and issubclass(tp, str):
                zero = ""
            elif isinstance(tp, type) and issubclass(tp, bytes):
                zero = b""
            elif tp is uuid.UUID:
                zero = None
            else:
                zero = None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if optional and kind != "entity_tuple":
            zero = None
        specs.append(_FieldSpec(f.name, kind, nested, optional, required, zero))
    result = tuple(specs)
    _specs[cls] = result
    return result


def build(cls: type, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Any:
    if values:
        kwargs = {**values, **kwargs}
    out: dict[str, Any] = {}
    for spec in _spec(cls):
        if spec.name in kwargs:
            value = kwargs[spec.name]
            if value is None:
                if not spec.optional:
                    if spec.required:
                        out[spec.name] = spec.zero
                    continue
                out[spec.name] = None
                continue
            kind = spec.kind
            if kind == "error":
                value = value if isinstance(value, ErrorCode) else ErrorCode(value)
            elif kind == "timedelta":
                if not isinstance(value, datetime.timedelta):
                    value = datetime.timedelta(milliseconds=value)
            elif kind == "entity_tuple":
                nested = spec.nested
                assert nested is not None
                value = tuple(
                    v if isinstance(v, nested) else build(nested, v) for v in value
                )
            elif kind == "entity" and isinstance(value, Mapping):
                assert spec.nested is not None
                value = build(spec.nested, value)
            out[spec.name] = value
        elif spec.required:
            if spec.kind == "entity" and spec.nested is not None and not spec.optional:
                out[spec.name] = build(spec.nested)
            else:
                out[spec.name] = spec.zero
    return cls(**out)
