"""Record-level work on stored v2 batches for compaction: list keys, drop records.

A kept record is copied byte for byte (its offset and timestamp deltas stay relative to the
batch's unchanged baseOffset and baseTimestamp), so a filtered batch keeps baseOffset,
lastOffsetDelta, base/max timestamp and the producer fields, as Kafka's cleaner does;
only length, record count and CRC change, and the body is compressed again with the
batch's own codec.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import crc32c

from ..recordbatch import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    compress,
    decompress,
    read_batch_header,
)

_LENGTH_OFFSET = 8
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_RECORD_COUNT_OFFSET = 57
_LOG_OVERHEAD = 12
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass(slots=True)
class ScannedRecord:
    offset: int
    key: bytes | None
    tombstone: bool  # a null value
    start: int  # byte span of the whole record (length varint included) in the body
    end: int


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, next position)."""
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def scan_body(body: bytes, base_offset: int, count: int) -> Iterator[ScannedRecord]:
    """The records of a decompressed batch body: offset, key, tombstone flag and span."""
    for offset, key, tombstone, start, end in _scan(body, base_offset, count):
        yield ScannedRecord(offset, key, tombstone, start, end)


def _scan(
    body: bytes, base_offset: int, count: int
) -> Iterator[tuple[int, bytes | None, bool, int, int]]:
    # The hot loop of compaction: one-byte varints (most deltas and short keys) inline.
    varint = _varint
    pos = 0
    for _ in range(count):
        start = pos
        length, pos = varint(body, pos)
        end = pos + length
        pos += 1  # record attributes
        b = body[pos]
        if b < 0x80:  # timestamp delta
            pos += 1
        else:
            _ts, pos = varint(body, pos)
        b = body[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offset_delta, pos = varint(body, pos)
        b = body[pos]
        if b < 0x80:
            key_len = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            key_len, pos = varint(body, pos)
        key = None
        if key_len >= 0:
            key = body[pos : pos + key_len]
            pos += key_len
        # a null value is the zigzag varint -1: the single byte 0x01
        yield base_offset + offset_delta, key, body[pos] == 1, start, end
        pos = end
    if pos != len(body):
        raise ValueError(f"{len(body) - pos} trailing bytes after {count} records")


def batch_body(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    return decompress(header.compression, memoryview(batch)[BATCH_HEADER_SIZE : header.total_size])


def is_untouchable(header: BatchHeader) -> bool:
    """Transactional and control batches are kept as they are (see the package notes)."""
    return header.is_transactional or header.is_control


def iter_keys(batch: bytes | memoryview) -> Iterator[tuple[int, bytes | None, bool]]:
    """(offset, key, tombstone) of every record of a batch compaction may touch."""
    header = read_batch_header(batch)
    if is_untouchable(header) or header.record_count == 0:
        return
    for offset, key, tombstone, _start, _end in _scan(
        batch_body(batch, header), header.base_offset, header.record_count
    ):
        yield offset, key, tombstone


def filter_batch(
    batch: bytes | memoryview, keep: Callable[[ScannedRecord], bool]
) -> tuple[bytes | None, int]:
    """The batch with only the records `keep` accepts: (new batch or None when none is
    left, records removed). The original bytes come back when nothing is removed."""
    header = read_batch_header(batch)
    if is_untouchable(header) or header.record_count == 0:
        return bytes(batch), 0
    body = batch_body(batch, header)
    kept = [r for r in scan_body(body, header.base_offset, header.record_count) if keep(r)]
    removed = header.record_count - len(kept)
    if removed == 0:
        return bytes(batch), 0
    if not kept:
        return None, removed
    plain = b"".join(body[r.start : r.end] for r in kept)
    codec = header.compression
    payload = plain if codec == 0 else compress(codec, plain)
    buf = bytearray(BATCH_HEADER_SIZE + len(payload))
    buf[:BATCH_HEADER_SIZE] = memoryview(batch)[:BATCH_HEADER_SIZE]
    buf[BATCH_HEADER_SIZE:] = payload
    _I32.pack_into(buf, _LENGTH_OFFSET, len(buf) - _LOG_OVERHEAD)
    _I32.pack_into(buf, _RECORD_COUNT_OFFSET, len(kept))
    _U32.pack_into(buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return bytes(buf), removed
