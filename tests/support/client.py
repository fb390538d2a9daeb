"""Test helpers: unique names, polling, raw Kafka wire protocol and record batches.

The raw protocol pieces here are deliberately independent of the server code so
that tests exercise the gateway against a separate implementation.
"""

from __future__ import annotations

import datetime
import io
import re
import select
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import crc32c
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

# --------------------------------------------------------------------------- names

# partitions for auto-created topics; the gateway fixture passes --default-partitions
DEFAULT_PARTITIONS = 3


def unique_topic(prefix: str = "t") -> str:
    """A fresh, legal Kafka topic name (``[a-zA-Z0-9._-]``, well under 249 chars)."""
    clean = re.sub(r"[^a-zA-Z0-9._-]+", "-", prefix).strip("-.")[:60] or "t"
    return f"{clean}-{uuid.uuid4().hex[:10]}"


def free_port() -> int:
    """A currently unused loopback TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns a truthy value; return it or raise on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(interval)


def ms(milliseconds: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=milliseconds))


# ------------------------------------------------------------------ wire protocol

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_API_VERSIONS = 18
API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
API_INIT_PRODUCER_ID = 22

ERR_NONE = 0
ERR_OFFSET_OUT_OF_RANGE = 1
ERR_CORRUPT_MESSAGE = 2
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_MESSAGE_TOO_LARGE = 10
ERR_INVALID_TOPIC = 17
ERR_UNSUPPORTED_VERSION = 35
ERR_OUT_OF_ORDER_SEQUENCE = 45


def frame(payload: bytes) -> bytes:
    """A Kafka frame: big-endian int32 size followed by the payload."""
    return struct.pack(">i", len(payload)) + payload


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _zigzag(value: int) -> bytes:
    return _uvarint((value << 1) ^ (value >> 63))


def request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None = "streamgate-tests",
    flexible: bool = False,
) -> bytes:
    """Request header v1 (or v2 when ``flexible``); client_id is always a legacy string."""
    out = struct.pack(">hhi", api_key, api_version, correlation_id)
    if client_id is None:
        out += struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        out += struct.pack(">h", len(raw)) + raw
    if flexible:
        out += b"\x00"  # no tagged fields
    return out


def encode_request(entity: Any, correlation_id: int, client_id: str = "streamgate-tests") -> bytes:
    """Serialize a kio request entity into a complete frame (header + body)."""
    header = request_header(
        entity.__api_key__,
        entity.__version__,
        correlation_id,
        client_id,
        flexible=entity.__flexible__,
    )
    body = io.BytesIO()
    entity_writer(type(entity))(body, entity)
    return frame(header + body.getvalue())


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
    return pos


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("connection closed by server")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def connection_closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True if the peer closes (EOF or reset) within ``timeout`` without sending anything.

    Data received before the close makes this return False.
    """
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return data == b""


