"""Tests for core.recordbatch (Kafka RecordBatch v2)."""

from __future__ import annotations

import dataclasses
import struct
import time
import zlib
from typing import Any

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.recordbatch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    TIMESTAMP_LOG_APPEND_TIME,
    UNSUPPORTED_COMPRESSION_TYPE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    BatchHeader,
    Record,
    RecordBatchError,
    build_batch,
    decode_records,
    find_offset_for_timestamp,
    iter_stored_batches,
    patch_base_offset,
    patch_partition_leader_epoch,
    read_batch_header,
    split_batches,
)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]
CODEC_IDS = ["none", "gzip", "snappy", "lz4", "zstd"]

# Written out independently of the module under test, as a cross-check of the layout.
HEADER = struct.Struct(">qiibIhiqqqhii")
FIELDS = [f.name for f in dataclasses.fields(BatchHeader)]

SAMPLE: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"key-1", b"value-1", []),
    (None, b"value with null key", [("trace", b"abc"), ("empty", b"")]),
    (b"tombstone", None, [("null-value", None)]),
    (None, None, []),
    (b"", b"", [("ключ", b"\x00\xff")]),
    (b"big", b"x" * 5000, [("h", b"y" * 300)]),
]


def expected(records, base_offset: int, timestamps: list[int]) -> list[Record]:
    return [
        Record(base_offset + i, ts, k, v, list(h))
        for i, ((k, v, h), ts) in enumerate(zip(records, timestamps, strict=True))
    ]


def rebuild(batch: bytes, payload: bytes | None = None, **overrides: Any) -> bytes:
    """Re-assemble `batch` with header fields and/or payload replaced.

    batchLength and the CRC are recomputed unless explicitly overridden.
    """
    values = dict(zip(FIELDS, HEADER.unpack_from(batch), strict=True))
    body = batch[BATCH_HEADER_SIZE:] if payload is None else payload
    values["batch_length"] = BATCH_HEADER_SIZE - 12 + len(body)
    values.update(overrides)
    buf = bytearray(HEADER.pack(*(values[name] for name in FIELDS)) + body)
    if "crc" not in overrides:
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def legacy_message(magic: int, key: bytes, value: bytes, offset: int = 0) -> bytes:
    """A single v0/v1 message in a message set (zlib CRC32 over magic..end)."""
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", 1_700_000_000_000)
    body += struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def assert_error(code: int, func: Any, *args: Any) -> RecordBatchError:
    with pytest.raises(RecordBatchError) as info:
        func(*args)
    assert info.value.error_code == code, info.value
    return info.value


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_round_trip_every_codec(codec: int) -> None:
    batch = build_batch(
        SAMPLE,
        compression=codec,
        base_offset=1000,
        base_timestamp_ms=1_700_000_000_000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
    )
    [(header, view)] = split_batches(batch)
    assert bytes(view) == batch
    assert header.magic == 2
    assert header.compression == codec
    assert header.record_count == len(SAMPLE)
    assert header.last_offset_delta == len(SAMPLE) - 1
    assert header.base_offset == 1000
    assert header.last_offset == 1000 + len(SAMPLE) - 1
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)
    assert header.total_size == len(batch)
    assert not header.is_transactional and not header.is_control
    assert header.timestamp_type == 0
    ts = [1_700_000_000_000] * len(SAMPLE)
    assert decode_records(batch) == expected(SAMPLE, 1000, ts)
    assert decode_records(view) == expected(SAMPLE, 1000, ts)


@pytest.mark.parametrize("codec", CODECS[1:], ids=CODEC_IDS[1:])
def test_compressed_batches_are_smaller(codec: int) -> None:
    records = [(None, b"the same value again and again " * 20, [])] * 20
    plain = build_batch(records, compression=COMPRESSION_NONE, base_timestamp_ms=0)
    packed = build_batch(records, compression=codec, base_timestamp_ms=0)
    assert len(packed) < len(plain)
    assert decode_records(packed) == decode_records(plain)


def test_lz4_frames_use_independent_blocks() -> None:
    # Java's KafkaLZ4BlockInputStream rejects frames with linked blocks.
    batch = build_batch([(None, b"a" * 1000, [])], compression=COMPRESSION_LZ4)
    frame = batch[BATCH_HEADER_SIZE:]
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert frame[4] & 0x20, "FLG.B.Indep must be set"


