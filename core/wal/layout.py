"""One write-ahead object: a small header naming its ranges, then the ranges' bytes.

    b"SGWAL001" | u32 header length | header (JSON) | range bytes, back to back

The bytes of a range are the segment's log entries exactly as in its local files
(core/segments/log.py), so a restored tail is a log file again. The metadata store holds
the same ranges with their offsets (WalRange), which is what readers use; the header
makes an object readable on its own (repair, inspection).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence

from ..metadata import WalRange

MAGIC = b"SGWAL001"
_HEAD = struct.Struct(">8sI")


def encode_header(ranges: Sequence[WalRange]) -> bytes:
    """The header, for ranges whose `object_offset`s count from the end of the header
    (the metadata store's count from the object's first byte)."""
    body = json.dumps(
        [
            [
                r.topic,
                r.topic_id.hex,
                r.segment_id,
                r.start_position,
                r.end_position,
                r.object_offset,
            ]
            for r in ranges
        ],
        separators=(",", ":"),
    ).encode()
    return _HEAD.pack(MAGIC, len(body)) + body


def decode_header(data: bytes) -> tuple[list[list[object]], int]:
    """(the ranges as stored, the offset of the first range byte)."""
    magic, length = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("not a write-ahead object")
    start = _HEAD.size + length
    return json.loads(data[_HEAD.size : start]), start
