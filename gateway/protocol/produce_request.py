"""Hand-written Produce request decoder (v3-v9), field for field what kio's reader gives.

Many small producers make Produce the most frequent request; kio's reflective reader (a
frozen dataclass per partition, a phantom-type check per field) was the largest part of
request decoding. The classes here carry the same attribute names as kio's (and are
dataclasses, so `dataclasses.replace` works on them as on kio's), with plain ints and bytes.
Malformed input raises ProtocolError; lengths are checked against the bytes left, so hostile
input costs at most the frame's size.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass

from .codec import ProtocolError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(slots=True)
class PartitionProduceData:
    index: int
    records: bytes | None


@dataclass(slots=True)
class TopicProduceData:
    name: str
    partition_data: tuple[PartitionProduceData, ...]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout: datetime.timedelta
    topic_data: tuple[TopicProduceData, ...]


class _Truncated(Exception):
    pass


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise _Truncated
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("malformed PRODUCE body: varint too long")


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise _Truncated
    return pos


def _length(buf: bytes, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length prefix; -1 for null. `wide`: INT32 (bytes, arrays) rather than INT16."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    s = _I32 if wide else _I16
    if pos + s.size > len(buf):
        raise _Truncated
    return s.unpack_from(buf, pos)[0], pos + s.size


def _string(buf: bytes, pos: int, flexible: bool, nullable: bool) -> tuple[str | None, int]:
    n, pos = _length(buf, pos, flexible, False)
    if n < 0:
        if nullable:
            return None, pos
        raise ProtocolError("malformed PRODUCE body: null topic name")
    end = pos + n
    if end > len(buf):
        raise _Truncated
    try:
        return buf[pos:end].decode(), end
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"malformed PRODUCE body: {exc}") from exc


def _count(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    n, pos = _length(buf, pos, flexible, True)
    if n < 0:
        raise ProtocolError("malformed PRODUCE body: null array")
    if n > len(buf) - pos:  # every element takes at least a byte
        raise _Truncated
    return n, pos


def decode_produce_request(frame: bytes, pos: int, version: int) -> ProduceRequest:
    """The Produce request body at `pos` of `frame` (request version 3-9)."""
    if not 3 <= version <= 9:
        raise ProtocolError(f"Produce v{version} is not decoded here")
    flexible = version >= 9
    try:
        transactional_id, pos = _string(frame, pos, flexible, True)
        if pos + _ACKS_TIMEOUT.size > len(frame):
            raise _Truncated
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
        pos += _ACKS_TIMEOUT.size
        topic_count, pos = _count(frame, pos, flexible)
        topics = []
        for _ in range(topic_count):
            name, pos = _string(frame, pos, flexible, False)
            partition_count, pos = _count(frame, pos, flexible)
            partitions = []
            for _ in range(partition_count):
                if pos + 4 > len(frame):
                    raise _Truncated
                (index,) = _I32.unpack_from(frame, pos)
                size, pos = _length(frame, pos + 4, flexible, True)
                records = None
                if size >= 0:
                    if pos + size > len(frame):
                        raise _Truncated
                    records = frame[pos : pos + size]
                    pos += size
                if flexible:
                    pos = _skip_tags(frame, pos)
                partitions.append(PartitionProduceData(index, records))
            if flexible:
                pos = _skip_tags(frame, pos)
            assert name is not None
            topics.append(TopicProduceData(name, tuple(partitions)))
        if flexible:
            pos = _skip_tags(frame, pos)
    except _Truncated:
        raise ProtocolError("malformed PRODUCE body: truncated") from None
    return ProduceRequest(
        transactional_id, acks, datetime.timedelta(milliseconds=timeout_ms), tuple(topics)
    )
