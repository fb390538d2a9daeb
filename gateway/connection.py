"""A connection's bookkeeping, shared by the server's reader and writer tasks and by a
request answered where its wait ends: a place per response in request order, the count of
requests started and not settled, the idle timer, and responses framed for sending."""

from __future__ import annotations

import struct
from collections.abc import Awaitable
from typing import Any

import trio

from gateway.lean_stream import LeanSocketStream
from kafkawire.apis import ApiKey
from kafkawire.codec import RequestHeader, encode_response
from kafkawire.produce_response import encode_produce_response

_SIZE = struct.Struct(">i")


# A response is one buffer, or its size prefix and body pieces apart: prepending four
# bytes to a large body would copy it whole (a Fetch response of megabytes), and a Fetch
# response comes in pieces (its batches as read); a gathered send (`sendmsg`) writes them
# all from where they are. A small one in pieces (a caught-up Fetch: some fifty pieces of
# framing) is joined instead: a view per piece and a long iovec cost several times the copy.
Framed = bytes | tuple[bytes | memoryview, ...]
_PREFIX_APART_BYTES = 64 * 1024
_JOIN_PIECES_BELOW = 16 * 1024


def framed(payload: bytes | list[bytes | memoryview]) -> Framed:
    if isinstance(payload, list):
        size = sum(map(len, payload))
        if size < _JOIN_PIECES_BELOW:
            return b"".join((_SIZE.pack(size), *payload))
        return (_SIZE.pack(size), *payload)
    if len(payload) >= _PREFIX_APART_BYTES:
        return _SIZE.pack(len(payload)), payload
    return _SIZE.pack(len(payload)) + payload


def encode_answer(
    header: RequestHeader, response: dict[str, Any] | bytes | list[bytes | memoryview] | None
) -> Framed | None:
    """A handler's answer as a framed response (None: no response, acks=0)."""
    if response is None:
        return None
    if isinstance(response, dict):
        if header.api_key == ApiKey.PRODUCE:  # the hot path: no kio dataclasses
            response = encode_produce_response(header.correlation_id, header.api_version, response)
        else:
            response = encode_response(header, response)
    return framed(response)


class ResponseSlot:
    """A place in a connection's response order, filled when its handler finishes."""

    __slots__ = ("done", "_waiter", "payload", "close_connection", "pending")

    def __init__(self) -> None:
        self.done = False
        # Made only when the writer has to wait: most slots are done before it looks.
        self._waiter: trio.Event | None = None
        self.payload: Framed | None = None
        self.close_connection = False
        # A handler's result left for the writer task to finish (no task of its own): a
        # Produce's outcome, or the waiting part of a request; `done` is set.
        self.pending: tuple[RequestHeader, Awaitable[Any]] | None = None

    def set_done(self) -> None:
        self.done = True
        if self._waiter is not None:
            self._waiter.set()

    async def wait_done(self) -> None:
        if not self.done:  # (waiting on a set event would still yield)
            self._waiter = trio.Event()
            await self._waiter.wait()

    def fill(self, payload: Framed | None, close_connection: bool = False) -> None:
        self.payload = payload
        self.close_connection = close_connection
        self.set_done()


class Sequencer:
    """A connection's requests that have started and not yet settled.

    Settled means the response is final: the handler returned, or the Produce's appends are
    durable (high watermarks advanced). The writer settles slots in request order, so once
    the count is back to zero every earlier request's effects are visible."""

    __slots__ = ("unsettled", "produces_only", "_drained")

    def __init__(self) -> None:
        self.unsettled = 0
        self.produces_only = True  # every unsettled request is a Produce
        self._drained: trio.Event | None = None

    def may_start(self, produce: bool) -> bool:
        """Whether a request may start now, without waiting for earlier ones."""
        return self.unsettled == 0 or (produce and self.produces_only)

    def started(self, produce: bool) -> None:
        if self.unsettled == 0:
            self.produces_only = True
        self.unsettled += 1
        self.produces_only = self.produces_only and produce

    def settled(self) -> None:
        self.unsettled -= 1
        if self.unsettled == 0 and self._drained is not None:
            self._drained.set()
            self._drained = None

    async def drained(self) -> None:
        """Wait until every started request has settled."""
        while self.unsettled:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()


class IdleTimer:
    """The connection's idle deadline: pushed back by every complete request, suspended
    while requests are in flight (a long poll is not idleness), restarted after the last
    response went out.

    A watchdog task enforces it, so a request costs two counter updates, not two moves of
    a cancel scope's deadline (each reorders trio's deadline heap: a few per cent of the
    loop's time at a small request per round trip)."""

    def __init__(self, idle_ms: int) -> None:
        self.idle_s = idle_ms / 1000
        self.in_flight = 0
        self.quiet_since = trio.current_time()
        self.scope = trio.CancelScope()

    def request_started(self) -> None:
        self.in_flight += 1

    def response_sent(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.quiet_since = trio.current_time()

    async def watch(self) -> None:
        """Cancel `scope` once nothing has been in flight for the idle time."""
        while True:
            now = trio.current_time()
            if self.in_flight:
                await trio.sleep_until(now + self.idle_s)
                continue
            due = self.quiet_since + self.idle_s
            if now >= due:
                self.scope.cancel()
                return
            await trio.sleep_until(due)


def send_whole_now(stream: LeanSocketStream, slot: ResponseSlot) -> bool:
    """Send a filled slot's answer from here, without waiting: True if the socket took it
    whole; otherwise the slot keeps it, or the part the socket did not take, for the
    writer to send."""
    payload = slot.payload
    if not isinstance(payload, bytes) or slot.close_connection:
        return False
    sent = stream.send_now(payload)
    if sent == len(payload):
        return True
    if sent:
        slot.payload = payload[sent:]
    return False
