"""A loopback TCP proxy that can simulate an outage of the server behind it.

`OutageProxy` relays TCP connections from its own loopback port to a target. `down()` closes
the listening socket (new connections are refused) and resets every open connection; `up()`
listens on the same port again. It runs on plain threads, so it works the same from trio
tests, ordinary pytest code and benchmarks.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time

from harness.ports import free_port

_RECV_BYTES = 64 * 1024
_POLL = 0.05


def _abort(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Relay:
    """One proxied connection; its thread owns both sockets and closes them."""

    def __init__(self, client: socket.socket, target: tuple[str, int]) -> None:
        self.client = client
        self.target = target
        self.reset = threading.Event()
        self.thread = threading.Thread(target=self._run, name="outage-proxy-relay", daemon=True)

    def _run(self) -> None:
        client = self.client
        try:
            upstream = socket.create_connection(self.target, timeout=5.0)
        except OSError:
            _abort(client)
            return
        client.settimeout(5.0)
        upstream.settimeout(5.0)
        peer = {client: upstream, upstream: client}
        open_reads = {client, upstream}
        try:
            while open_reads and not self.reset.is_set():
                readable, _, _ = select.select(list(open_reads), [], [], _POLL)
                for sock in readable:
                    data = sock.recv(_RECV_BYTES)
                    if data:
                        peer[sock].sendall(data)
                    else:
                        open_reads.discard(sock)
                        with contextlib.suppress(OSError):
                            peer[sock].shutdown(socket.SHUT_WR)
        except OSError:
            self.reset.set()
        if self.reset.is_set():
            _abort(client)
            _abort(upstream)
        else:
            client.close()
            upstream.close()


class OutageProxy:
    """A loopback TCP proxy to ``target`` that can be switched down (refuse + reset) and up."""

    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.connections_total = 0
        self._lock = threading.Lock()
        self._relays: set[_Relay] = set()
        self._listener: socket.socket | None = None
        self._stop_accepting = threading.Event()
        self._acceptor: threading.Thread | None = None
        self._closed = False
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def is_up(self) -> bool:
        return self._listener is not None

    def up(self) -> None:
        """Listen (again) on the same port."""
        if self._closed:
            raise RuntimeError("proxy closed")
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 5.0
        while True:
            try:
                listener.bind(("127.0.0.1", self.port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    listener.close()
                    raise
                time.sleep(0.05)
        listener.listen(128)
        self._listener = listener
        self._stop_accepting = threading.Event()
        self._acceptor = threading.Thread(
            target=self._accept_loop,
            args=(listener, self._stop_accepting),
            name="outage-proxy-accept",
            daemon=True,
        )
        self._acceptor.start()

    def _accept_loop(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                readable, _, _ = select.select([listener], [], [], _POLL)
                if not readable:
                    continue
                client, _addr = listener.accept()
            except OSError:
                return
            relay = _Relay(client, self.target)
            with self._lock:
                self._relays = {r for r in self._relays if r.thread.is_alive()}
                self._relays.add(relay)
                self.connections_total += 1
            relay.thread.start()

    def down(self) -> None:
        """Refuse new connections and reset every open one; returns when both are done."""
        if self._listener is not None:
            self._stop_accepting.set()
            if self._acceptor is not None:
                self._acceptor.join(timeout=5.0)
            # Closing the listener resets connections still waiting in its backlog too.
            _abort(self._listener)
            self._listener = None
            self._acceptor = None
        with self._lock:
            relays = list(self._relays)
            self._relays.clear()
        for relay in relays:
            relay.reset.set()
        for relay in relays:
            if relay.thread.ident is not None:
                relay.thread.join(timeout=10.0)

    def close(self) -> None:
        self.down()
        self._closed = True

    def __enter__(self) -> OutageProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
