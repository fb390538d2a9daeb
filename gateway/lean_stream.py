"""A plain TCP connection's stream with one pass through trio's scheduler per wait, not per call.

`trio.SocketStream` makes every `receive_some` and `send_all` a schedule point: after a
call that succeeded at once it still yields to the scheduler (trio's "always checkpoint"
rule), which costs a pass of the event loop each: an `epoll_wait` plus the run-queue work,
about as much CPU as decoding a small Produce request. A connection with one request in
flight paid it twice per request (a receive and a send), on top of the real waits.

This stream's send yields only when the socket makes it wait (trio's `wait_writable`); its
receive yields like trio's: after data that was already there (so a client that keeps the
socket full cannot starve the other tasks), not a second time after a wait for data. After
a receive that emptied the socket, the next one waits for data before it tries.
Cancellation is still honoured at every call. Used for plain TCP listeners; TLS connections
keep trio's `SSLStream`.
"""

from __future__ import annotations

import socket

import trio

from core.gathered_io import IOV_MAX, advance, views_of

_DEFAULT_RECEIVE = 65536


class LeanSocketStream(trio.abc.Stream):
    """Wraps a `trio.SocketStream`; reads and writes a duplicate of its socket."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        original = stream.socket
        # A duplicate descriptor: closing it never touches the one trio's stream owns.
        self._sock = socket.fromfd(original.fileno(), original.family, original.type)
        self._sock.setblocking(False)
        self._closed = False
        self._drained = False  # the last receive took less than asked: the socket is empty

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        size = max_bytes or _DEFAULT_RECEIVE
        waited = False
        if self._drained and not self._closed:
            # The last receive emptied the socket: a client that waits for each answer has
            # sent nothing since, so wait first rather than try a receive that would fail
            # (a syscall and an exception per request). Data already there ends the wait
            # at the next pass of the loop, where a receive that found it would yield too.
            waited = True
            await trio.lowlevel.wait_readable(self._sock)
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise trio.ClosedResourceError("the stream is closed")
            try:
                data = self._sock.recv(size)
            except BlockingIOError:
                waited = True
                await trio.lowlevel.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(f"receive failed: {exc}") from exc
            self._drained = 0 < len(data) < size
            if not waited:
                # Data was already there (a client pipelining requests): let the other
                # tasks run, as trio's stream does, so the flusher starts on the first
                # request's batches before the reader queues the next ones behind them.
                await trio.lowlevel.cancel_shielded_checkpoint()
            return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        sent = 0
        total = len(data)
        while sent < total:
            if self._closed:
                raise trio.ClosedResourceError("the stream is closed")
            try:  # a view only for the rest of a partial send
                sent += self._sock.send(memoryview(data)[sent:] if sent else data)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._sock)
            except OSError as exc:
                raise trio.BrokenResourceError(f"send failed: {exc}") from exc

    def send_now(self, data: bytes) -> int:
        """Send what the socket takes without waiting: the number of bytes sent (0 when
        its buffer is full). For a caller that knows no other send is under way."""
        if self._closed:
            raise trio.ClosedResourceError("the stream is closed")
        try:
            return self._sock.send(data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise trio.BrokenResourceError(f"send failed: {exc}") from exc

    async def send_all_buffers(self, buffers: list[bytes | memoryview]) -> None:
        """Send the buffers in order as one stream of bytes, gathered (`sendmsg`) so that
        none is copied to be joined with the others."""
        await trio.lowlevel.checkpoint_if_cancelled()
        views = views_of(buffers)
        start = 0
        while start < len(views):
            if self._closed:
                raise trio.ClosedResourceError("the stream is closed")
            try:
                sent = self._sock.sendmsg(views[start : start + IOV_MAX])
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self._sock)
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(f"send failed: {exc}") from exc
            start = advance(views, start, sent)

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.wait_writable(self._sock)

    def close_duplicate(self) -> None:
        """Close the duplicate descriptor, waking any task waiting on it (idempotent)."""
        if not self._closed:
            self._closed = True
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()

    async def aclose(self) -> None:
        self.close_duplicate()
        await self._stream.aclose()
