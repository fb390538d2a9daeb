"""A loopback TCP proxy for Kafka traffic that cuts connections in the middle of Produce requests.

Every connection accepted on ``127.0.0.1:<port>`` is relayed to the gateway. Client-to-server
data arrives in chunks (whatever one ``recv`` returns); the proxy splits the stream into Kafka
frames to know which chunks complete a Produce request. While dropping is enabled, every
``drop_every``-th such chunk is not relayed normally; instead, in turn, the proxy

* ``after``: forwards the whole chunk, half-closes towards the server (so the server reads
  the complete request before it sees EOF) and closes the client side without relaying any
  response: the server has appended the batches, the client never sees the acknowledgement;
* ``before``: closes both sides without forwarding anything of the chunk;
* ``mid``: forwards the first half of the chunk and then cuts like ``after``, so the server
  gets a truncated frame (and possibly some complete ones before it).

Responses come back in request order on a connection, so the proxy knows which forwarded
requests are still unanswered when it cuts: all of them lose their acknowledgement (pipelined
requests ahead of the cut chunk included), and their batches may or may not be in the log.

The proxy also decodes the record-batch headers of every Produce request that reached the
server in full and counts batches (producer id, epoch, partition, base sequence, record count)
that reached it more than once: proof that the server had to deduplicate a retry. Batches of
non-idempotent producers (producer id -1) have no identity and are not tracked. Produce with
acks=0 (no response) would confuse the response accounting; the tests always use acks=all.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from collections import Counter, deque
from typing import Any

from kio.index import load_request_schema
from kio.serial import entity_reader

from support.client import API_PRODUCE, skip_tagged_fields

MODES = ("after", "after", "before", "mid")
_RECV_BYTES = 64 * 1024
_DRAIN_TIMEOUT = 5.0

BatchId = tuple[int, int, str, int, int, int]


def split_frames(buffer: bytes) -> tuple[list[bytes], int]:
    """Complete frame payloads at the start of ``buffer`` and how many bytes they span."""
    frames = []
    pos = 0
    while pos + 4 <= len(buffer):
        (size,) = struct.unpack_from(">i", buffer, pos)
        if size < 0 or pos + 4 + size > len(buffer):
            break
        frames.append(buffer[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return frames, pos


def api_key_of(frame: bytes) -> int:
    return struct.unpack_from(">h", frame, 0)[0] if len(frame) >= 2 else -1


def produce_batch_ids(frame: bytes) -> list[BatchId]:
    """(producer id, epoch, topic, partition, base sequence, count) of each record batch."""
    api_key, version = struct.unpack_from(">hh", frame, 0)
    assert api_key == API_PRODUCE
    schema = load_request_schema(api_key, version)
    (client_id_len,) = struct.unpack_from(">h", frame, 8)
    pos = 10 + max(client_id_len, 0)
    if schema.__flexible__:
        pos = skip_tagged_fields(frame, pos)
    request, _size = entity_reader(schema)(frame, pos)
    ids: list[BatchId] = []
    for topic in request.topic_data:
        for part in topic.partition_data:
            records = bytes(part.records or b"")
            bpos = 0
            while bpos + 61 <= len(records):
                (batch_length,) = struct.unpack_from(">i", records, bpos + 8)
                producer_id, epoch, base_sequence, count = struct.unpack_from(
                    ">qhii", records, bpos + 43
                )
                ids.append((producer_id, epoch, topic.name, int(part.index), base_sequence, count))
                bpos += 12 + batch_length
    return ids


class _Connection:
    """Relay state of one client connection."""

    def __init__(self) -> None:
        self.request_buffer = b""  # forwarded client bytes that are not a complete frame yet
        self.response_buffer = b""
        # One entry per forwarded request, oldest first, until its response comes back:
        # the batch ids of a Produce request, None for any other request.
        self.unanswered: deque[list[BatchId] | None] = deque()


class DroppingProxy:
    def __init__(self, drop_every: int = 5) -> None:
        self.drop_every = drop_every
        self.dropping = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._upstream: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._sockets: set[socket.socket] = set()
        self._produce_chunks = 0
        self._mode_index = 0
        self.stats: Counter[str] = Counter()
        self._batches_seen: Counter[BatchId] = Counter()
        self.errors: list[BaseException] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ lifecycle

    def start(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self._upstream = (upstream_host, upstream_port)
        self._spawn(self._accept_loop)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in sockets:
            _close(sock)
        for thread in list(self._threads):
            thread.join(timeout=5)

    def __enter__(self) -> DroppingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._sockets.add(sock)
            return True

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._sockets.discard(sock)
        for sock in socks:
            _close(sock)

    # ------------------------------------------------------------------ counters

    @property
    def batches_resent(self) -> int:
        """Record batches that reached the server in full more than once."""
        with self._lock:
            return sum(n - 1 for n in self._batches_seen.values() if n > 1)

    @property
    def drops(self) -> int:
        with self._lock:
            return self.stats["after"] + self.stats["before"] + self.stats["mid"]

    def summary(self) -> dict[str, int]:
        with self._lock:
            out = dict(self.stats)
            out["batches_resent"] = sum(n - 1 for n in self._batches_seen.values() if n > 1)
        return out

    def _drop_mode(self, completes_produce: bool) -> str | None:
        if not completes_produce:
            return None
        with self._lock:
            self.stats["produce_chunks"] += 1
            if not self.dropping:
                return None
            self._produce_chunks += 1
            if self._produce_chunks % self.drop_every:
                return None
            mode = MODES[self._mode_index % len(MODES)]
            self._mode_index += 1
            self.stats[mode] += 1
            return mode

    def _forwarded(self, conn: _Connection, frames: list[bytes]) -> None:
        """Requests that reached the server in full; they now wait for their responses."""
        for frame in frames:
            ids = produce_batch_ids(frame) if api_key_of(frame) == API_PRODUCE else None
            conn.unanswered.append(ids)
            if ids is None:
                continue
            with self._lock:
                self.stats["produce_requests_delivered"] += 1
                # Without a producer id, batches carry no identity (sequence -1): not tracked.
                self._batches_seen.update(i for i in ids if i[0] >= 0)

    def _answered(self, conn: _Connection, data: bytes) -> None:
        conn.response_buffer += data
        frames, used = split_frames(conn.response_buffer)
        conn.response_buffer = conn.response_buffer[used:]
        for _ in frames:
            if conn.unanswered:
                conn.unanswered.popleft()

    def _acks_lost(self, conn: _Connection) -> None:
        """The connection is cut: no request still waiting for its response gets one."""
        lost = [ids for ids in conn.unanswered if ids is not None]
        per_partition = Counter(
            (pid, topic, p) for ids in lost for pid, _e, topic, p, _s, _n in ids
        )
        with self._lock:
            self.stats["produce_requests_ack_lost"] += len(lost)
            self.stats["batches_ack_lost"] += sum(len(ids) for ids in lost)
            deepest = max(per_partition.values(), default=0)
            if deepest > self.stats["max_ack_lost_batches_one_partition"]:
                self.stats["max_ack_lost_batches_one_partition"] = deepest

    # ------------------------------------------------------------------ relaying

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _addr = self._listener.accept()
            except OSError:
                return  # closed
            self._spawn(self._relay, client)

    def _relay(self, client: socket.socket) -> None:
        assert self._upstream is not None
        if not self._track(client):
            _close(client)
            return
        try:
            upstream = socket.create_connection(self._upstream, timeout=10)
        except OSError:
            self._forget(client)
            return
        if not self._track(upstream):
            self._forget(client, upstream)
            return
        with self._lock:
            self.stats["connections"] += 1
        for sock in (client, upstream):
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection()
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [], 0.5)
                if self._closed:
                    return
                for sock in readable:
                    data = sock.recv(_RECV_BYTES)
                    if not data:
                        return
                    if sock is upstream:
                        client.sendall(data)
                        self._answered(conn, data)
                        continue
                    buffer = conn.request_buffer + data
                    frames, used = split_frames(buffer)
                    mode = self._drop_mode(any(api_key_of(f) == API_PRODUCE for f in frames))
                    if mode is None:
                        upstream.sendall(data)
                        self._forwarded(conn, frames)
                        conn.request_buffer = buffer[used:]
                        continue
                    if mode != "before":
                        sent = data if mode == "after" else data[: len(data) // 2]
                        upstream.sendall(sent)
                        self._forwarded(conn, split_frames(conn.request_buffer + sent)[0])
                    self._acks_lost(conn)
                    if mode != "before":
                        self._cut_after_forward(client, upstream)
                    return
        except OSError:
            return
        except BaseException as exc:  # a bug in the proxy itself: let the test see it
            self.errors.append(exc)
            raise
        finally:
            self._forget(client, upstream)

    def _cut_after_forward(self, client: socket.socket, upstream: socket.socket) -> None:
        """Drop the client at once; let the server read everything sent, then see EOF."""
        _close(client)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)
        # Swallow whatever the server answers until it closes: nothing reaches the client,
        # and closing only after the server did avoids a reset that could discard the
        # request before the server read it.
        upstream.settimeout(_DRAIN_TIMEOUT)
        with contextlib.suppress(OSError):
            while upstream.recv(_RECV_BYTES):
                pass


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
