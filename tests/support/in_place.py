"""Stand-ins for tests of requests answered in place (gateway.lone_produce, lone_fetch):
a socket that takes what the test says, and a connection's bookkeeping with one request
started."""

from __future__ import annotations

import trio

from gateway.connection import IdleTimer, ResponseSlot, Sequencer


class FakeSocket:
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


class OneInFlight:
    """A connection's state with one request (a Produce or not) started and in flight."""

    def __init__(self, produce: bool) -> None:
        self.order = Sequencer()
        self.idle = IdleTimer(60_000)
        self.send, self.receive = trio.open_memory_channel[ResponseSlot](8)
        self.slot = ResponseSlot()
        self.order.started(produce)
        self.idle.request_started()

    def handed_over(self) -> list[ResponseSlot]:
        """The slots given to the writer's channel."""
        out = []
        while True:
            try:
                out.append(self.receive.receive_nowait())
            except trio.WouldBlock:
                return out

    @property
    def settled(self) -> bool:
        return self.order.unsettled == 0 and self.idle.in_flight == 0