def test_snappy_is_written_raw() -> None:
    batch = build_batch([(None, b"payload" * 10, [])], compression=COMPRESSION_SNAPPY)
    body = batch[BATCH_HEADER_SIZE:]
    assert not body.startswith(b"\x82SNAPPY\x00")
    cramjam.snappy.decompress_raw(body)  # must not raise


def test_build_batch_defaults() -> None:
    before = int(time.time() * 1000)
    batch = build_batch([(b"k", b"v", [])])
    after = int(time.time() * 1000)
    header = read_batch_header(batch)
    assert before <= header.base_timestamp <= after
    assert header.max_timestamp == header.base_timestamp
    assert header.partition_leader_epoch == -1
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v", [])], compression=6)


def test_per_record_timestamps_and_negative_deltas() -> None:
    timestamps = [5000, 1000, 9000, 4000]
    records = [(None, b"v%d" % i, []) for i in range(4)]
    batch = build_batch(records, timestamps=timestamps)
    header = read_batch_header(batch)
    assert header.base_timestamp == 5000
    assert header.max_timestamp == 9000
    assert [r.timestamp for r in decode_records(batch)] == timestamps


def test_multiple_batches_split_in_order() -> None:
    first = build_batch(SAMPLE[:2], compression=COMPRESSION_GZIP, base_timestamp_ms=1)
    second = build_batch(SAMPLE[2:], compression=COMPRESSION_ZSTD, base_timestamp_ms=2)
    parts = split_batches(first + second)
    assert [bytes(view) for _, view in parts] == [first, second]
    assert [h.record_count for h, _ in parts] == [2, len(SAMPLE) - 2]
    # Views share the request buffer instead of copying it.
    data = bytearray(first + second)
    views = split_batches(memoryview(data))
    data[len(first)] ^= 0xFF
    assert views[1][1][0] == data[len(first)]


def test_empty_input() -> None:
    assert split_batches(b"") == []
    assert split_batches(memoryview(b"")) == []
    assert list(iter_stored_batches(b"")) == []


# --- header parsing ------------------------------------------------------------------------


def test_read_batch_header_fields_and_flags() -> None:
    base = build_batch([(None, b"x", [])] * 3, base_timestamp_ms=100)
    attributes = COMPRESSION_ZSTD | 0x08 | 0x10 | 0x20
    batch = rebuild(base, base_offset=77, partition_leader_epoch=9, attributes=attributes)
    padded = b"\x00" * 5 + batch
    header = read_batch_header(memoryview(padded), 5)
    assert header == read_batch_header(bytearray(batch))
    assert header.base_offset == 77
    assert header.partition_leader_epoch == 9
    assert header.compression == COMPRESSION_ZSTD
    assert header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert header.is_transactional
    assert header.is_control
    assert header.total_size == len(batch)
    assert header.record_count == 3
    assert_error(CORRUPT_MESSAGE, read_batch_header, batch[:60])
    assert_error(CORRUPT_MESSAGE, read_batch_header, batch, len(batch) - 10)


