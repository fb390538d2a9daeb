"""What a connection's writer leaves when the connection goes away: the waiting parts of
requests it never started are closed, and a long-poll Fetch closed so takes its waiters
off its partitions (they would otherwise stay until the partitions' next data)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import trio

from gateway.connection import ResponseSlot
from gateway.handlers.data import _LongPoll
from gateway.server import _close_unstarted
from kafkawire.codec import RequestHeader

_HEADER = RequestHeader(1, 12, 7, "test", True)


class _Partition:
    """The part of a partition a Fetch's waiters use."""

    def __init__(self) -> None:
        self.waiters: set[trio.Event] = set()

    def remove_waiter(self, event: trio.Event) -> None:
        self.waiters.discard(event)


class _Waiting:
    """A handler's waiting part that records being closed."""

    def __init__(self, closed: list[_Waiting]) -> None:
        self.closed = closed

    def __await__(self) -> Generator[Any, None, None]:
        yield from ()

    def close(self) -> None:
        self.closed.append(self)


async def _never_run() -> list[bytes | memoryview]:
    return []


def test_a_long_poll_closed_unawaited_takes_its_waiters_off() -> None:
    event = trio.Event()
    partitions = [_Partition(), _Partition()]
    for partition in partitions:
        partition.waiters.add(event)
    coroutine = _never_run()
    poll = _LongPoll(coroutine, (event, partitions))  # type: ignore[arg-type]
    poll.close()
    assert all(not p.waiters for p in partitions)
    assert coroutine.cr_frame is None  # closed: no "never awaited" warning later


def test_the_writer_closes_every_waiting_part_it_never_started() -> None:
    closed: list[_Waiting] = []
    send, receive = trio.open_memory_channel[ResponseSlot](8)
    held, queued, answered = ResponseSlot(), ResponseSlot(), ResponseSlot()
    held.pending = (_HEADER, _Waiting(closed))
    queued.pending = (_HEADER, _Waiting(closed))
    answered.fill(b"\x00\x00\x00\x00")
    send.send_nowait(queued)
    send.send_nowait(answered)
    _close_unstarted(held, receive)
    assert len(closed) == 2
    assert held.pending is None and queued.pending is None
    assert answered.payload == b"\x00\x00\x00\x00"


def test_nothing_held_and_nothing_queued_is_fine() -> None:
    _send, receive = trio.open_memory_channel[ResponseSlot](1)
    _close_unstarted(None, receive)
