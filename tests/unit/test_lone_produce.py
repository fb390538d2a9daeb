"""A lone Produce answered where its appends end: sent whole, or handed to the writer.

`LoneProduce` sends the response of the only request in flight from the completion of its
appends. These tests drive it with a fake outcome (whose appends the test ends) and a fake
socket (which takes what the test says), and check what reaches the writer's channel and
the connection's bookkeeping in each case: a whole send, a partial one, a closed socket, a
later request read first, an encoding failure, acks=0, and an append that cannot report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from gateway.connection import IdleTimer, ResponseSlot, Sequencer, encode_answer
from gateway.lone_produce import LoneProduce
from kafkawire.apis import ApiKey
from kafkawire.codec import RequestHeader

_HEADER = RequestHeader(ApiKey.PRODUCE, 9, 41, "test", True)
_ANSWER: dict[str, Any] = {"responses": []}


class _Outcome:
    """A Produce's outcome with `appends` pending appends the test ends one by one."""

    def __init__(self, appends: int, response: Any = _ANSWER, reports: bool = True) -> None:
        self.appends = appends
        self.response = response
        self.reports = reports
        self.callbacks: list[Callable[[], None]] = []

    def notify_each_done(self, callback: Callable[[], None]) -> int:
        if not self.reports:
            return -1
        self.callbacks = [callback] * self.appends
        return self.appends

    def end_one(self) -> None:
        self.appends -= 1
        self.callbacks.pop()()

    def result_now(self) -> tuple[bool, Any]:
        if self.appends:
            return False, None
        if isinstance(self.response, Exception):
            raise self.response
        return True, self.response


class _Socket:
    """A socket that takes `room` bytes per send (all when None), or is closed."""

    def __init__(self, room: int | None = None, closed: bool = False) -> None:
        self.room = room
        self.closed = closed
        self.sent: list[bytes] = []

    def send_now(self, data: bytes) -> int:
        if self.closed:
            raise trio.ClosedResourceError("the stream is closed")
        taken = data if self.room is None else data[: self.room]
        self.sent.append(bytes(taken))
        return len(taken)


class _Connection:
    """A connection's state with one Produce started and in flight."""

    def __init__(self, outcome: _Outcome, socket: _Socket) -> None:
        self.order = Sequencer()
        self.idle = IdleTimer(60_000)
        self.send, self.receive = trio.open_memory_channel[ResponseSlot](8)
        self.slot = ResponseSlot()
        self.order.started(True)
        self.idle.request_started()
        self.lone = LoneProduce(
            socket,  # type: ignore[arg-type]  # what it uses of a LeanSocketStream
            _HEADER,
            outcome,  # type: ignore[arg-type]
            self.slot,
            self.order,
            self.idle,
            self.send,
        )

    def handed_over(self) -> list[ResponseSlot]:
        out = []
        while True:
            try:
                out.append(self.receive.receive_nowait())
            except trio.WouldBlock:
                return out

    @property
    def settled(self) -> bool:
        return self.order.unsettled == 0 and self.idle.in_flight == 0


def _run(test: Callable[[], None]) -> None:
    async def main() -> None:
        test()

    trio.run(main)


def test_the_last_append_ending_sends_the_whole_answer() -> None:
    def test() -> None:
        outcome, socket = _Outcome(3), _Socket()
        conn = _Connection(outcome, socket)
        assert conn.lone.start()
        outcome.end_one()
        outcome.end_one()
        assert socket.sent == [] and not conn.settled  # two of three: nothing yet
        outcome.end_one()
        assert socket.sent == [_whole_answer()]
        assert int.from_bytes(socket.sent[0][4:8], "big") == _HEADER.correlation_id
        assert conn.settled and conn.handed_over() == []

    _run(test)


def test_a_partial_send_leaves_the_rest_to_the_writer() -> None:
    def test() -> None:
        outcome, socket = _Outcome(1), _Socket(room=5)
        conn = _Connection(outcome, socket)
        assert conn.lone.start()
        outcome.end_one()
        (slot,) = conn.handed_over()
        assert slot is conn.slot and slot.done and slot.pending is None
        assert isinstance(slot.payload, bytes)
        assert socket.sent[0] + slot.payload == _whole_answer()
        assert not conn.settled  # the writer settles it once it has sent the rest

    _run(test)


def test_a_closed_socket_hands_the_answer_to_the_writer() -> None:
    def test() -> None:
        outcome = _Outcome(1)
        conn = _Connection(outcome, _Socket(closed=True))
        assert conn.lone.start()
        outcome.end_one()
        (slot,) = conn.handed_over()
        assert slot.payload == _whole_answer() and not slot.close_connection

    _run(test)


def test_a_request_read_first_hands_it_over_unanswered_and_later_ends_are_ignored() -> None:
    def test() -> None:
        outcome, socket = _Outcome(2), _Socket()
        conn = _Connection(outcome, socket)
        assert conn.lone.start()
        outcome.end_one()
        conn.lone.to_writer()
        (slot,) = conn.handed_over()
        assert slot.done and slot.pending == (_HEADER, outcome)  # the writer awaits it
        outcome.end_one()
        assert socket.sent == [] and conn.handed_over() == []
        conn.lone.to_writer()  # once only
        assert conn.handed_over() == []

    _run(test)


def test_an_answer_that_cannot_be_encoded_closes_the_connection() -> None:
    def test() -> None:
        outcome = _Outcome(1, response=RuntimeError("bad"))
        conn = _Connection(outcome, _Socket())
        assert conn.lone.start()
        outcome.end_one()  # must not raise into the store's completion
        (slot,) = conn.handed_over()
        assert slot.close_connection and slot.payload is None

    _run(test)


def test_acks_0_settles_without_sending() -> None:
    def test() -> None:
        outcome, socket = _Outcome(1, response=None), _Socket()
        conn = _Connection(outcome, socket)
        assert conn.lone.start()
        outcome.end_one()
        assert socket.sent == [] and conn.settled and conn.handed_over() == []

    _run(test)


def test_an_append_that_cannot_report_stays_with_the_writer() -> None:
    def test() -> None:
        conn = _Connection(_Outcome(2, reports=False), _Socket())
        assert not conn.lone.start()
        conn.lone.to_writer()  # (the reader queues the slot itself in this case)
        assert conn.handed_over() == []

    _run(test)


def _whole_answer() -> bytes:
    payload = encode_answer(_HEADER, dict(_ANSWER))
    assert isinstance(payload, bytes)
    return payload
