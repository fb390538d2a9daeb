"""Kafka RecordBatch (magic v2) framing, validation, encoding and decoding.

Batch layout (big-endian), as defined by the Kafka protocol::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field
    12 partitionLeaderEpoch  int32
    16 magic                 int8    (at byte 16 for every message format)
    17 crc                   uint32  CRC-32C of bytes [21, end of batch)
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records...            (possibly compressed as one blob)

The hot-path helpers (`split_batches`, `iter_stored_batches`, `patch_*`) only
touch the fixed header; `decode_records` is the one place that decompresses
and walks individual records.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import cramjam
import crc32c

__all__ = [
    "BATCH_HEADER_SIZE",
    "LAST_OFFSET_DELTA_OFFSET",
    "LOG_OVERHEAD",
    "MAX_TIMESTAMP_OFFSET",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CORRUPT_MESSAGE",
    "INVALID_RECORD",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "UNSUPPORTED_COMPRESSION_TYPE",
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "BatchHeader",
    "Record",
    "RecordBatchError",
    "batch_base_and_length",
    "batch_last_offset",
    "batch_max_timestamp",
    "build_batch",
    "decode_records",
    "find_offset_for_timestamp",
    "iter_stored_batches",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "read_batch_header",
    "split_batches",
]

BytesLike: TypeAlias = bytes | bytearray | memoryview
Header: TypeAlias = tuple[str, bytes | None]

# Kafka error codes used by this module.
CORRUPT_MESSAGE = 2
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

# The fixed v2 header, field by field; every byte offset below is derived from it.
_HEADER_FORMAT = ">qiibIhiqqqhii"
_HEADER = struct.Struct(_HEADER_FORMAT)
BATCH_HEADER_SIZE = _HEADER.size  # 61


def _field_offset(index: int) -> int:
    """Byte offset of the header's `index`-th field (0 = baseOffset)."""
    return struct.calcsize(_HEADER_FORMAT[: index + 1])


# baseOffset + batchLength precede the bytes counted by batchLength.
LOG_OVERHEAD = _field_offset(2)
_LOG_OVERHEAD = LOG_OVERHEAD
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - _LOG_OVERHEAD
_PARTITION_LEADER_EPOCH_OFFSET = _field_offset(2)
_MAGIC_OFFSET = _field_offset(3)
_CRC_OFFSET = _field_offset(4)
_ATTRIBUTES_OFFSET = _field_offset(5)
LAST_OFFSET_DELTA_OFFSET = _field_offset(6)
MAX_TIMESTAMP_OFFSET = _field_offset(8)
_MAGIC_V2 = 2

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_BASE_OFFSET_AND_LENGTH = struct.Struct(">qi")
assert (_MAGIC_OFFSET, _ATTRIBUTES_OFFSET, MAX_TIMESTAMP_OFFSET) == (16, 21, 35)

# Java (xerial snappy-java) and kafka-python wrap snappy in this block framing;
# librdkafka and others send a single raw snappy block.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic + int32 version + int32 min-compatible version


class RecordBatchError(Exception):
    """A batch failed validation; `error_code` is the Kafka error code to return."""

    def __init__(self, error_code: int, message: str = "") -> None:
        super().__init__(message or f"record batch error (code {error_code})")
        self.error_code = error_code


