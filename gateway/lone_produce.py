"""A lone Produce, answered where its appends end, not by the connection's writer task."""

from __future__ import annotations

import contextlib
import logging

import trio

from gateway.connection import IdleTimer, ResponseSlot, Sequencer, encode_answer, send_whole_now
from gateway.handlers.data import ProduceOutcome
from gateway.lean_stream import LeanSocketStream
from kafkawire.codec import RequestHeader

log = logging.getLogger(__name__)


class LoneProduce:
    """A Produce answered by the task that makes its appends durable, not by the writer.

    With nothing else in flight on a plain TCP connection (a producer that waits for each
    answer), the writer task would be woken twice per request: to take the slot, and again
    when the group commit ends. Instead the last append's completion (in the segment log's
    flusher) encodes the response and sends it with one non-blocking send. What cannot go
    that way (a partial send, a closed socket, a failed encoding) is handed to the writer,
    which then owns the slot; so is the whole request when the reader reads another one
    first (`to_writer`), so that responses keep their order."""

    __slots__ = (
        "slot",
        "header",
        "outcome",
        "remaining",
        "active",
        "_stream",
        "_order",
        "_idle",
        "_slots",
    )

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
        self.slot = slot
        self.header = header
        self.outcome = outcome
        self.remaining = 0
        self.active = True
        self._stream = stream
        self._order = order
        self._idle = idle
        self._slots = slots

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
            log.exception("handler failed; closing the connection")
            slot.fill(None, close_connection=True)
            self._hand_over()
            return
        if slot.payload is None:  # acks=0: settled once durable, never answered
            self._settled()
            return
        try:
            whole = send_whole_now(self._stream, slot)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            whole = False  # the writer meets the same error and ends the connection
        if whole:
            self._settled()
        else:
            self._hand_over()

    def _writer_awaits(self) -> None:
        self.slot.pending = (self.header, self.outcome)
        self.slot.set_done()
        self._hand_over()

    def _settled(self) -> None:
        self._order.settled()
        self._idle.response_sent()

    def _hand_over(self) -> None:
        # The window is empty (this was the only request in flight): nothing blocks, and a
        # closed channel means the connection has ended.
        ended = (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError)
        with contextlib.suppress(*ended):
            self._slots.send_nowait(self.slot)
