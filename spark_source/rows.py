"""Record batches (from a tier-2 slice or a Fetch) to Arrow record batches of the Kafka
source's schema, with Kafka's consumer rules: control records never appear, and with
read_committed neither do the batches of aborted transactions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from core.recordbatch import BatchHeader, RecordBatchError, iter_stored_batches, read_batch_header

from .decode import ArrowColumns, DecodeError
from .errors import StreamgateSourceError
from .kafka import fetch_range
from .objects import Tier2Reader
from .options import ReadOptions
from .plan import ReadTask

ROWS_PER_BATCH = 8192
SCHEMA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT"
)
HEADERS_DDL = ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def schema_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (HEADERS_DDL if include_headers else "")


def _is_aborted(aborted: tuple[tuple[int, int, int], ...], producer_id: int, offset: int) -> bool:
    return any(pid == producer_id and first <= offset <= last for pid, first, last in aborted)


def task_batches(task: ReadTask, opts: ReadOptions) -> Iterator[bytes | memoryview]:
    """The stored batches of a task, in offset order."""
    if not task.from_tier2:
        yield from fetch_range(
            opts.gateway,
            task.topic,
            task.partition,
            task.start,
            task.end,
            opts.read_committed,
            opts.timeout_s,
            opts.access,
            opts.fail_on_data_loss,
        )
        return
    reader = Tier2Reader(task.tier2, opts.tier2_overrides)
    for s in task.slices:
        data = reader.read(s.key, s.byte_start, s.byte_length)
        view = memoryview(data)
        last = -1
        try:
            for pos, header in iter_stored_batches(data):
                last = header.last_offset
                yield view[pos : pos + header.total_size]
        except RecordBatchError as exc:
            raise StreamgateSourceError(f"chunk object {s.key!r}: {exc}") from None
        if last != s.last:  # a torn or foreign object: an error, never a silent gap
            raise StreamgateSourceError(
                f"chunk object {s.key!r}: the slice of {task.topic} partition "
                f"{task.partition} ends at offset {last}, its index says {s.last}"
            )


def read_task(task: ReadTask, opts: ReadOptions, arrow_schema: Any) -> Iterator[Any]:
    """Arrow record batches (pyarrow.RecordBatch) of the task's records."""
    columns = ArrowColumns(task.topic, task.partition, task.start, task.end, opts.include_headers)
    for header, batch in _visible(task, opts, task_batches(task, opts)):
        try:
            columns.add(header, batch)
        except DecodeError as exc:
            raise StreamgateSourceError(
                f"{task.topic} partition {task.partition}: unreadable batch at offset "
                f"{header.base_offset}: {exc}"
            ) from None
        if columns.rows >= ROWS_PER_BATCH:
            yield columns.flush(arrow_schema)
    if columns.rows:
        yield columns.flush(arrow_schema)


def _visible(
    task: ReadTask, opts: ReadOptions, batches: Iterable[bytes | memoryview]
) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
    """The data batches a consumer would see, with their headers."""
    for batch in batches:
        header = read_batch_header(batch)
        if header.last_offset < task.start:
            continue
        if header.base_offset >= task.end:
            return
        if header.is_control:
            continue
        if (
            opts.read_committed
            and header.is_transactional
            and _is_aborted(task.aborted, header.producer_id, header.base_offset)
        ):
            continue
        yield header, batch
