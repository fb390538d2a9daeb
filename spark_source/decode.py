"""Stored record batches straight to Arrow columns, with as little Python per record as
the format allows.

The per-record loop only walks the varints to find where each key and value lies in
the (decompressed) batch body and appends integers to typed arrays; no bytes object,
no Record, no tuple is made per record. The key and value bytes are then gathered in
C by Arrow: the bodies are joined into one buffer, described as one large_binary array
whose elements alternate "a value" and "the bytes up to the next value", and the even
elements are taken. Constant columns (topic, partition, timestamp type) are built from
buffers without a per-record step. Headers, when asked for, are the one slow path.

Plain functions and typed locals only, so that the module can be compiled (mypyc).
"""

from __future__ import annotations

from array import array
from typing import Any

from core.recordbatch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_NONE,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    decompress,
)


class DecodeError(ValueError):
    """A batch whose records do not parse."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos` of more than one byte: (value, position after it)."""
    value = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint too long")


class ArrowColumns:
    """The rows of one partition's offsets [start, end), gathered batch by batch until
    `flush` turns them into an Arrow record batch of the Kafka source's schema."""

    def __init__(
        self, topic: str, partition: int, start: int, end: int, include_headers: bool
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.bodies: list[bytes] = []
        self.base = 0  # where the next body starts in the joined buffer
        # [key start, key end] and [value start, value end] per row, in the joined buffer
        self.key_spans = array("q")
        self.value_spans = array("q")
        self.null_keys: list[int] = []  # rows whose key is null
        self.null_values: list[int] = []
        self.offsets = array("q")
        self.timestamps = array("q")  # microseconds
        self.ts_types = array("i")
        self.headers: list[list[dict[str, Any]]] = []

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def add(self, header: BatchHeader, batch: bytes | memoryview) -> None:
        """The rows of one stored batch (a data batch, already found visible) that fall in
        [start, end). Raises DecodeError on records that do not parse."""
        total = header.total_size
        if total > len(batch) or header.record_count < 0:
            raise DecodeError(f"bad or truncated batch length {total}")
        if header.record_count == 0:
            return
        view = memoryview(batch)[BATCH_HEADER_SIZE:total]
        try:
            data = (
                bytes(view)
                if header.compression == COMPRESSION_NONE
                else decompress(header.compression, view)
            )
        except Exception as exc:  # cramjam's errors and unknown codecs alike
            raise DecodeError(f"cannot decompress: {exc}") from None
        before = self.rows
        try:
            self._walk(data, header)
        except IndexError:
            raise DecodeError("a record runs past the end of its batch") from None
        added = self.rows - before
        if added:
            self.ts_types.extend(array("i", [header.timestamp_type]) * added)
            self.bodies.append(data)
            self.base += len(data)

    def _walk(self, data: bytes, header: BatchHeader) -> None:
        base_offset = header.base_offset
        base_ts = header.base_timestamp
        append_ts = header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
        start, end_offset = self.start, self.end
        shift = self.base
        key_spans, value_spans = self.key_spans, self.value_spans
        offsets, timestamps = self.offsets, self.timestamps
        headers = self.headers if self.include_headers else None
        n = len(data)
        pos = 0
        for _ in range(header.record_count):
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: lengths up to 8 KiB, deltas up to 8191
                v = (b & 0x7F) | (data[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = _varint(data, pos)
            rec_end = pos + length
            if length < 1 or rec_end > n:
                raise DecodeError(f"record length {length} out of bounds")
            pos += 1  # the record's attributes: unused in v2
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: lengths up to 8 KiB, deltas up to 8191
                v = (b & 0x7F) | (data[pos + 1] << 7)
                ts_delta = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                ts_delta, pos = _varint(data, pos)
            b = data[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: lengths up to 8 KiB, deltas up to 8191
                v = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                offset_delta, pos = _varint(data, pos)
            b = data[pos]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: lengths up to 8 KiB, deltas up to 8191
                v = (b & 0x7F) | (data[pos + 1] << 7)
                key_len = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                key_len, pos = _varint(data, pos)
            key_at = pos
            if key_len > 0:
                pos += key_len
            elif key_len < -1:
                raise DecodeError(f"bad key length {key_len}")
            key_stop = pos
            b = data[pos]
            if b < 0x80:
                value_len = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: lengths up to 8 KiB, deltas up to 8191
                v = (b & 0x7F) | (data[pos + 1] << 7)
                value_len = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                value_len, pos = _varint(data, pos)
            value_at = pos
            if value_len > 0:
                pos += value_len
            elif value_len < -1:
                raise DecodeError(f"bad value length {value_len}")
            value_stop = pos
            b = data[pos]
            if b == 0:  # no headers: nearly every record
                pos += 1
                pairs: list[dict[str, Any]] = []
            else:
                pairs, pos = _headers(data, pos, rec_end)
            if pos != rec_end:
                raise DecodeError("record length does not match its contents")
            offset = base_offset + offset_delta
            if offset < start or offset >= end_offset:
                continue
            row = len(offsets)
            if key_len == -1:
                self.null_keys.append(row)
            if value_len == -1:
                self.null_values.append(row)
            key_spans.append(shift + key_at)
            key_spans.append(shift + key_stop)
            value_spans.append(shift + value_at)
            value_spans.append(shift + value_stop)
            offsets.append(offset)
            ts = header.max_timestamp if append_ts else base_ts + ts_delta
            timestamps.append(ts * 1000)
            if headers is not None:
                headers.append(pairs)
        if pos != n:
            raise DecodeError(f"{n - pos} trailing bytes after {header.record_count} records")

    def flush(self, arrow_schema: Any) -> Any:
        """The gathered rows as a pyarrow.RecordBatch of `arrow_schema`; starts afresh."""
        import pyarrow as pa

        rows = self.rows
        data = pa.py_buffer(b"".join(self.bodies))
        fields = list(arrow_schema)
        columns = [
            _gather(data, self.key_spans, self.null_keys, rows, fields[0].type),
            _gather(data, self.value_spans, self.null_values, rows, fields[1].type),
            _constant_string(self.topic, rows, fields[2].type),
            pa.Array.from_buffers(
                fields[3].type, rows, [None, pa.py_buffer(array("i", [self.partition]) * rows)]
            ),
            pa.Array.from_buffers(fields[4].type, rows, [None, pa.py_buffer(self.offsets)]),
            pa.Array.from_buffers(fields[5].type, rows, [None, pa.py_buffer(self.timestamps)]),
            pa.Array.from_buffers(fields[6].type, rows, [None, pa.py_buffer(self.ts_types)]),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, type=fields[7].type))
        batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema)
        self._reset()
        return batch


def _headers(data: bytes, pos: int, rec_end: int) -> tuple[list[dict[str, Any]], int]:
    """A record's headers at `pos`: ([{key, value}], position after them)."""
    count, pos = _varint(data, pos) if data[pos] >= 0x80 else _small(data[pos], pos)
    # each header takes at least 2 bytes: a tiny record cannot claim billions of them
    if count < 0 or count * 2 > rec_end - pos:
        raise DecodeError(f"bad header count {count}")
    pairs: list[dict[str, Any]] = []
    for _ in range(count):
        key_len, pos = _varint(data, pos) if data[pos] >= 0x80 else _small(data[pos], pos)
        if key_len < 0:
            raise DecodeError("null header key")
        try:
            key = data[pos : pos + key_len].decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError("a header key is not UTF-8") from None
        pos += key_len
        value_len, pos = _varint(data, pos) if data[pos] >= 0x80 else _small(data[pos], pos)
        value: bytes | None = None
        if value_len >= 0:
            value = data[pos : pos + value_len]
            pos += value_len
        elif value_len != -1:
            raise DecodeError(f"bad header value length {value_len}")
        pairs.append({"key": key, "value": value})
    return pairs, pos


def _small(b: int, pos: int) -> tuple[int, int]:
    return (b >> 1) ^ -(b & 1), pos + 1


def _gather(data: Any, spans: array[int], nulls: list[int], rows: int, arrow_type: Any) -> Any:
    """Rows' bytes from `data`: `spans` holds [start, end] of each row, in increasing
    order. Seen as one array whose elements are the rows and the gaps between them, the
    rows are its even elements; Arrow's take copies them out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if rows == 0:
        return pa.array([], type=arrow_type)
    # spans has 2*rows positions: the boundaries of 2*rows - 1 elements
    spread = pa.Array.from_buffers(
        pa.large_binary(), 2 * rows - 1, [None, pa.py_buffer(spans), data]
    )
    if nulls:
        null_rows = set(nulls)
        indices = pa.array([None if r in null_rows else 2 * r for r in range(rows)], pa.int64())
    else:
        evens = array("q", range(0, 2 * rows, 2))
        indices = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(evens)])
    return pc.take(spread, indices).cast(arrow_type)


def _constant_string(text: str, rows: int, arrow_type: Any) -> Any:
    import pyarrow as pa

    raw = text.encode()
    ends = (
        array("i", range(0, (rows + 1) * len(raw), len(raw)))
        if raw
        else array("i", [0]) * (rows + 1)
    )
    return pa.Array.from_buffers(
        arrow_type, rows, [None, pa.py_buffer(ends), pa.py_buffer(raw * rows)]
    )
