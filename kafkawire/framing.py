"""Sans-io splitting of a Kafka byte stream into size-prefixed frames.

Every Kafka request is an int32 big-endian size followed by that many bytes. The size is
checked against a limit *before* any buffer for the body is reserved, so a hostile size
prefix cannot make the server allocate memory.
"""

from __future__ import annotations

import struct
from collections import deque

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream cannot be a valid sequence of Kafka frames; close the connection."""


class FrameDecoder:
    """Accumulates received bytes and hands out complete frames (without the size prefix).

    Received chunks are kept as they came (views, no copy) and each frame is joined from
    its pieces once: one copy per byte after the socket's, where appending to one growing
    buffer and slicing frames out of it took two, plus moving the rest of the buffer down
    after every frame.
    """

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunks: deque[memoryview] = deque()
        self._size = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            self._chunks.append(memoryview(data))
            self._size += len(data)

    @property
    def buffered(self) -> int:
        return self._size

    def next_frame(self) -> bytes | None:
        """Return the next complete frame, None if more bytes are needed.

        Raises FrameError for a negative or oversized size prefix.
        """
        if self._size < 4:
            return None
        first = self._chunks[0]
        prefix = first if len(first) >= 4 else self._peek(4)
        (size,) = _SIZE.unpack_from(prefix, 0)
        if size < 0 or size > self.max_frame_bytes:
            raise FrameError(f"frame size {size} outside 0..{self.max_frame_bytes}")
        if self._size < 4 + size:
            return None
        self._take(4)
        return b"".join(self._take(size))

    def _peek(self, n: int) -> bytes:
        out = bytearray()
        for chunk in self._chunks:
            out += chunk[: n - len(out)]
            if len(out) == n:
                break
        return bytes(out)

    def _take(self, n: int) -> list[memoryview]:
        """The next `n` buffered bytes, as views (the caller has checked they are there)."""
        pieces = []
        self._size -= n
        while n:
            chunk = self._chunks[0]
            if len(chunk) <= n:
                pieces.append(self._chunks.popleft())
                n -= len(chunk)
            else:
                pieces.append(chunk[:n])
                self._chunks[0] = chunk[n:]
                n = 0
        return pieces


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