def open_socket(bootstrap: str, timeout: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def _tcp_queues(local: tuple[str, int], remote: tuple[str, int]) -> tuple[int, int] | None:
    """(send queue, receive queue) of a loopback IPv4 socket, from /proc/net/tcp."""

    def hexaddr(addr: tuple[str, int]) -> str:
        return f"{socket.inet_aton(addr[0])[::-1].hex().upper()}:{addr[1]:04X}"

    want = (hexaddr(local), hexaddr(remote))
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == want:
                tx, rx = fields[4].split(":")
                return int(tx, 16), int(rx, 16)
    return None


def _loopback_queues_empty(sock: socket.socket) -> bool:
    """True when `sock` has sent everything and its peer (on this host) has read it all."""
    local, remote = sock.getsockname(), sock.getpeername()
    mine, theirs = _tcp_queues(local, remote), _tcp_queues(remote, local)
    return mine is not None and theirs is not None and mine[0] == 0 and theirs[1] == 0


class RawClient:
    """A minimal synchronous Kafka client speaking kio entities over one socket."""

    def __init__(self, bootstrap: str, timeout: float = 15.0):
        self.sock = open_socket(bootstrap, timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, entity: Any) -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(entity, self.correlation_id))
        return self.correlation_id

    def receive(self, request_entity: Any, correlation_id: int) -> Any:
        from kio.index import load_response_from_request

        response_type = load_response_from_request(request_entity)
        payload = recv_frame(self.sock)
        (got_id,) = struct.unpack_from(">i", payload, 0)
        assert got_id == correlation_id, (got_id, correlation_id)
        pos = 4
        # ApiVersions responses always use response header v0.
        if response_type.__flexible__ and request_entity.__api_key__ != API_API_VERSIONS:
            pos = skip_tagged_fields(payload, pos)
        value, size = entity_reader(response_type)(payload, pos)
        assert pos + size == len(payload), "trailing bytes after response body"
        return value

    def request(self, entity: Any) -> Any:
        return self.receive(entity, self.send(entity))

    def wait_request_taken(self, timeout: float = 10.0) -> None:
        """Wait until the server has read every byte sent so far and has not answered yet.

        The gateway decodes a connection's frames and starts their handlers in the same loop
        that reads the socket, so an empty server-side receive queue means the last request
        sent is being handled (a parked long poll, a follower waiting in SyncGroup...).
        """
        wait_until(lambda: _loopback_queues_empty(self.sock), timeout, interval=0.01)
        readable, _, _ = select.select([self.sock], [], [], 0)
        assert not readable, "the server answered while the request should still be waiting"


# ------------------------------------------------------------------ record batches


@dataclass
class Rec:
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)
    timestamp_delta: int = 0


def _bytes_field(value: bytes | None) -> bytes:
    if value is None:
        return _zigzag(-1)
    return _zigzag(len(value)) + value


def encode_record(rec: Rec, offset_delta: int) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += _zigzag(rec.timestamp_delta)
    body += _zigzag(offset_delta)
    body += _bytes_field(rec.key)
    body += _bytes_field(rec.value)
    body += _zigzag(len(rec.headers))
    for name, value in rec.headers:
        body += _bytes_field(name.encode())
        body += _bytes_field(value)
    return _zigzag(len(body)) + bytes(body)


def build_record_batch(
    records: Iterable[Rec],
    base_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
) -> bytes:
    """An uncompressed magic v2 record batch with a correct CRC-32C."""
    recs = list(records)
    if not recs:
        raise ValueError("a batch needs at least one record")
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000)
    max_ts = base_timestamp + max(r.timestamp_delta for r in recs)
    encoded = b"".join(encode_record(r, i) for i, r in enumerate(recs))
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            0,  # attributes: no compression, CreateTime, not transactional
            len(recs) - 1,  # last offset delta
            base_timestamp,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(recs),
        )
        + encoded
    )
    crc = crc32c.crc32c(after_crc)
    # batch length counts from partition leader epoch to the end
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, 0, 2, crc) + after_crc


CRC_OFFSET = 8 + 4 + 4 + 1  # base offset, batch length, leader epoch, magic


def corrupt_crc(batch: bytes) -> bytes:
    """Flip bits in the stored CRC so that it no longer matches the content."""
    raw = bytearray(batch)
    raw[CRC_OFFSET] ^= 0xFF
    return bytes(raw)


def corrupt_payload(batch: bytes) -> bytes:
    """Flip a bit in the last byte of the record data, leaving the stored CRC intact."""
    raw = bytearray(batch)
    raw[-1] ^= 0x01
    return bytes(raw)


# ---------------------------------------------------------------- kio shortcuts