def test_transactional_flag_from_builder() -> None:
    batch = build_batch(
        [(b"k", b"v", [])], producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    assert read_batch_header(batch).is_transactional


# --- validation errors ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_crc_mismatch_is_corrupt(codec: int) -> None:
    batch = build_batch(SAMPLE, compression=codec, base_timestamp_ms=0)
    for position in (21, 22, 30, 60, BATCH_HEADER_SIZE + 3, len(batch) - 1):
        damaged = bytearray(batch)
        damaged[position] ^= 0x01
        err = assert_error(CORRUPT_MESSAGE, split_batches, bytes(damaged))
        assert "CRC" in str(err)
    wrong_crc = bytearray(batch)
    wrong_crc[17] ^= 0x80
    assert_error(CORRUPT_MESSAGE, split_batches, bytes(wrong_crc))


def test_truncated_is_corrupt() -> None:
    batch = build_batch(SAMPLE, compression=COMPRESSION_NONE)
    for cut in (1, 10, 16, 17, 40, BATCH_HEADER_SIZE, len(batch) - 1):
        assert_error(CORRUPT_MESSAGE, split_batches, batch[:cut])
    # A complete batch followed by a partial one is still rejected for produce.
    assert_error(CORRUPT_MESSAGE, split_batches, batch + batch[:100])
    assert_error(CORRUPT_MESSAGE, split_batches, batch + b"\x00")
    assert_error(CORRUPT_MESSAGE, decode_records, batch[:-1])


def test_bad_batch_length_is_corrupt() -> None:
    batch = build_batch([(b"k", b"v", [])])
    for length in (-1, 0, 48):
        bad = bytearray(batch)
        struct.pack_into(">i", bad, 8, length)
        assert_error(CORRUPT_MESSAGE, split_batches, bytes(bad))
        assert_error(CORRUPT_MESSAGE, decode_records, bytes(bad))
        with pytest.raises(RecordBatchError):
            list(iter_stored_batches(bytes(bad)))


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_is_unsupported(magic: int) -> None:
    message = legacy_message(magic, b"k", b"v")
    assert len(message) < BATCH_HEADER_SIZE  # shorter than a v2 header
    assert_error(UNSUPPORTED_FOR_MESSAGE_FORMAT, split_batches, message)
    long_message = legacy_message(magic, b"key", b"v" * 200)
    assert_error(UNSUPPORTED_FOR_MESSAGE_FORMAT, split_batches, long_message)
    assert_error(UNSUPPORTED_FOR_MESSAGE_FORMAT, decode_records, long_message)
    # Also after a valid v2 batch.
    v2 = build_batch([(b"k", b"v", [])])
    assert_error(UNSUPPORTED_FOR_MESSAGE_FORMAT, split_batches, v2 + message)


def test_unknown_magic_is_corrupt() -> None:
    batch = rebuild(build_batch([(b"k", b"v", [])]), magic=3)
    assert_error(CORRUPT_MESSAGE, split_batches, batch)


def test_record_count_checks_are_invalid_record() -> None:
    base = build_batch([(b"a", b"1", []), (b"b", b"2", [])])
    assert_error(INVALID_RECORD, split_batches, rebuild(base, record_count=0, last_offset_delta=-1))
    assert_error(INVALID_RECORD, split_batches, rebuild(base, record_count=0))
    assert_error(INVALID_RECORD, split_batches, rebuild(base, last_offset_delta=5))
    assert_error(INVALID_RECORD, split_batches, rebuild(base, record_count=-3))
    assert_error(INVALID_RECORD, split_batches, rebuild(base, record_count=3, last_offset_delta=1))


def test_unknown_codec_is_rejected() -> None:
    batch = rebuild(build_batch([(b"k", b"v", [])]), attributes=5)
    assert_error(UNSUPPORTED_COMPRESSION_TYPE, split_batches, batch)
    assert_error(UNSUPPORTED_COMPRESSION_TYPE, decode_records, batch)


def test_error_carries_message() -> None:
    err = RecordBatchError(CORRUPT_MESSAGE, "boom")
    assert err.error_code == CORRUPT_MESSAGE and str(err) == "boom"
    assert RecordBatchError(INVALID_RECORD).error_code == INVALID_RECORD


# --- in-place patching ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_LZ4], ids=["none", "lz4"])
def test_patch_base_offset_keeps_crc_valid(codec: int) -> None:
    first = build_batch(SAMPLE[:2], compression=codec)
    second = build_batch(SAMPLE[2:], compression=codec)
    buf = bytearray(first + second)
    patch_base_offset(buf, 0, 500)
    patch_base_offset(memoryview(buf), len(first), 502)
    patch_partition_leader_epoch(buf, 0, 11)
    patch_partition_leader_epoch(memoryview(buf), len(first), 12)
    (h1, v1), (h2, v2) = split_batches(bytes(buf))  # CRC still verifies
    assert (h1.base_offset, h1.partition_leader_epoch) == (500, 11)
    assert (h2.base_offset, h2.partition_leader_epoch) == (502, 12)
    assert [r.offset for r in decode_records(v1)] == [500, 501]
    assert [r.offset for r in decode_records(v2)] == list(range(502, 502 + len(SAMPLE) - 2))
    assert h1.crc == read_batch_header(first).crc


# --- lenient iteration over stored data ----------------------------------------------------


def test_iter_stored_batches_stops_at_partial_tail() -> None:
    batches = [build_batch(SAMPLE[i : i + 2], base_offset=i) for i in range(0, 6, 2)]
    log = b"".join(batches)
    offsets = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    found = list(iter_stored_batches(log))
    assert [pos for pos, _ in found] == offsets
    assert [h.base_offset for _, h in found] == [0, 2, 4]
    assert [pos for pos, _ in iter_stored_batches(log + batches[0][:70])] == offsets
    assert [pos for pos, _ in iter_stored_batches(log + batches[0][:20])] == offsets
    assert [pos for pos, _ in iter_stored_batches(log[:-1])] == offsets[:2]
    assert [pos for pos, _ in iter_stored_batches(memoryview(log), offsets[1])] == offsets[1:]
    # No CRC check: the caller decides.
    damaged = bytearray(log)
    damaged[offsets[1] + 30] ^= 0xFF
    assert len(list(iter_stored_batches(damaged))) == 3


def test_iter_stored_batches_rejects_garbage() -> None:
    batch = build_batch([(b"k", b"v", [])])
    gen = iter_stored_batches(batch + b"\x00" * 70)
    assert next(gen)[0] == 0
    with pytest.raises(RecordBatchError) as info:
        next(gen)
    assert info.value.error_code == CORRUPT_MESSAGE


# --- decoding details ----------------------------------------------------------------------


def xerial_frame(data: bytes, block_size: int, *, little_endian_version: bool = False) -> bytes:
    fmt = "<ii" if little_endian_version else ">ii"
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(fmt, 1, 1))
    for i in range(0, len(data), block_size):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + block_size]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


