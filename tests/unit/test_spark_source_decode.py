"""spark_source/decode.py against the reference decoder (core/recordbatch.decode_records):
the same rows, column by column, for every shape of record the format allows."""

from __future__ import annotations

from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from core.recordbatch import (  # noqa: E402
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    TIMESTAMP_LOG_APPEND_TIME,
    build_batch,
    decode_records,
    read_batch_header,
)
from spark_source.decode import ArrowColumns, DecodeError  # noqa: E402

FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
]
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema(FIELDS)
SCHEMA_HEADERS = pa.schema([*FIELDS, ("headers", HEADERS)])


def _records(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []
    for i in range(n):
        key = None if i % 7 == 3 else b"k%d" % i
        value = None if i % 11 == 5 else b"" if i % 13 == 1 else bytes([i % 251]) * (i * 97 % 20000)
        headers = [("h", b"%d" % i), ("empty", None)] if i % 5 == 0 else []
        out.append((key, value, headers))
    return out


def _expected(batches: list[bytes], start: int, end: int, headers: bool) -> list[dict[str, Any]]:
    rows = []
    for batch in batches:
        kind = read_batch_header(batch).timestamp_type
        for r in decode_records(batch):
            if start <= r.offset < end:
                row = {"key": r.key, "value": r.value, "offset": r.offset, "ts": r.timestamp}
                row["type"] = kind
                if headers:
                    row["headers"] = [{"key": k, "value": v} for k, v in r.headers]
                rows.append(row)
    return rows


def _decoded(batches: list[bytes], start: int, end: int, headers: bool) -> list[dict[str, Any]]:
    columns = ArrowColumns("topic-é", 4, start, end, headers)
    out = []
    for batch in batches:
        columns.add(read_batch_header(batch), batch)
        if columns.rows >= 50:
            out.append(columns.flush(SCHEMA_HEADERS if headers else SCHEMA))
    out.append(columns.flush(SCHEMA_HEADERS if headers else SCHEMA))
    table = pa.Table.from_batches(out)
    assert set(table.column("topic").to_pylist()) <= {"topic-é"}
    assert set(table.column("partition").to_pylist()) <= {4}
    rows = []
    for r in table.to_pylist():
        row = {"key": r["key"], "value": r["value"], "offset": r["offset"]}
        row["ts"] = int(r["timestamp"].timestamp() * 1000)
        row["type"] = r["timestampType"]
        if headers:
            row["headers"] = r["headers"]
        rows.append(row)
    return rows


@pytest.mark.parametrize(
    "codec",
    [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD],
)
@pytest.mark.parametrize("headers", [False, True])
def test_rows_equal_the_reference_decoder(codec: int, headers: bool) -> None:
    records = _records(240)
    batches = [
        build_batch(
            records[i : i + 60],
            compression=codec,
            base_offset=1000 + i,
            timestamps=[1_700_000_000_000 + 3 * j for j in range(i, i + 60)],
            timestamp_type=TIMESTAMP_LOG_APPEND_TIME if i == 120 else 0,
        )
        for i in range(0, 240, 60)
    ]
    for start, end in ((0, 10**9), (1010, 1200), (1060, 1061)):
        assert _decoded(batches, start, end, headers) == _expected(batches, start, end, headers)


def test_a_corrupt_batch_is_a_decode_error() -> None:
    batch = bytearray(build_batch([(b"k", b"v" * 100, [])] * 3))
    batch[61] = 0x7E  # the first record says 63 bytes: not what its fields take
    with pytest.raises(DecodeError):
        ArrowColumns("t", 0, 0, 10, False).add(read_batch_header(batch), bytes(batch))
    truncated = bytes(batch[:-20])
    with pytest.raises(DecodeError):
        ArrowColumns("t", 0, 0, 10, False).add(read_batch_header(truncated), truncated)
