"""Hand-written Produce request decoder (v3-v12), field for field what kio's reader gives.

Many small producers make Produce the most frequent request; kio's reflective reader (a
frozen dataclass per partition, a phantom-type check per field) was the largest part of
request decoding. The classes here carry the same attribute names as kio's (and are
dataclasses, so `dataclasses.replace` works on them as on kio's), with plain ints and bytes.
Malformed input raises ProtocolError; lengths are checked against the bytes left
(`body_reader`), so hostile input costs at most the frame's size.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass

from .body_reader import I32, Malformed, Truncated, count, fixed, length, skip_tags, string
from .codec import ProtocolError

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


def decode_produce_request(frame: bytes, pos: int, version: int) -> ProduceRequest:
    """The Produce request body at `pos` of `frame` (request version 3-12; v10-v12 add
    nothing to the request)."""
    if not 3 <= version <= 12:
        raise ProtocolError(f"Produce v{version} is not decoded here")
    flexible = version >= 9
    try:
        transactional_id, pos = string(frame, pos, flexible, True)
        (acks, timeout_ms), pos = fixed(frame, pos, _ACKS_TIMEOUT)
        topic_count, pos = count(frame, pos, flexible)
        topics = []
        for _ in range(topic_count):
            name, pos = string(frame, pos, flexible, False)
            partition_count, pos = count(frame, pos, flexible)
            partitions = []
            for _ in range(partition_count):
                if pos + 4 > len(frame):
                    raise Truncated
                (index,) = I32.unpack_from(frame, pos)
                size, pos = length(frame, pos + 4, flexible, True)
                records = None
                if size >= 0:
                    if pos + size > len(frame):
                        raise Truncated
                    records = frame[pos : pos + size]
                    pos += size
                if flexible:
                    pos = skip_tags(frame, pos)
                partitions.append(PartitionProduceData(index, records))
            if flexible:
                pos = skip_tags(frame, pos)
            assert name is not None
            topics.append(TopicProduceData(name, tuple(partitions)))
        if flexible:
            pos = skip_tags(frame, pos)
    except Truncated:
        raise ProtocolError("malformed PRODUCE body: truncated") from None
    except Malformed as exc:
        raise ProtocolError(f"malformed PRODUCE body: {exc}") from None
    return ProduceRequest(
        transactional_id, acks, datetime.timedelta(milliseconds=timeout_ms), tuple(topics)
    )
