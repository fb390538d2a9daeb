"""Bounds-checked decoding of request bodies into kio's generated dataclasses.

kio's native `entity_reader` reserves memory for an array from its declared length before
reading it, so a 4-byte length of 0x7fffffff aborts the whole process. This reader walks the
same dataclasses with kio's (safe) native primitive readers, but checks every array length
against the bytes that are left before building anything: hostile input costs at most the
size of the frame.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any, cast

from kio import _kio_native as native
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

Reader = Callable[[memoryview, int], tuple[Any, int]]


class DecodeError(Exception):
    """The bytes do not match the request's schema."""


def _sized(read: Callable[[memoryview, int], Any]) -> Reader:
    """Adapt a kio native reader returning (value, size) to (value, new position)."""

    def reader(buf: memoryview, pos: int) -> tuple[Any, int]:
        value, size = read(buf, pos)
        return value, pos + size

    return reader


_PRIMITIVES: dict[tuple[str, bool, bool], Callable[..., Any]] = {
    **{
        (t, f, False): getattr(native, f"read_{t}")
        for t in (
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "uint16",
            "uint32",
            "uint64",
            "float64",
        )
        for f in (True, False)
    },
    **{("bool", f, False): native.read_boolean for f in (True, False)},
    **{("uuid", f, o): native.read_uuid for f in (True, False) for o in (True, False)},
    **{("error_code", f, False): native.read_error_code for f in (True, False)},
    **{("timedelta_i32", f, False): native.read_timedelta_i32 for f in (True, False)},
    **{("timedelta_i64", f, False): native.read_timedelta_i64 for f in (True, False)},
    **{("datetime_i64", f, False): native.read_datetime_i64 for f in (True, False)},
    **{("datetime_i64", f, True): native.read_nullable_datetime_i64 for f in (True, False)},
    ("string", True, False): native.read_compact_string,
    ("string", True, True): native.read_compact_string_nullable,
    ("string", False, False): native.read_legacy_string,
    ("string", False, True): native.read_nullable_legacy_string,
    **{(t, True, False): native.read_compact_string_as_bytes for t in ("bytes", "records")},
    **{(t, True, True): native.read_compact_string_as_bytes_nullable for t in ("bytes", "records")},
    **{(t, False, False): native.read_legacy_bytes for t in ("bytes", "records")},
    **{(t, False, True): native.read_nullable_legacy_bytes for t in ("bytes", "records")},
}


def _array_reader(item: Reader, flexible: bool, nullable: bool = True) -> Reader:
    read_length = native.read_compact_array_length if flexible else native.read_legacy_array_length

    def read_array(buf: memoryview, pos: int) -> tuple[tuple[Any, ...] | None, int]:
        count, size = read_length(buf, pos)
        pos += size
        if count is None or count < 0:
            if not nullable:  # handlers rely on the schema: a null here is malformed
                raise DecodeError("null for an array that is not nullable")
            return None, pos
        # Every element takes at least one byte: a longer array cannot be in this frame.
        if count > len(buf) - pos:
            raise DecodeError(f"array of {count} elements in {len(buf) - pos} bytes")
        items = []
        for _ in range(count):
            value, pos = item(buf, pos)
            items.append(value)
        return tuple(items), pos

    return read_array


def _field_reader(field: Any, flexible: bool, is_tag: bool) -> Reader:
    optional = False if is_tag else is_optional(field)
    kind = classify_field(field)
    match kind:
        case PrimitiveField() | PrimitiveTupleField():
            key = (
                get_schema_field_type(field),
                flexible,
                optional and isinstance(kind, PrimitiveField),
            )
            try:
                item = _sized(_PRIMITIVES[key])
            except KeyError:
                raise NotImplementedError(f"no reader for {key}") from None
        case EntityField(entity):
            item = _nullable_entity(entity) if optional else entity_reader(entity)
        case EntityTupleField(entity):
            item = entity_reader(entity)
    if not kind.is_array:
        return item
    return _array_reader(item, flexible, nullable=is_optional(field))


def _nullable_entity(entity: type) -> Reader:
    read = entity_reader(entity)

    def reader(buf: memoryview, pos: int) -> tuple[Any, int]:
        marker, size = native.read_int8(buf, pos)
        if marker < 0:
            return None, pos + size
        return read(buf, pos + size)

    return reader


@cache
def entity_reader(cls: type) -> Reader:
    """A reader for kio entity `cls`: (buffer, position) -> (instance, new position)."""
    flexible = bool(cast(Any, cls).__flexible__)  # kio entities carry it
    regular: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    defaults: dict[str, Any] = {}
    for field in fields(cls):
        tag = get_field_tag(field)
        if tag is None:
            regular.append((field.name, _field_reader(field, flexible, is_tag=False)))
        else:
            tagged[tag] = (field.name, _field_reader(field, flexible, is_tag=True))
            defaults[field.name] = field.default

    def read_entity(buf: memoryview, pos: int) -> tuple[Any, int]:
        values = dict(defaults)
        for name, read in regular:
            values[name], pos = read(buf, pos)
        if flexible:
            count, size = native.read_unsigned_varint(buf, pos)
            pos += size
            for _ in range(count):
                tag, size = native.read_unsigned_varint(buf, pos)
                pos += size
                length, size = native.read_unsigned_varint(buf, pos)
                pos += size
                end = pos + length
                if end > len(buf):
                    raise DecodeError("tagged field runs past the frame")
                if tag in tagged:
                    name, read = tagged[tag]
                    values[name], _ = read(buf[:end], pos)
                pos = end  # unknown tags are skipped, as the protocol requires
        return cls(**values), pos

    return read_entity
