"""Just enough of the "consumer" embedded protocol to read subscriptions and assignments.

JoinGroup metadata of protocol type "consumer" is a ConsumerProtocolSubscription and
SyncGroup assignments are ConsumerProtocolAssignment structs (classic, non-flexible encoding
in every version). Both start the same way in every version, which is all that is read here:

    Subscription: i16 version, [string topic], ...
    Assignment:   i16 version, [string topic, [i32 partition]], ...

The coordinator never needs these to run a group (the leader assigns); they serve
OffsetDelete (which topics is the group subscribed to?) and the `groups describe` CLI.
Malformed input gives an empty answer rather than an exception.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class _Truncated(Exception):
    pass


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise _Truncated
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def string(self) -> str:
        return self._take(self.i16()).decode("utf-8", errors="replace")

    def count(self, min_item_size: int) -> int:
        """An array length, checked against the bytes left (-1, null, reads as 0)."""
        n = self.i32()
        if n * min_item_size > len(self.data) - self.pos:
            raise _Truncated
        return max(n, 0)


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription ([] if it cannot be read)."""
    cursor = _Cursor(metadata)
    try:
        cursor.i16()
        return [cursor.string() for _ in range(cursor.count(2))]
    except _Truncated:
        return []


def assigned_partitions(assignment: bytes) -> dict[str, list[int]]:
    """topic -> partitions of a ConsumerProtocolAssignment ({} if it cannot be read)."""
    cursor = _Cursor(assignment)
    result: dict[str, list[int]] = {}
    try:
        cursor.i16()
        for _ in range(cursor.count(6)):
            topic = cursor.string()
            result.setdefault(topic, []).extend(cursor.i32() for _ in range(cursor.count(4)))
    except _Truncated:
        return {}
    return result