@pytest.mark.parametrize("little_endian_version", [False, True])
def test_xerial_snappy_framing(little_endian_version: bool) -> None:
    plain = build_batch(SAMPLE, base_offset=10, base_timestamp_ms=123)
    body = plain[BATCH_HEADER_SIZE:]
    framed = xerial_frame(body, 1000, little_endian_version=little_endian_version)
    assert len(body) > 3 * 1000  # several xerial blocks
    batch = rebuild(plain, framed, attributes=COMPRESSION_SNAPPY)
    [(header, _)] = split_batches(batch)
    assert header.compression == COMPRESSION_SNAPPY
    assert decode_records(batch) == decode_records(plain)


def test_xerial_snappy_bad_block_length_is_corrupt() -> None:
    plain = build_batch([(b"k", b"v" * 100, [])])
    framed = bytearray(xerial_frame(plain[BATCH_HEADER_SIZE:], 64))
    struct.pack_into(">i", framed, 16, 10_000)
    batch = rebuild(plain, bytes(framed), attributes=COMPRESSION_SNAPPY)
    assert_error(CORRUPT_MESSAGE, decode_records, batch)
    truncated = rebuild(plain, bytes(framed[:18]), attributes=COMPRESSION_SNAPPY)
    assert_error(CORRUPT_MESSAGE, decode_records, truncated)


def test_zstd_frame_without_content_size() -> None:
    plain = build_batch(SAMPLE, base_timestamp_ms=5)
    compressor = cramjam.zstd.Compressor()  # streaming: size unknown when the header is written
    compressor.compress(plain[BATCH_HEADER_SIZE:])
    frame = bytes(compressor.finish())
    assert frame[:4] == b"\x28\xb5\x2f\xfd"
    descriptor = frame[4]
    assert descriptor & 0xC0 == 0 and not descriptor & 0x20, "frame must omit content size"
    batch = rebuild(plain, frame, attributes=COMPRESSION_ZSTD)
    assert decode_records(batch) == decode_records(plain)


def test_gzip_and_zstd_multi_member_payloads() -> None:
    plain = build_batch(SAMPLE, base_timestamp_ms=5)
    body = plain[BATCH_HEADER_SIZE:]
    half = len(body) // 2
    gz = bytes(cramjam.gzip.compress(body[:half])) + bytes(cramjam.gzip.compress(body[half:]))
    zs = bytes(cramjam.zstd.compress(body[:half])) + bytes(cramjam.zstd.compress(body[half:]))
    assert decode_records(rebuild(plain, gz, attributes=COMPRESSION_GZIP)) == decode_records(plain)
    assert decode_records(rebuild(plain, zs, attributes=COMPRESSION_ZSTD)) == decode_records(plain)


def test_empty_batch_decodes_to_nothing() -> None:
    # Compaction may leave record-less batches behind; reading them is fine.
    batch = rebuild(build_batch([(b"k", b"v", [])]), b"", record_count=0)
    assert decode_records(batch) == []


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # no records at all
        b"\x01",  # record length 0 (zigzag 1 = -1)
        b"\x7e" + b"\x00" * 10,  # record longer than the data
        b"\xff" * 12,  # over-long varint
    ],
)
def test_malformed_records_are_corrupt(payload: bytes) -> None:
    batch = rebuild(build_batch([(b"k", b"v", [])]), payload)
    assert_error(CORRUPT_MESSAGE, decode_records, batch)


