"""Hand-written Fetch response encoder (v4-v18) for the hot read path.

v16+ only add tagged fields (a new leader's address, KIP-951), which one node never gives.

The record batches are passed through untouched as buffers; only the small framing around
them is packed, so a response of many large batches costs microseconds, not a re-encode.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from .wire import I32, array_len, string, uvarint

_HEAD_V7 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_ABORTED = struct.Struct(">qq")  # producer id, first offset


@dataclass(slots=True)
class PartitionData:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    # Whole record batches, in offset order; empty list means no records.
    batches: Sequence[bytes | memoryview] = field(default_factory=list)
    last_stable_offset: int = -1  # -1: the high watermark (no transactions)
    # read_committed: (producer id, first offset) of aborted transactions in the range
    aborted: Sequence[tuple[int, int]] | None = None

    @property
    def records_size(self) -> int:
        return sum(len(b) for b in self.batches)


def encode_fetch_response(
    correlation_id: int,
    version: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[PartitionData]]],
    *,
    error_code: int = 0,
    throttle_time_ms: int = 0,
) -> list[bytes | memoryview]:
    """Return the response (header + body, no size prefix) as a list of buffers.

    A topic is keyed by its name, or from v13 on by its topic id (a UUID).
    """
    flexible = version >= 12
    parts: list[bytes | memoryview] = [I32.pack(correlation_id)]
    if flexible:
        parts.append(b"\x00")  # response header v1 tagged fields
    if version >= 7:
        parts.append(_HEAD_V7.pack(throttle_time_ms, error_code, 0))
    else:
        parts.append(I32.pack(throttle_time_ms))
    parts.append(array_len(len(topics), flexible))
    empty_aborted = array_len(0, flexible)
    for name, partitions in topics:
        parts.append(name.bytes if isinstance(name, uuid.UUID) else string(name, flexible))
        parts.append(array_len(len(partitions), flexible))
        for p in partitions:
            lso = p.high_watermark if p.last_stable_offset < 0 else p.last_stable_offset
            head = _PARTITION.pack(
                p.partition, p.error_code, p.high_watermark, lso, p.log_start_offset
            )
            parts.append(head if version >= 5 else head[:-8])
            if p.aborted:
                parts.append(array_len(len(p.aborted), flexible))
                tag = b"\x00" if flexible else b""
                parts.extend(_ABORTED.pack(pid, first) + tag for pid, first in p.aborted)
            else:
                parts.append(empty_aborted)
            if version >= 11:
                parts.append(I32.pack(-1))  # preferred read replica
            size = p.records_size
            parts.append(uvarint(size + 1) if flexible else I32.pack(size))
            parts.extend(p.batches)
            if flexible:
                parts.append(b"\x00")
        if flexible:
            parts.append(b"\x00")
    if flexible:
        parts.append(b"\x00")
    return parts