def produce_request(topic: str, partition: int, batch: bytes, acks: int = -1) -> Any:
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.static.primitive import Records, i16, i32

    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=ms(10_000),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(
                    PartitionProduceData(index=i32(partition), records=Records(batch)),
                ),
            ),
        ),
    )


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    max_wait_ms: int = 500,
    min_bytes: int = 1,
    partition_max_bytes: int = 1 << 20,
) -> Any:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.static.primitive import i32, i64

    return FetchRequest(
        max_wait=ms(max_wait_ms),
        min_bytes=i32(min_bytes),
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(
                        partition=i32(partition),
                        fetch_offset=i64(offset),
                        partition_max_bytes=i32(partition_max_bytes),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def list_offsets_request(topic: str, partition: int, timestamp: int) -> Any:
    from kio.schema.list_offsets.v7.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.static.primitive import i8, i32, i64

    return ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(
                    ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(timestamp)),
                ),
            ),
        ),
    )


def metadata_request(topics: Sequence[str] | None, auto_create: bool = True) -> Any:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    return MetadataRequest(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
    )


def init_producer_id_request() -> Any:
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.static.primitive import i16, i64

    return InitProducerIdRequest(
        transactional_id=None,
        transaction_timeout=ms(60_000),
        producer_id=i64(-1),
        producer_epoch=i16(-1),
    )


def api_versions_request() -> Any:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    return ApiVersionsRequest(client_software_name="streamgate-tests", client_software_version="1")


def decode_records(blob: bytes | None) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) for every record of uncompressed v2 batches in ``blob``.

    Good enough for the raw-protocol tests, which only produce uncompressed data.
    """
    out: list[tuple[int, bytes | None, bytes | None]] = []
    if not blob:
        return out
    pos = 0
    while pos + 12 <= len(blob):
        base_offset, batch_length = struct.unpack_from(">qi", blob, pos)
        end = pos + 12 + batch_length
        if end > len(blob):
            break  # partial trailing batch is allowed by the protocol
        attributes = struct.unpack_from(">h", blob, pos + 21)[0]
        assert attributes & 0x7 == 0, "decode_records only handles uncompressed batches"
        (count,) = struct.unpack_from(">i", blob, pos + 57)
        rpos = pos + 61
        for _ in range(count):
            _length, rpos = _read_zigzag(blob, rpos)
            rpos += 1  # attributes
            _ts, rpos = _read_zigzag(blob, rpos)
            offset_delta, rpos = _read_zigzag(blob, rpos)
            key, rpos = _read_bytes(blob, rpos)
            value, rpos = _read_bytes(blob, rpos)
            nheaders, rpos = _read_zigzag(blob, rpos)
            for _ in range(nheaders):
                _hk, rpos = _read_bytes(blob, rpos)
                _hv, rpos = _read_bytes(blob, rpos)
            out.append((base_offset + offset_delta, key, value))
        pos = end
    return out


def _read_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_zigzag(buf, pos)
    if length < 0:
        return None, pos
    return bytes(buf[pos : pos + length]), pos + length


def api_versions_ok(bootstrap: str, timeout: float = 10.0) -> bool:
    """A fresh connection gets a well-formed, error-free ApiVersions v3 response."""
    with RawClient(bootstrap, timeout) as client:
        response = client.request(api_versions_request())
    return response.error_code == ERR_NONE and len(response.api_keys) > 0


# ------------------------------------------------------------ client utilities


def confluent_consume(consumer: Any, count: int, timeout: float = 20.0) -> list[Any]:
    """Poll a confluent-kafka consumer until ``count`` messages (errors raise)."""
    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(messages) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            from confluent_kafka import KafkaError

            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        messages.append(msg)
    return messages


def confluent_drain(consumer: Any, quiet: float = 1.0, timeout: float = 20.0) -> list[Any]:
    """Consume until nothing new arrives for ``quiet`` seconds (for 'no extra data' checks)."""
    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last < quiet:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            from confluent_kafka import KafkaError

            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        messages.append(msg)
        last = time.monotonic()
    return messages


def kafka_python_consume(consumer: Any, count: int, timeout: float = 20.0) -> list[Any]:
    """Poll a kafka-python consumer until ``count`` records; returned in arrival order."""
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=200)
        for tp in sorted(batch):
            records.extend(batch[tp])
    return records
