"""What a topic's configs do to a Produce request's batches before they are appended.

Three configs change batches, as a Kafka broker's log validator does:
- `compression.type` other than `producer`: a batch whose codec differs is decompressed and
  compressed again with the topic's codec (`uncompressed` stores it plain);
- `message.timestamp.type=LogAppendTime`: the batch is stamped with the append time (the
  timestamp-type attribute bit and maxTimestamp), which the Produce response returns;
- `cleanup.policy` containing `compact`: a record without a key is refused, KIP-467 style
  (INVALID_RECORD with one `record_errors` entry per such record and an error message), and
  nothing of that partition's data is appended.

A rewritten batch keeps every other header field (producer id, epoch, base sequence, record
count, base timestamp), so idempotent-producer checks and duplicate detection see exactly
what the producer sent; only length, attributes, maxTimestamp and the CRC are recomputed.
Topics that set none of these configs pay nothing: `rules_for` returns None and the
request's bytes are appended untouched.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import crc32c

from core.recordbatch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    RecordBatchError,
    compress,
    decode_records,
    decompress,
    split_batches,
)

from ..errors import ErrorCode
from .topic_defs import split_list

CODECS = {
    "uncompressed": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}

# v2 batch header offsets (Kafka's DefaultRecordBatch layout).
_LENGTH_OFFSET = 8
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
_LOG_OVERHEAD = 12
_CODEC_MASK = 0x07
_LOG_APPEND_TIME_BIT = 0x08
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class ProduceRules:
    codec: int | None  # None: keep the producer's
    log_append_time: bool
    keys_required: bool  # cleanup.policy includes compact


def rules_for(configs: Mapping[str, str]) -> ProduceRules | None:
    """The rules of a topic with these configs; None when batches pass through untouched."""
    return _rules(
        configs.get("compression.type", "producer"),
        configs.get("message.timestamp.type"),
        configs.get("cleanup.policy", "delete"),
    )


@lru_cache(maxsize=256)
def _rules(compression: str, timestamp_type: str | None, policy: str) -> ProduceRules | None:
    # Cached: every Produce asks, and parsing the policy list was a visible share of it.
    codec = CODECS.get(compression)
    append_time = timestamp_type == "LogAppendTime"
    compact = "compact" in split_list(policy)
    if codec is None and not append_time and not compact:
        return None
    return ProduceRules(codec, append_time, compact)


@dataclass(slots=True)
class Rewritten:
    records: bytes | memoryview | None
    error: int = ErrorCode.NONE
    message: str | None = None
    record_errors: list[tuple[int, str]] = field(default_factory=list)  # (batch index, why)
    log_append_time: int = -1


def apply_rules(
    rules: ProduceRules,
    records: bytes | memoryview | None,
    topic: str,
    partition: int,
    now_ms: int,
) -> Rewritten:
    """Apply the topic's rules to one partition's records field.

    Invalid input is passed through unchanged so the append path reports it exactly as for
    any other topic (CORRUPT_MESSAGE etc.).
    """
    try:
        batches = split_batches(records or b"")
    except RecordBatchError:
        return Rewritten(records)
    if rules.keys_required:
        errors = _keyless_records(batches, topic, partition)
        if errors:
            shown = "; ".join(f"index {i}: {why}" for i, why in errors[:3])
            return Rewritten(
                records,
                ErrorCode.INVALID_RECORD,
                f"One or more records have been rejected due to {len(errors)} record errors "
                f"in total, and only showing the first three errors at most: [{shown}]",
                errors,
            )
    append_time = now_ms if rules.log_append_time else -1
    changed = False
    out: list[bytes | memoryview] = []
    for header, view in batches:
        target = header.compression if rules.codec is None else rules.codec
        if target == header.compression and not rules.log_append_time:
            out.append(view)
            continue
        try:
            out.append(_rewrite_batch(view, header.compression, target, append_time))
        except RecordBatchError as exc:
            return Rewritten(records, exc.error_code, str(exc))
        changed = True
    if not changed:
        return Rewritten(records, log_append_time=append_time)
    return Rewritten(b"".join(out), log_append_time=append_time)


def _keyless_records(batches: list, topic: str, partition: int) -> list[tuple[int, str]]:
    errors = []
    for _header, view in batches:
        try:
            decoded = decode_records(view)
        except RecordBatchError:
            return []  # corrupt: the append path reports it
        for index, record in enumerate(decoded):
            if record.key is None:
                errors.append(
                    (
                        index,
                        "Compacted topic cannot accept message without key in topic "
                        f"partition {topic}-{partition}.",
                    )
                )
    return errors


def _rewrite_batch(view: memoryview, codec: int, target: int, append_time: int) -> bytes:
    """The batch with its records in codec `target` and, if `append_time` >= 0, stamped
    with it; header fields other than length, attributes, maxTimestamp and CRC are kept."""
    payload: bytes | memoryview = view[BATCH_HEADER_SIZE:]
    if target != codec:
        try:
            plain = decompress(codec, view[BATCH_HEADER_SIZE:])
        except RecordBatchError:
            raise
        except Exception as exc:  # the codecs raise their own error types
            raise RecordBatchError(ErrorCode.CORRUPT_MESSAGE, f"corrupt records: {exc}") from exc
        payload = plain if target == COMPRESSION_NONE else compress(target, plain)
    buf = bytearray(BATCH_HEADER_SIZE + len(payload))
    buf[:BATCH_HEADER_SIZE] = view[:BATCH_HEADER_SIZE]
    buf[BATCH_HEADER_SIZE:] = payload
    _I32.pack_into(buf, _LENGTH_OFFSET, len(buf) - _LOG_OVERHEAD)
    (attributes,) = _I16.unpack_from(buf, _ATTRIBUTES_OFFSET)
    attributes = (attributes & ~_CODEC_MASK) | target
    if append_time >= 0:
        attributes |= _LOG_APPEND_TIME_BIT
        _I64.pack_into(buf, _MAX_TIMESTAMP_OFFSET, append_time)
    _I16.pack_into(buf, _ATTRIBUTES_OFFSET, attributes)
    _U32.pack_into(buf, _CRC_OFFSET, crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return bytes(buf)
