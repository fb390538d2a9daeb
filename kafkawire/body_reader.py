"""Primitive readers shared by the hand-written request decoders (Kafka's wire types).

Each reader takes the frame and a position and returns (value, next position). Running past
the end raises Truncated, and a value no valid request has raises Malformed. Each decoder
turns both into a ProtocolError that names its API. Lengths are checked against the bytes
left, so hostile input costs at most the frame's size.
"""

from __future__ import annotations

import struct
import uuid

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
_ZERO_UUID = bytes(16)


class Truncated(Exception):
    """The frame ends inside the body."""


class Malformed(Exception):
    """A value no valid request has (the message says which)."""


def uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise Truncated
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise Malformed("varint too long")


def skip_tags(buf: bytes, pos: int) -> int:
    """Step over a tagged-fields section (flexible versions)."""
    if pos < len(buf) and buf[pos] == 0:  # no tagged fields: nearly always
        return pos + 1
    count, pos = uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = uvarint(buf, pos)
        size, pos = uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise Truncated
    return pos


def length(buf: bytes, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length prefix; -1 for null. `wide`: INT32 (bytes, arrays) rather than INT16."""
    if flexible:
        n, pos = uvarint(buf, pos)
        return n - 1, pos
    s = I32 if wide else I16
    if pos + s.size > len(buf):
        raise Truncated
    return s.unpack_from(buf, pos)[0], pos + s.size


def string(buf: bytes, pos: int, flexible: bool, nullable: bool) -> tuple[str | None, int]:
    n, pos = length(buf, pos, flexible, False)
    if n < 0:
        if nullable:
            return None, pos
        raise Malformed("null string")
    end = pos + n
    if end > len(buf):
        raise Truncated
    try:
        return buf[pos:end].decode(), end
    except UnicodeDecodeError as exc:
        raise Malformed(str(exc)) from exc


def count(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (a null array is refused)."""
    n, pos = length(buf, pos, flexible, True)
    if n < 0:
        raise Malformed("null array")
    if n > len(buf) - pos:  # every element takes at least a byte
        raise Truncated
    return n, pos


def fixed(buf: bytes, pos: int, layout: struct.Struct) -> tuple[tuple[int, ...], int]:
    """A run of fixed-size fields."""
    end = pos + layout.size
    if end > len(buf):
        raise Truncated
    return layout.unpack_from(buf, pos), end


def topic_id(buf: bytes, pos: int) -> tuple[uuid.UUID | None, int]:
    """A UUID; None for the zero id, as kio reads it."""
    end = pos + 16
    if end > len(buf):
        raise Truncated
    raw = bytes(buf[pos:end])
    return (None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)), end
