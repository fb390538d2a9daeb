"""A tiny blocking Kafka protocol client for the command line tools.

One socket; one request at a time (`request`), or several of one kind in flight at once as
Kafka's own clients do (`pipeline`, five by default like `max.in.flight.requests.per.connection`).
Requests are built from dicts of spec field names with
the gateway's own codec (`build_entity`) and kio's writers; responses are read with the
gateway's bounds-checked kio reader. It needs nothing beyond the runtime dependencies.
"""

from __future__ import annotations

import io
import socket
import ssl
import struct
from collections import deque
from collections.abc import Iterator
from typing import Any

from kio import _kio_native as native
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer

from kafkawire.apis import ApiKey
from kafkawire.codec import build_entity
from kafkawire.reader import entity_reader

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_I16 = struct.Struct(">h")


class KafkaClientError(Exception):
    """The gateway could not be reached or answered something unreadable."""


class KafkaClient:
    def __init__(
        self,
        bootstrap: str,
        timeout: float = 10.0,
        client_id: str = "streamgate-cli",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context`: speak TLS (an SSL or SASL_SSL listener)."""
        host, _, port = bootstrap.rpartition(":")
        if not host or not port.isdigit():
            raise KafkaClientError(f"expected HOST:PORT, got {bootstrap!r}")
        try:
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        except OSError as exc:
            raise KafkaClientError(f"cannot connect to {bootstrap}: {exc}") from exc
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=host.strip("[]"))
            except OSError as exc:
                sock.close()
                raise KafkaClientError(f"TLS with {bootstrap} failed: {exc}") from exc
        self._sock = sock
        self._client_id = client_id.encode()
        self._correlation_id = 0

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send one request (spec field names -> values) and return the kio response."""
        return next(self.pipeline(api_key, version, iter([body]), in_flight=1))

    def pipeline(
        self, api_key: int, version: int, bodies: Iterator[dict[str, Any]], in_flight: int = 5
    ) -> Iterator[Any]:
        """Send requests of one kind with up to `in_flight` unanswered at a time and yield
        their responses in order. A body is encoded only when its turn to be sent comes, so
        the caller may build the next one from the responses so far."""
        if in_flight < 1:
            raise ValueError("in_flight must be at least 1")
        sent: deque[int] = deque()
        exhausted = False
        while True:
            while not exhausted and len(sent) < in_flight:
                body = next(bodies, None)
                if body is None:
                    exhausted = True
                    break
                self._correlation_id += 1
                frame = encode_request(
                    api_key, version, self._correlation_id, self._client_id, body
                )
                try:
                    self._sock.sendall(frame)
                except OSError as exc:
                    raise KafkaClientError(f"request failed: {exc}") from exc
                sent.append(self._correlation_id)
            if not sent:
                return
            yield self._read_response(api_key, version, sent.popleft())

    def _read_response(self, api_key: int, version: int, expected_id: int) -> Any:
        flexible = bool(load_request_schema(api_key, version).__flexible__)
        try:
            response = self._receive_frame()
        except OSError as exc:
            raise KafkaClientError(f"request failed: {exc}") from exc
        (correlation_id,) = _SIZE.unpack_from(response, 0)
        if correlation_id != expected_id:
            raise KafkaClientError("response does not match the request")
        buf = memoryview(response)
        try:
            pos = 4
            if flexible and api_key != ApiKey.API_VERSIONS:
                pos = _skip_tagged_fields(buf, pos)  # response header v1
            value, _ = entity_reader(load_response_schema(api_key, version))(buf, pos)
        except Exception as exc:
            raise KafkaClientError(f"unreadable response: {exc}") from exc
        return value

    def _receive_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._receive_exactly(4))
        return self._receive_exactly(size)

    def _receive_exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self._sock.recv(min(size, 1 << 20))
            if not chunk:
                raise KafkaClientError("the gateway closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)


def produce_body(
    topic: str, records: dict[int, bytes], acks: int = -1, timeout_ms: int = 30000
) -> dict[str, Any]:
    """A Produce request's fields (spec names) for one topic: partition -> record batch."""
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": index, "records": batch} for index, batch in records.items()
                ],
            }
        ],
    }


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: bytes, body: dict[str, Any]
) -> bytes:
    """One framed request (size prefix, header v1 or v2, body from spec field names)."""
    request_cls = load_request_schema(api_key, version)
    out = io.BytesIO()
    out.write(_HEADER.pack(api_key, version, correlation_id))
    out.write(_I16.pack(len(client_id)) + client_id)
    if request_cls.__flexible__:
        out.write(b"\x00")  # request header v2: no tagged fields
    entity_writer(request_cls)(out, build_entity(request_cls, body))
    payload = out.getvalue()
    return _SIZE.pack(len(payload)) + payload


def _skip_tagged_fields(buf: memoryview, pos: int) -> int:
    count, size = native.read_unsigned_varint(buf, pos)
    pos += size
    for _ in range(count):
        _tag, size = native.read_unsigned_varint(buf, pos)
        pos += size
        length, size = native.read_unsigned_varint(buf, pos)
        pos += size + length
    return pos
