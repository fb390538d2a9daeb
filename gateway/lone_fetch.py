"""A lone long-poll Fetch, answered where its data lands, not by the connection's writer."""

from __future__ import annotations

import math

import trio

from core.partition import call_after_pass
from gateway.connection import AnsweredInPlace, IdleTimer, ResponseSlot, Sequencer, encode_answer
from gateway.handlers.data import LongPoll
from gateway.lean_stream import LeanSocketStream
from kafkawire.codec import RequestHeader


class LoneFetch(AnsweredInPlace):
    """A long-poll Fetch answered in place when its partitions get data, or at its deadline.

    With nothing else in flight on a plain TCP connection (a consumer at the tail: the
    connection reads no other request until this one is answered), the writer task would
    be woken twice per Fetch: to take the slot, and again when the data came. Instead this
    object waits on the partitions itself (it is their waiter), and the pass that made the
    data durable reads and sends the response with one non-blocking send, once it has
    answered the producers. What cannot go that way (a read that must wait for a file or
    tier 2, a partial send, a closed socket, a failed read) goes to the writer, which then
    owns the slot. The connection's `FetchTimer` answers it at its deadline."""

    __slots__ = ("poll", "active")

    def __init__(
        self,
        stream: LeanSocketStream,
        header: RequestHeader,
        poll: LongPoll,
        slot: ResponseSlot,
        order: Sequencer,
        idle: IdleTimer,
        slots: trio.MemorySendChannel[ResponseSlot],
    ) -> None:
        super().__init__(stream, header, slot, order, idle, slots)
        self.poll = poll
        self.active = True

    def start(self, timer: FetchTimer) -> None:
        """Wait on the poll's partitions in its place, and for the deadline on `timer`."""
        self.poll.wait_with(self)
        timer.arm(self)

    def set(self) -> None:
        """A partition got data (the waiter protocol): answer once the pass that woke it
        has made all its partitions visible and answered their producers."""
        if self.active and not call_after_pass(self.answer):
            self.answer()

    def answer(self) -> None:
        """Read and send now (woken, or at the deadline). Must not raise."""
        if not self.active:
            return
        self.active = False
        slot = self.slot
        try:
            self.poll.stop_waiting(self)
            response = self.poll.answer_now()
            if response is None:  # a batch must be read first: the writer awaits that
                slot.pending = (self.header, self.poll.read_later())
                slot.set_done()
                self._hand_over()
                return
            slot.fill(encode_answer(self.header, response))
        except Exception:
            self._failed()
            return
        self._send_filled()

    def close(self) -> None:
        """The connection ended first: off the partitions, never answered."""
        if self.active:
            self.active = False
            self.poll.stop_waiting(self)


class FetchTimer:
    """Answers a connection's lone Fetch at its deadline. One task per connection, started
    with its first lone Fetch, woken at the earliest deadline it was given: a later Fetch
    (whose deadline is later) moves no cancel scope, and the task, woken at the earlier
    deadline, finds that Fetch answered and waits for the one now pending."""

    __slots__ = ("lone", "_due", "_scope")

    def __init__(self) -> None:
        self.lone: LoneFetch | None = None
        self._due = math.inf
        self._scope: trio.CancelScope | None = None

    def arm(self, lone: LoneFetch) -> None:
        self.lone = lone
        if lone.poll.deadline < self._due:
            self._due = lone.poll.deadline
            if self._scope is not None:
                self._scope.deadline = self._due

    async def run(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._due) as self._scope:
                await trio.sleep_forever()
            lone = self.lone
            if lone is not None and lone.active and lone.poll.deadline <= trio.current_time():
                lone.answer()
            if lone is None or not lone.active:
                self.lone = None
                self._due = math.inf
            else:
                self._due = lone.poll.deadline
