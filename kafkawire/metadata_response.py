"""Hand-written Metadata response encoder (v0-v12), byte-identical to kio's.

Virtual partitions are cheap, so a topic may have thousands; kio builds a dataclass per
partition (~19 us each). Here every partition of a topic has the same shape (this node leads
it, with itself as the only replica), so the encoded partitions array depends only on
(version, node, partition count) and is cached.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .wire import I16, I32, array_len, string

_PARTITION_V0 = struct.Struct(">hii")  # error, index, leader
_PARTITION_V7 = struct.Struct(">hiii")  # + leader epoch
_NO_OPERATIONS = -(2**31)  # authorized operations not requested


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    error_code: int
    name: str | None  # None: a topic asked for by an unknown id (v10+)
    partitions: int  # count; 0 with an error
    topic_id: uuid.UUID = uuid.UUID(int=0)
    authorized_operations: int = _NO_OPERATIONS  # KIP-430, v8+
    leader: int = -1  # -1: this node (several nodes: the topic's owner)
    # several nodes, partitions led by different nodes: (first, last, leader or -1)
    leader_ranges: tuple[tuple[int, int, int], ...] | None = None


@lru_cache(maxsize=512)
def _partitions(version: int, node_id: int, count: int) -> bytes:
    """The encoded partitions array of a topic whose partitions 0..count-1 this node leads."""
    return array_len(count, version >= 9) + _partition_items(version, node_id, 0, count - 1)


@lru_cache(maxsize=512)
def _partition_items(version: int, node_id: int, first: int, last: int) -> bytes:
    """The encoded entries of partitions first..last, all led by `node_id`."""
    flexible = version >= 9
    nodes = array_len(1, flexible) + I32.pack(node_id)
    tail = nodes + nodes  # replicas, in-sync replicas
    if version >= 5:
        tail += array_len(0, flexible)  # offline replicas
    if flexible:
        tail += b"\x00"
    parts: list[bytes] = []
    if version >= 7:
        pack = _PARTITION_V7.pack
        parts.extend(pack(0, i, node_id, 0) + tail for i in range(first, last + 1))
    else:
        pack = _PARTITION_V0.pack
        parts.extend(pack(0, i, node_id) + tail for i in range(first, last + 1))
    return b"".join(parts)


def encode_metadata_response(
    correlation_id: int,
    version: int,
    brokers: Sequence[tuple[int, str, int]],
    cluster_id: str | None,
    controller_id: int,
    topics: Sequence[TopicMetadata],
    node_id: int,
    cluster_authorized_operations: int = _NO_OPERATIONS,
) -> bytes:
    """The response (header + body, no size prefix); `brokers` are (node, host, port)."""
    flexible = version >= 9
    out = [I32.pack(correlation_id)]
    if flexible:
        out.append(b"\x00")  # response header v1 tagged fields
    if version >= 3:
        out.append(I32.pack(0))  # throttle time
    out.append(array_len(len(brokers), flexible))
    for broker_id, host, port in brokers:
        out += [I32.pack(broker_id), string(host, flexible), I32.pack(port)]
        if version >= 1:
            out.append(string(None, flexible))  # rack
        if flexible:
            out.append(b"\x00")
    if version >= 2:
        out.append(string(cluster_id, flexible))
    if version >= 1:
        out.append(I32.pack(controller_id))
    out.append(array_len(len(topics), flexible))
    for topic in topics:
        out += [I16.pack(topic.error_code), string(topic.name, flexible)]
        if version >= 10:
            out.append(topic.topic_id.bytes)
        if version >= 1:
            out.append(b"\x00")  # is_internal
        if topic.leader_ranges:
            out.append(array_len(topic.partitions, flexible))
            for first, last, node in topic.leader_ranges:
                out.append(_partition_items(version, node_id if node < 0 else node, first, last))
        else:
            leader = node_id if topic.leader < 0 else topic.leader
            out.append(_partitions(version, leader, topic.partitions))
        if version >= 8:
            out.append(I32.pack(topic.authorized_operations))
        if flexible:
            out.append(b"\x00")
    if 8 <= version <= 10:
        out.append(I32.pack(cluster_authorized_operations))
    if version >= 13:
        out.append(I16.pack(0))  # top-level error code (KIP-1102)
    if flexible:
        out.append(b"\x00")
    return b"".join(out)
