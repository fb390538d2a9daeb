"""Gathered writes (`writev`, `sendmsg`) of many buffers, resumed after partial writes.

A Fetch response or a tier-2 chunk is thousands of pieces; a gathered call takes at most
IOV_MAX of them and may write fewer bytes than given. The pending pieces are kept as a
list and a start index, so moving past what was written does not shift the list (popping
from its front would, once per piece: quadratic in the number of pieces).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

IOV_MAX = 1024  # buffers per gathered call (Linux's UIO_MAXIOV)


def views_of(buffers: Iterable[bytes | bytearray | memoryview]) -> list[memoryview]:
    """Byte views of the non-empty buffers, in order."""
    views = [memoryview(b).cast("B") for b in buffers]
    return [v for v in views if len(v)]


def advance(views: list[memoryview], start: int, written: int) -> int:
    """Move past `written` bytes from `views[start]` on; returns the new start. A piece
    written in part is replaced by its rest."""
    while written:
        head = views[start]
        if written >= len(head):
            written -= len(head)
            start += 1
        else:
            views[start] = head[written:]
            written = 0
    return start


def write_all(write: Callable[[list[memoryview]], int], views: list[memoryview]) -> None:
    """Call a blocking gathered `write` (e.g. `lambda v: os.writev(fd, v)`) until every
    byte of `views` is written."""
    start = 0
    while start < len(views):
        start = advance(views, start, write(views[start : start + IOV_MAX]))