def test_record_count_mismatch_and_trailing_bytes_are_corrupt() -> None:
    batch = build_batch([(b"k", b"v", []), (b"k2", b"v2", [])])
    assert_error(CORRUPT_MESSAGE, decode_records, rebuild(batch, record_count=3))
    assert_error(CORRUPT_MESSAGE, decode_records, rebuild(batch, record_count=1))
    garbled = rebuild(batch, b"\x00" * 4, attributes=COMPRESSION_GZIP)
    assert_error(CORRUPT_MESSAGE, decode_records, garbled)


def test_huge_header_count_fails_fast() -> None:
    # attributes, ts delta, offset delta, null key, null value, header count 2**30
    record = b"\x00\x00\x00\x01\x01" + b"\x80\x80\x80\x80\x08"
    payload = bytes([len(record) * 2]) + record  # zigzag length
    batch = rebuild(build_batch([(b"k", b"v", [])]), payload)
    start = time.monotonic()
    assert_error(CORRUPT_MESSAGE, decode_records, batch)
    assert time.monotonic() - start < 1


def test_invalid_utf8_header_key_is_corrupt() -> None:
    good = build_batch([(None, None, [("ab", b"v")])])
    body = bytearray(good[BATCH_HEADER_SIZE:])
    position = bytes(body).index(b"ab")
    body[position : position + 2] = b"\xff\xfe"
    assert_error(CORRUPT_MESSAGE, decode_records, rebuild(good, bytes(body)))


# --- timestamps ----------------------------------------------------------------------------


def test_find_offset_for_timestamp_create_time() -> None:
    timestamps = [100, 300, 200, 400]
    batch = build_batch([(None, b"v", [])] * 4, base_offset=50, timestamps=timestamps)
    assert find_offset_for_timestamp(batch, 0) == 50
    assert find_offset_for_timestamp(batch, 100) == 50
    assert find_offset_for_timestamp(batch, 150) == 51
    assert find_offset_for_timestamp(batch, 250) == 51  # first match, not the closest
    assert find_offset_for_timestamp(batch, 301) == 53
    assert find_offset_for_timestamp(batch, 401) is None


def test_find_offset_for_timestamp_log_append_time() -> None:
    batch = build_batch(
        [(None, b"v", [])] * 3,
        base_offset=7,
        timestamps=[100, 200, 300],
        timestamp_type=TIMESTAMP_LOG_APPEND_TIME,
    )
    header = read_batch_header(batch)
    assert header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert [r.timestamp for r in decode_records(batch)] == [300, 300, 300]
    assert find_offset_for_timestamp(batch, 250) == 7
    assert find_offset_for_timestamp(batch, 300) == 7
    assert find_offset_for_timestamp(batch, 301) is None


# --- hypothesis ----------------------------------------------------------------------------

header_st = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=24))
record_st = st.tuples(
    st.none() | st.binary(max_size=64),
    st.none() | st.binary(max_size=256),
    st.lists(header_st, max_size=4),
)


@st.composite
def record_lists(draw: st.DrawFn) -> tuple[list[Any], list[int]]:
    records = draw(st.lists(record_st, min_size=1, max_size=25))
    base = draw(st.integers(0, 2**45))
    timestamps = draw(
        st.lists(
            st.integers(base - 2**40, base + 2**40), min_size=len(records), max_size=len(records)
        )
    )
    return records, timestamps


@settings(deadline=None, max_examples=150)
@given(
    data=record_lists(),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
)
def test_hypothesis_round_trip(
    data: tuple[list[Any], list[int]], codec: int, base_offset: int
) -> None:
    records, timestamps = data
    batch = build_batch(records, compression=codec, base_offset=base_offset, timestamps=timestamps)
    [(header, view)] = split_batches(batch)
    assert header.record_count == len(records)
    assert header.max_timestamp == max(timestamps)
    assert decode_records(view) == expected(records, base_offset, timestamps)


def _valid_batches() -> list[bytes]:
    return [build_batch(SAMPLE[:3], compression=c, base_timestamp_ms=1) for c in CODECS]


@st.composite
def mangled_batches(draw: st.DrawFn) -> bytes:
    """Valid batches with random damage: cuts, flipped bytes, inserted junk."""
    data = bytearray(b"".join(draw(st.lists(st.sampled_from(_valid_batches()), max_size=3))))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        position = draw(st.integers(0, len(data)))
        if op == "flip" and position < len(data):
            data[position] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[position:]
        else:
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def _only_batch_errors(data: bytes) -> None:
    try:
        for _, view in split_batches(data):
            decode_records(view)
    except RecordBatchError as err:
        assert err.error_code in (
            CORRUPT_MESSAGE,
            INVALID_RECORD,
            UNSUPPORTED_FOR_MESSAGE_FORMAT,
            UNSUPPORTED_COMPRESSION_TYPE,
        )
    try:
        for pos, _header in iter_stored_batches(data):
            decode_records(memoryview(data)[pos:])
    except RecordBatchError:
        pass


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=300))
def test_hypothesis_random_bytes_only_raise_batch_errors(data: bytes) -> None:
    _only_batch_errors(data)


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(mangled_batches())
def test_hypothesis_mangled_batches_only_raise_batch_errors(data: bytes) -> None:
    _only_batch_errors(data)