@dataclass(slots=True, frozen=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & _TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def total_size(self) -> int:
        return self.batch_length + _LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def read_batch_header(buf: BytesLike, pos: int = 0) -> BatchHeader:
    """Parse the fixed 61-byte v2 header at `pos` (no validation beyond length)."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise RecordBatchError(CORRUPT_MESSAGE, f"truncated batch header at byte {pos}")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def split_batches(records: bytes | memoryview) -> list[tuple[BatchHeader, memoryview]]:
    """Split and validate a Produce request's records field.

    Returns (header, view of the whole batch) pairs; the views share memory with
    `records`. Raises RecordBatchError on the first invalid batch.
    """
    mv = memoryview(records)
    end = len(mv)
    pos = 0
    out: list[tuple[BatchHeader, memoryview]] = []
    while pos < end:
        remaining = end - pos
        # Magic sits at byte 16 in every format, so check it before assuming the
        # (longer) v2 header; a v0/v1 message set can be shorter than 61 bytes.
        if remaining <= _MAGIC_OFFSET:
            raise RecordBatchError(CORRUPT_MESSAGE, f"truncated batch at byte {pos}")
        magic = mv[pos + _MAGIC_OFFSET]
        if magic != _MAGIC_V2:
            if magic in (0, 1):
                raise RecordBatchError(
                    UNSUPPORTED_FOR_MESSAGE_FORMAT, f"magic {magic} batches are not supported"
                )
            raise RecordBatchError(CORRUPT_MESSAGE, f"unknown magic {magic} at byte {pos}")
        (batch_length,) = _I32.unpack_from(mv, pos + 8)
        if batch_length < _MIN_BATCH_LENGTH:
            raise RecordBatchError(CORRUPT_MESSAGE, f"invalid batch length {batch_length}")
        size = batch_length + _LOG_OVERHEAD
        if size > remaining:
            raise RecordBatchError(
                CORRUPT_MESSAGE, f"truncated batch at byte {pos}: need {size}, have {remaining}"
            )
        header = BatchHeader(*_HEADER.unpack_from(mv, pos))
        batch = mv[pos : pos + size]
        if crc32c.crc32c(batch[_ATTRIBUTES_OFFSET:]) != header.crc:
            raise RecordBatchError(CORRUPT_MESSAGE, f"CRC mismatch in batch at byte {pos}")
        count = header.record_count
        if count < 1 or header.last_offset_delta != count - 1:
            raise RecordBatchError(
                INVALID_RECORD,
                f"record count {count} inconsistent with lastOffsetDelta "
                f"{header.last_offset_delta}",
            )
        if header.compression > COMPRESSION_ZSTD:
            raise RecordBatchError(
                UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {header.compression}"
            )
        out.append((header, batch))
        pos += size
    return out


def iter_stored_batches(buf: BytesLike, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (offset_in_buf, header) for each complete batch from `pos` on.

    Lenient: a partial batch at the tail (as in size-limited fetch data) ends the
    iteration silently, and CRCs are not checked. A header that cannot be a v2
    batch at all (wrong magic, impossible length) still raises CORRUPT_MESSAGE,
    since continuing would mean walking garbage.
    """
    # Works on `buf` directly (no memoryview) so a caller's bytearray is not
    # pinned against resizing while this generator is alive.
    while len(buf) - pos >= BATCH_HEADER_SIZE:
        header = BatchHeader(*_HEADER.unpack_from(buf, pos))
        if header.magic != _MAGIC_V2 or header.batch_length < _MIN_BATCH_LENGTH:
            raise RecordBatchError(
                CORRUPT_MESSAGE,
                f"not a v2 batch at byte {pos} (magic {header.magic}, "
                f"length {header.batch_length})",
            )
        size = header.total_size
        if size > len(buf) - pos:
            return
        yield pos, header
        pos += size


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset in place; it lies before the CRC'd range, so the CRC stays valid."""
    _I64.pack_into(buf, pos, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place; also outside the CRC'd range."""
    _I32.pack_into(buf, pos + _PARTITION_LEADER_EPOCH_OFFSET, epoch)


def batch_base_and_length(buf: BytesLike, pos: int = 0) -> tuple[int, int]:
    """(baseOffset, batchLength) of the stored batch at `pos`."""
    base, length = _BASE_OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return base, length


def batch_last_offset(buf: BytesLike, pos: int = 0) -> int:
    """baseOffset + lastOffsetDelta of the stored batch at `pos`."""
    (base,) = _I64.unpack_from(buf, pos)
    (delta,) = _I32.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)
    return int(base + delta)


def batch_max_timestamp(buf: BytesLike, pos: int = 0) -> int:
    (value,) = _I64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)
    return int(value)


