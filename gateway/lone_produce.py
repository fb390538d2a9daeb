"""A lone Produce, answered where its appends end, not by the connection's writer task."""

from __future__ import annotations

import trio

from gateway.connection import AnsweredInPlace, IdleTimer, ResponseSlot, Sequencer, encode_answer
from gateway.handlers.data import ProduceOutcome
from gateway.lean_stream import LeanSocketStream
from kafkawire.codec import RequestHeader


class LoneProduce(AnsweredInPlace):
    """A Produce answered by the task that makes its appends durable, not by the writer.

    With nothing else in flight on a plain TCP connection (a producer that waits for each
    answer), the writer task would be woken twice per request: to take the slot, and again
    when the group commit ends. Instead the last append's completion (in the segment log's
    flusher) encodes the response and sends it with one non-blocking send. What cannot go
    that way (a partial send, a closed socket, a failed encoding) is handed to the writer,
    which then owns the slot; so is the whole request when the reader reads another one
    first (`to_writer`), so that responses keep their order."""

    __slots__ = ("outcome", "remaining", "active")

    def __init__(
        self,
        stream: LeanSocketStream,
        header: RequestHeader,
        outcome: ProduceOutcome,
        slot: ResponseSlot,
        order: Sequencer,
        idle: IdleTimer,
        slots: trio.MemorySendChannel[ResponseSlot],
    ) -> None:
        super().__init__(stream, header, slot, order, idle, slots)
        self.outcome = outcome
        self.remaining = 0
        self.active = True

    def start(self) -> bool:
        """Ask each pending append to report its end; False: the writer must answer it."""
        count = self.outcome.notify_each_done(self._one_done)
        if count <= 0:  # known already, or some append cannot report (later calls ignored)
            self.active = False
            return False
        self.remaining = count
        return True

    def to_writer(self) -> None:
        """Another request was read: the writer answers this one (before that one)."""
        if self.active:
            self.active = False
            self._writer_awaits()

    def _one_done(self) -> None:
        # Runs inside the store's completion of a group commit: it must not raise.
        self.remaining -= 1
        if self.remaining or not self.active:
            return
        self.active = False
        slot = self.slot
        try:
            ready, response = self.outcome.result_now()
            if not ready:  # (all its appends ended, so not expected)
                self._writer_awaits()
                return
            slot.fill(encode_answer(self.header, response))
        except Exception:
            self._failed()
            return
        if slot.payload is None:  # acks=0: settled once durable, never answered
            self._settled()
            return
        self._send_filled()

    def _writer_awaits(self) -> None:
        self.slot.pending = (self.header, self.outcome)
        self.slot.set_done()
        self._hand_over()
