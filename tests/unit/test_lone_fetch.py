"""A lone long-poll Fetch answered where its data lands: sent whole, or handed to the writer.

`LoneFetch` waits on real partitions (`core.partition.Partition`) in the place of its poll's
event. These tests drive it with a fake poll (whose answer the test picks) and a fake
socket, and check what reaches the socket and the writer's channel, and when: woken by a
partition, inside a durability pass (after the pass's other calls), at its deadline, with
a partial send, a read that must wait, a failed read, and a connection that ended first.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import trio
import trio.testing
from support.in_place import FakeSocket as _Socket
from support.in_place import OneInFlight

from core.partition import Partition, call_after_pass, hold_wakes, release_wakes
from gateway.connection import encode_answer
from gateway.lone_fetch import FetchTimer, LoneFetch
from kafkawire.apis import ApiKey
from kafkawire.codec import RequestHeader

_HEADER = RequestHeader(ApiKey.FETCH, 12, 77, "test", True)
_ANSWER: list[bytes | memoryview] = [b"\x00\x00\x00\x4d", b"fetch response body"]


class _Poll:
    """A LongPoll's waiting part over `partitions`, answering `answer` (None: must read;
    an exception: raised)."""

    def __init__(self, partitions: list[Partition], deadline: float, answer: Any = _ANSWER):
        self.partitions = partitions
        self.deadline = deadline
        self.answer = answer
        self.event = trio.Event()
        for p in partitions:
            p.add_waiter(self.event)
        self.reads_later = 0

    def wait_with(self, waiter: Any) -> None:
        for p in self.partitions:
            p.remove_waiter(self.event)
            p.add_waiter(waiter)

    def stop_waiting(self, waiter: Any) -> None:
        for p in self.partitions:
            p.remove_waiter(waiter)

    def answer_now(self) -> list[bytes | memoryview] | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def read_later(self) -> Coroutine[Any, Any, list[bytes | memoryview]]:
        self.reads_later += 1

        async def read() -> list[bytes | memoryview]:
            return _ANSWER

        return read()


class _Connection(OneInFlight):
    """A connection's state with one long-poll Fetch started and waiting in place."""

    def __init__(self, poll: _Poll, socket: _Socket, timer: FetchTimer | None = None) -> None:
        super().__init__(produce=False)
        self.lone = LoneFetch(
            socket,  # type: ignore[arg-type]  # what it uses of a LeanSocketStream
            _HEADER,
            poll,  # type: ignore[arg-type]
            self.slot,
            self.order,
            self.idle,
            self.send,
        )
        self.lone.start(timer or FetchTimer())


def _whole() -> bytes:
    framed = encode_answer(_HEADER, _ANSWER)
    assert isinstance(framed, bytes)
    return framed


def _run(test: Callable[[], None]) -> None:
    async def main() -> None:
        test()

    trio.run(main)


def test_data_on_any_partition_sends_the_answer_and_takes_it_off_the_others() -> None:
    def test() -> None:
        parts = [Partition(0), Partition(1)]
        poll, socket = _Poll(parts, trio.current_time() + 30), _Socket()
        conn = _Connection(poll, socket)
        assert not poll.event.is_set()  # its place went to the lone Fetch
        parts[1].advance_high_watermark(3)
        assert socket.sent == [_whole()]
        assert conn.settled and conn.handed_over() == []
        assert not conn.lone.active
        parts[0].advance_high_watermark(5)  # no longer a waiter there
        assert socket.sent == [_whole()]

    _run(test)


def test_inside_a_durability_pass_it_answers_after_the_pass() -> None:
    def test() -> None:
        part = Partition(0)
        poll, socket = _Poll([part], trio.current_time() + 30), _Socket()
        conn = _Connection(poll, socket)
        calls: list[str] = []
        outer = hold_wakes()
        part.advance_high_watermark(1)
        assert socket.sent == []  # not before the pass ends (its producers go first)
        assert call_after_pass(lambda: calls.append("later"))
        release_wakes(outer)
        assert socket.sent == [_whole()] and calls == ["later"]
        assert conn.settled

    _run(test)


def test_a_partial_send_leaves_the_rest_to_the_writer() -> None:
    def test() -> None:
        part = Partition(0)
        poll, socket = _Poll([part], trio.current_time() + 30), _Socket(room=6)
        conn = _Connection(poll, socket)
        part.advance_high_watermark(1)
        (slot,) = conn.handed_over()
        assert slot is conn.slot and slot.done and slot.pending is None
        assert isinstance(slot.payload, bytes)
        assert socket.sent[0] + slot.payload == _whole()
        assert not conn.settled  # the writer settles it once it has sent the rest

    _run(test)


def test_a_read_that_must_wait_goes_to_the_writer() -> None:
    def test() -> None:
        part = Partition(0)
        poll, socket = _Poll([part], trio.current_time() + 30, answer=None), _Socket()
        conn = _Connection(poll, socket)
        part.advance_high_watermark(1)
        (slot,) = conn.handed_over()
        assert slot.done and slot.pending is not None and slot.pending[0] is _HEADER
        assert poll.reads_later == 1 and socket.sent == []
        slot.pending[1].close()  # type: ignore[attr-defined]  # (the writer would await it)

    _run(test)


def test_a_failed_read_closes_the_connection_through_the_writer() -> None:
    def test() -> None:
        part = Partition(0)
        poll = _Poll([part], trio.current_time() + 30, answer=RuntimeError("boom"))
        socket = _Socket()
        conn = _Connection(poll, socket)
        part.advance_high_watermark(1)
        (slot,) = conn.handed_over()
        assert slot.close_connection and socket.sent == []

    _run(test)


def test_a_closed_connection_takes_it_off_its_partitions() -> None:
    def test() -> None:
        part = Partition(0)
        poll, socket = _Poll([part], trio.current_time() + 30), _Socket()
        conn = _Connection(poll, socket)
        conn.lone.close()
        part.advance_high_watermark(1)
        assert socket.sent == [] and conn.handed_over() == []

    _run(test)


def test_the_timer_answers_at_the_deadline_and_waits_for_the_next() -> None:
    async def main() -> None:
        timer = FetchTimer()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timer.run)
            first_part = Partition(0)
            start = trio.current_time()
            first = _Connection(_Poll([first_part], start + 0.5), _Socket(), timer)
            await trio.sleep(0.4)
            assert not first.settled
            await trio.sleep(0.2)
            assert first.settled  # answered (with what there is) at its deadline
            # The next one is answered by data first; the timer, woken at the earlier
            # deadline it kept, moves on to this one's and answers nothing twice.
            second_part = Partition(0)
            socket = _Socket()
            second = _Connection(_Poll([second_part], trio.current_time() + 0.5), socket, timer)
            third_part = Partition(0)
            second_part.advance_high_watermark(1)
            assert second.settled and len(socket.sent) == 1
            third = _Connection(_Poll([third_part], trio.current_time() + 0.5), _Socket(), timer)
            await trio.sleep(0.45)
            assert not third.settled and len(socket.sent) == 1
            await trio.sleep(0.1)
            assert third.settled
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