@settings(deadline=None, max_examples=300)
@given(payload=st.binary(max_size=200), codec=st.sampled_from(CODECS), count=st.integers(-2, 40))
def test_hypothesis_random_payload_with_valid_crc(payload: bytes, codec: int, count: int) -> None:
    # Random bodies behind a correct header/CRC reach the decompressors and record parser.
    batch = rebuild(
        build_batch([(b"k", b"v", [])]),
        payload,
        attributes=codec,
        record_count=count,
        last_offset_delta=count - 1,
    )
    _only_batch_errors(batch)


# --- cross-checks against real client encoders/decoders ------------------------------------

CLIENT_RECORDS = [
    (
        b"key-%d" % i if i % 3 else None,
        None if i == 4 else b"value %d " % i * 40,
        [(f"h{j}", b"x" * j if j else None) for j in range(i % 3)],
    )
    for i in range(12)
]


def _client_batch(builder_cls: Any, codec: int) -> bytes:
    builder = builder_cls(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (key, value, headers) in enumerate(CLIENT_RECORDS):
        assert builder.append(i, 1_700_000_000_000 + i, key, value, headers) is not None
    return bytes(builder.build())


def _check_client_batch(batch: bytes, codec: int) -> None:
    [(header, view)] = split_batches(batch)
    assert header.compression == codec  # the client did not fall back to no compression
    timestamps = [1_700_000_000_000 + i for i in range(len(CLIENT_RECORDS))]
    assert decode_records(view) == expected(CLIENT_RECORDS, 0, timestamps)


def _kafka_python_has_codec(codec: int) -> bool:
    from kafka import codec as kcodec

    checks = {
        COMPRESSION_NONE: lambda: True,
        COMPRESSION_GZIP: kcodec.has_gzip,
        COMPRESSION_SNAPPY: kcodec.has_snappy,
        COMPRESSION_LZ4: kcodec.has_lz4,
        COMPRESSION_ZSTD: kcodec.has_zstd,
    }
    return bool(checks[codec]())


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_encoded_batches_decode(codec: int) -> None:
    default_records = pytest.importorskip("kafka.record.default_records")
    if not _kafka_python_has_codec(codec):
        pytest.skip(
            f"kafka-python needs python-snappy/lz4/zstandard to encode codec {codec}; "
            "not installed here (aiokafka covers this codec below)"
        )
    batch = _client_batch(default_records.DefaultRecordBatchBuilder, codec)
    if codec == COMPRESSION_SNAPPY:
        assert batch[BATCH_HEADER_SIZE:].startswith(b"\x82SNAPPY\x00")  # xerial framing
    _check_client_batch(batch, codec)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_aiokafka_encoded_batches_decode(codec: int) -> None:
    # aiokafka compresses with cramjam, and frames snappy the xerial way like the Java client.
    default_records = pytest.importorskip("aiokafka.record.default_records")
    batch = _client_batch(default_records.DefaultRecordBatchBuilder, codec)
    if codec == COMPRESSION_SNAPPY:
        assert batch[BATCH_HEADER_SIZE:].startswith(b"\x82SNAPPY\x00")
    _check_client_batch(batch, codec)


def _client_reads(batch_cls: Any, batch: bytes) -> list[tuple[Any, ...]]:
    reader = batch_cls(batch)
    assert reader.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in reader]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_our_batches_decode_in_clients(codec: int) -> None:
    batch = build_batch(SAMPLE, compression=codec, base_offset=3, base_timestamp_ms=99)
    want = [(3 + i, 99, k, v, h) for i, (k, v, h) in enumerate(SAMPLE)]
    aio = pytest.importorskip("aiokafka.record.default_records")
    assert _client_reads(aio.DefaultRecordBatch, batch) == want
    kafka_python = pytest.importorskip("kafka.record.default_records")
    if _kafka_python_has_codec(codec):
        assert _client_reads(kafka_python.DefaultRecordBatch, batch) == want
