"""Primitive encoders shared by the hand-written response encoders (Kafka's wire types)."""

from __future__ import annotations

import struct

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


def uvarint(value: int) -> bytes:
    """An unsigned varint (the length prefix of flexible versions' compact types)."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(value: str | None, flexible: bool) -> bytes:
    """A (nullable) STRING, or COMPACT_STRING in flexible versions."""
    if value is None:
        return b"\x00" if flexible else I16.pack(-1)
    raw = value.encode()
    return (uvarint(len(raw) + 1) if flexible else I16.pack(len(raw))) + raw


def array_len(count: int, flexible: bool) -> bytes:
    """An ARRAY's length, or COMPACT_ARRAY's (count + 1) in flexible versions."""
    return uvarint(count + 1) if flexible else I32.pack(count)
