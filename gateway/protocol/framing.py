"""Sans-io splitting of a Kafka byte stream into size-prefixed frames.

Every Kafka request is an int32 big-endian size followed by that many bytes. The size is
checked against a limit *before* any buffer for the body is reserved, so a hostile size
prefix cannot make the server allocate memory.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream cannot be a valid sequence of Kafka frames; close the connection."""


class FrameDecoder:
    """Accumulates received bytes and hands out complete frames (without the size prefix)."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def next_frame(self) -> bytes | None:
        """Return the next complete frame, None if more bytes are needed.

        Raises FrameError for a negative or oversized size prefix.
        """
        if len(self._buffer) < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buffer, 0)
        if size < 0 or size > self.max_frame_bytes:
            raise FrameError(f"frame size {size} outside 0..{self.max_frame_bytes}")
        end = 4 + size
        if len(self._buffer) < end:
            return None
        # One copy (a slice of the bytearray itself would be a second one); the view is
        # released before the buffer shrinks.
        with memoryview(self._buffer) as view:
            frame = bytes(view[4:end])
        del self._buffer[:end]
        return frame


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