# --- record-level decoding (not for the hot path) -------------------------------------------


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint/varlong at `pos`; returns (value, new_pos).

    Raises IndexError when data runs out and ValueError for over-long encodings;
    decode_records turns both into CORRUPT_MESSAGE.
    """
    b = data[pos]
    if b < 0x80:  # single-byte fast path: most lengths and deltas
        return (b >> 1) ^ -(b & 1), pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos + 1
        shift += 7
        if shift >= 70:  # more than 10 bytes cannot be a 64-bit varlong
            raise ValueError("varint too long")


def _decompress_xerial(data: memoryview) -> bytes:
    pos = _XERIAL_HEADER_SIZE  # version/compat ignored: some producers write them little-endian
    end = len(data)
    chunks: list[bytes] = []
    while pos < end:
        if end - pos < 4:
            raise ValueError("truncated xerial block length")
        (block_len,) = _I32.unpack_from(data, pos)
        pos += 4
        if block_len < 0 or block_len > end - pos:
            raise ValueError("bad xerial block length")
        chunks.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + block_len])))
        pos += block_len
    return b"".join(chunks)


def decompress(codec: int, body: memoryview) -> bytes:
    if codec == COMPRESSION_NONE:
        return bytes(body)
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.decompress(body))
    if codec == COMPRESSION_SNAPPY:
        if len(body) >= _XERIAL_HEADER_SIZE and body[:8] == _XERIAL_MAGIC:
            return _decompress_xerial(body)
        return bytes(cramjam.snappy.decompress_raw(body))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.decompress(body))  # LZ4 frame format (KIP-57)
    if codec == COMPRESSION_ZSTD:
        # Streaming producers omit the frame content size; cramjam copes with that.
        return bytes(cramjam.zstd.decompress(body))
    raise RecordBatchError(UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {codec}")


def _parse_records(data: bytes, header: BatchHeader) -> list[Record]:
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    # With LOG_APPEND_TIME the broker's time in maxTimestamp overrides every record.
    append_ts = header.max_timestamp if header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME else None
    read = _read_varint
    n = len(data)
    pos = 0
    records: list[Record] = []
    for _ in range(header.record_count):
        length, pos = read(data, pos)
        end = pos + length
        if length < 1 or end > n:
            raise ValueError(f"record length {length} out of bounds")
        pos += 1  # record attributes: unused in v2
        ts_delta, pos = read(data, pos)
        offset_delta, pos = read(data, pos)

        key_len, pos = read(data, pos)
        key: bytes | None = None
        if key_len >= 0:
            key = data[pos : pos + key_len]
            pos += key_len
        elif key_len != -1:
            raise ValueError(f"bad key length {key_len}")

        value_len, pos = read(data, pos)
        value: bytes | None = None
        if value_len >= 0:
            value = data[pos : pos + value_len]
            pos += value_len
        elif value_len != -1:
            raise ValueError(f"bad value length {value_len}")

        header_count, pos = read(data, pos)
        # Each header takes at least 2 bytes; bounding the count stops a tiny
        # record from claiming billions of empty headers.
        if header_count < 0 or header_count * 2 > end - pos:
            raise ValueError(f"bad header count {header_count}")
        headers: list[Header] = []
        for _ in range(header_count):
            hkey_len, pos = read(data, pos)
            if hkey_len < 0:
                raise ValueError("null header key")
            hkey = data[pos : pos + hkey_len].decode("utf-8")
            pos += hkey_len
            hval_len, pos = read(data, pos)
            hval: bytes | None = None
            if hval_len >= 0:
                hval = data[pos : pos + hval_len]
                pos += hval_len
            elif hval_len != -1:
                raise ValueError(f"bad header value length {hval_len}")
            headers.append((hkey, hval))

        # Also catches fields that ran past the record (slices silently clamp).
        if pos != end:
            raise ValueError("record length does not match its contents")
        timestamp = base_ts + ts_delta if append_ts is None else append_ts
        records.append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if pos != n:
        raise ValueError(f"{n - pos} trailing bytes after {header.record_count} records")
    return records


def decode_records(batch: bytes | memoryview) -> list[Record]:
    """Decompress a single v2 batch and decode all of its records (CRC is not checked)."""
    header = read_batch_header(batch)
    if header.magic != _MAGIC_V2:
        code = UNSUPPORTED_FOR_MESSAGE_FORMAT if header.magic in (0, 1) else CORRUPT_MESSAGE
        raise RecordBatchError(code, f"magic {header.magic} batch")
    total = header.total_size
    if header.batch_length < _MIN_BATCH_LENGTH or total > len(batch):
        raise RecordBatchError(CORRUPT_MESSAGE, f"bad or truncated batch length {total}")
    if header.record_count < 0:
        raise RecordBatchError(CORRUPT_MESSAGE, f"negative record count {header.record_count}")
    if header.record_count == 0:
        # Compaction can leave empty batches behind to keep producer state.
        return []
    body = memoryview(batch)[BATCH_HEADER_SIZE:total]
    try:
        return _parse_records(decompress(header.compression, body), header)
    except (IndexError, ValueError, cramjam.DecompressionError) as exc:
        raise RecordBatchError(CORRUPT_MESSAGE, f"corrupt records: {exc}") from exc


def find_offset_for_timestamp(batch: bytes | memoryview, target_ms: int) -> int | None:
    """Offset of the first record in `batch` with timestamp >= target_ms, else None."""
    header = read_batch_header(batch)
    if header.max_timestamp < target_ms:
        return None  # nothing in this batch can match; skip decompression
    for record in decode_records(batch):
        if record.timestamp >= target_ms:
            return record.offset
    return None


# --- encoding ----------------------------------------------------------------------------


def _write_varint(out: bytearray, value: int) -> None:
    v = value << 1 if value >= 0 else (-value << 1) - 1  # zigzag
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def compress(codec: int, data: bytes) -> bytes:
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        # Java's KafkaLZ4BlockInputStream rejects frames with linked blocks.
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[Header]]],
    *,
    compression: int = COMPRESSION_NONE,
    base_offset: int = 0,
    base_timestamp_ms: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamps: Sequence[int] | None = None,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode (key, value, headers) tuples as one v2 batch with a valid CRC.

    Every record gets `base_timestamp_ms` (default: now) unless per-record
    `timestamps` are given; then the base defaults to the first of them.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if timestamps is not None and len(timestamps) != len(records):
        raise ValueError("timestamps must match records one to one")
    if base_timestamp_ms is None:
        base_timestamp_ms = timestamps[0] if timestamps else int(time.time() * 1000)
    if timestamps is None:
        timestamps = [base_timestamp_ms] * len(records)

    body = bytearray()
    rec = bytearray()
    for i, ((key, value, headers), ts) in enumerate(zip(records, timestamps, strict=True)):
        rec.clear()
        rec.append(0)  # record attributes
        _write_varint(rec, ts - base_timestamp_ms)
        _write_varint(rec, i)
        _write_bytes(rec, key)
        _write_bytes(rec, value)
        _write_varint(rec, len(headers))
        for hkey, hval in headers:
            _write_bytes(rec, hkey.encode("utf-8"))
            _write_bytes(rec, hval)
        _write_varint(body, len(rec))
        body += rec

    payload = bytes(body) if compression == COMPRESSION_NONE else compress(compression, bytes(body))
    attributes = compression
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT

    buf = bytearray(BATCH_HEADER_SIZE + len(payload))
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - _LOG_OVERHEAD,
        -1,  # partitionLeaderEpoch: set by the broker
        _MAGIC_V2,
        0,  # CRC placeholder, filled in below
        attributes,
        len(records) - 1,
        base_timestamp_ms,
        max(timestamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[BATCH_HEADER_SIZE:] = payload
    _U32.pack_into(buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return bytes(buf)


# --- transaction markers (control batches) ------------------------------------------------

CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def build_control_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0
) -> bytes:
    """A transaction marker: one control record (commit or abort) in a batch with the
    control and transactional attribute bits, as Kafka writes into every partition the
    transaction touched."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value, ())],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def control_type(batch: BytesLike) -> int | None:
    """CONTROL_COMMIT / CONTROL_ABORT of a control batch (None if it is not a marker)."""
    header = read_batch_header(batch)
    if not header.is_control:
        return None
    records = decode_records(memoryview(batch))
    if not records or records[0].key is None or len(records[0].key) < _CONTROL_KEY.size:
        return None
    _version, kind = _CONTROL_KEY.unpack_from(records[0].key)
    return kind if kind in (CONTROL_ABORT, CONTROL_COMMIT) else None
