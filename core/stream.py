"""A stream: one Kafka topic, its virtual partitions and the segments that hold their data.

Today every stream has one open segment owning all of its partitions; the owner lookup and
the per-batch segment id in the partition index are the seams where split and merge (scale
events, core/scaling) plug in.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass

import trio

from gateway.protocol.records import (
    RecordBatchError,
    decode_records,
    patch_base_offset,
    read_batch_header,
    split_batches,
)

from .errors import ErrorCode
from .metadata import TopicRecord
from .partition import Partition
from .segments.log import PendingAppend, SegmentLog

log = logging.getLogger(__name__)

_PARTITION_LEADER_EPOCH = 0


class Ticket:
    """Completion of one queued append: set when durable, or with an error when it failed."""

    __slots__ = ("event", "error")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.error = ErrorCode.NONE


@dataclass(slots=True)
class AppendResult:
    error: int
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None


@dataclass(slots=True)
class PendingProduce:
    """An append that is queued; `wait` returns its result once it is durable."""

    partition: Partition
    first_offset: int
    end_offset: int
    ticket: Ticket | None  # None when every batch was a retried duplicate

    async def wait(self) -> AppendResult:
        partition = self.partition
        if self.ticket is not None:
            await self.ticket.event.wait()
            if self.ticket.error:
                return AppendResult(self.ticket.error, message="write to the log failed")
        while partition.high_watermark < self.end_offset:  # a duplicate still in flight
            if partition.next_offset < self.end_offset:
                return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message="write failed")
            event = trio.Event()
            partition.add_waiter(event)
            await event.wait()
        return AppendResult(ErrorCode.NONE, self.first_offset, partition.log_start_offset)


@dataclass(slots=True)
class ReadResult:
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    batches: list[bytes] | None = None


class Stream:
    def __init__(self, record: TopicRecord, directory: str) -> None:
        self.record = record
        self.directory = directory
        self._partitions: dict[int, Partition] = {}
        self.segments: dict[int, SegmentLog] = {}
        # (first partition, last partition, segment id) of the open segments, sorted.
        self._owners: list[tuple[int, int, int]] = []
        self.deleted = False

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def partition_count(self) -> int:
        return self.record.partitions

    def open_segments(self) -> list[SegmentLog]:
        """Open and replay every segment's log; returns them for their flusher tasks."""
        os.makedirs(self.directory, exist_ok=True)
        for seg in self.record.segments:
            path = os.path.join(self.directory, f"segment-{seg.segment_id}.log")
            segment = SegmentLog(path, self._on_durable, self._on_failed)
            self.segments[seg.segment_id] = segment
            self._replay(seg.segment_id, segment)
            if not seg.sealed:
                self._owners.append((seg.first_partition, seg.last_partition, seg.segment_id))
        self._owners.sort()
        for partition in self._partitions.values():
            partition.high_watermark = partition.next_offset
        return list(self.segments.values())

    def _replay(self, segment_id: int, segment: SegmentLog) -> None:
        for entry in segment.replay():
            header = read_batch_header(entry.batch)
            partition = self.partition(entry.partition)
            partition.add_batch(
                header.base_offset,
                header.record_count,
                header.max_timestamp,
                segment_id,
                entry.position,
                len(entry.batch),
            )
            if header.producer_id >= 0:
                partition.record_sequence(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.record_count,
                    header.base_offset,
                )

    def partition(self, index: int) -> Partition:
        """The partition object, created on first use: idle partitions cost nothing."""
        partition = self._partitions.get(index)
        if partition is None:
            partition = self._partitions[index] = Partition(index)
        return partition

    def has_partition(self, index: int) -> bool:
        return 0 <= index < self.record.partitions

    def _owner(self, index: int) -> tuple[int, SegmentLog]:
        i = bisect.bisect_right(self._owners, (index, 2**31, 2**63)) - 1
        first, last, segment_id = self._owners[i]
        assert first <= index <= last, "open segments must cover every partition"
        return segment_id, self.segments[segment_id]

    @property
    def tail_segment_id(self) -> int:
        """The open segment that owns the stream's last partition (new partitions go there)."""
        return self._owners[-1][2]

    def grow_partitions(self, count: int) -> None:
        """Extend the tail segment to own partitions up to `count` - 1 (in memory only: the
        metadata store must have recorded the same change first)."""
        assert count > self.record.partitions, "partition counts only grow"
        first, _last, segment_id = self._owners[-1]
        self._owners[-1] = (first, count - 1, segment_id)
        for seg in self.record.segments:
            if seg.segment_id == segment_id:
                seg.last_partition = count - 1
        self.record.partitions = count

    # --- produce -----------------------------------------------------------------------

    async def append(
        self, index: int, records: bytes | memoryview | None, acks: int
    ) -> AppendResult:
        """Validate and append; returns once durable (acks != 0), or at once for acks=0."""
        started = self.start_append(index, records, acks)
        if isinstance(started, AppendResult):
            return started
        return await started.wait()

    def start_append(
        self, index: int, records: bytes | memoryview | None, acks: int
    ) -> AppendResult | PendingProduce:
        """Validate a Produce request's records and queue them on the partition's segment.

        Synchronous, so callers that run it in request order get appends in request order.
        Returns the final result (an error, or acks=0), or a PendingProduce to await.
        """
        if self.deleted or not self.has_partition(index):
            return AppendResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            batches = split_batches(records or b"")
        except RecordBatchError as exc:
            return AppendResult(exc.error_code, message=str(exc))
        if not batches:
            return AppendResult(ErrorCode.CORRUPT_MESSAGE, message="no record batch")
        partition = self.partition(index)
        for header, _ in batches:
            if header.is_transactional or header.is_control:
                return AppendResult(
                    ErrorCode.INVALID_RECORD, message="transactions are not supported"
                )
        segment_id, segment = self._owner(index)
        first_offset: int | None = None
        ticket: Ticket | None = None
        wait_for_offset = 0
        for header, view in batches:
            if header.producer_id >= 0:
                check = partition.check_sequence(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.record_count,
                )
                if check.error:
                    return AppendResult(check.error, message="producer sequence check failed")
                if check.duplicate_of is not None:  # a retry of a batch we already have
                    first_offset = check.duplicate_of if first_offset is None else first_offset
                    wait_for_offset = max(wait_for_offset, check.duplicate_of + 1)
                    continue
            base_offset = partition.next_offset
            batch = bytearray(view)
            patch_base_offset(batch, 0, base_offset)
            batch[12:16] = _PARTITION_LEADER_EPOCH.to_bytes(4, "big", signed=True)
            ticket = Ticket() if acks != 0 else None
            end = base_offset + header.record_count
            pending = segment.append(index, batch, (partition, base_offset, end, ticket))
            partition.add_batch(
                base_offset,
                header.record_count,
                header.max_timestamp,
                segment_id,
                pending.position,
                len(batch),
            )
            if header.producer_id >= 0:
                partition.record_sequence(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.record_count,
                    base_offset,
                )
            first_offset = base_offset if first_offset is None else first_offset
            wait_for_offset = end
        assert first_offset is not None
        if acks == 0:
            return AppendResult(ErrorCode.NONE, first_offset, partition.log_start_offset)
        return PendingProduce(partition, first_offset, wait_for_offset, ticket)

    def _on_durable(self, appended: list[PendingAppend]) -> None:
        for pending in appended:
            partition, _base, end, ticket = pending.token
            partition.advance_high_watermark(end)
            if ticket is not None:
                ticket.event.set()

    def _on_failed(self, failed: list[PendingAppend], exc: Exception) -> None:
        log.error("stream %s: %d appends failed: %s", self.name, len(failed), exc)
        for pending in failed:
            partition, base, _end, ticket = pending.token
            if partition.next_offset > base:
                partition.truncate_to(base)
            if ticket is not None:
                ticket.error = ErrorCode.KAFKA_STORAGE_ERROR
                ticket.event.set()

    # --- fetch -------------------------------------------------------------------------

    def read(
        self, index: int, offset: int, max_bytes: int, first_may_exceed: bool = True
    ) -> ReadResult:
        if self.deleted or not self.has_partition(index):
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        partition = self.partition(index)
        hw, start = partition.high_watermark, partition.log_start_offset
        if offset < start or offset > hw:
            return ReadResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start)
        batches = [
            self.segments[loc.segment_id].read(loc.position, loc.size)
            for loc in partition.locate(offset, max_bytes, first_may_exceed)
        ]
        return ReadResult(ErrorCode.NONE, hw, start, batches)

    def offset_for_timestamp(self, index: int, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record at or after `timestamp`; (-1, -1) if none.

        timestamp -3 asks for the record with the largest timestamp (ListOffsets v7).
        """
        partition = self.partition(index)
        if timestamp == -3:
            location = partition.batch_with_max_timestamp()
        else:
            location = partition.batch_for_timestamp(timestamp)
        if location is None:
            return -1, -1
        batch = self.segments[location.segment_id].read(location.position, location.size)
        records = decode_records(batch)
        if timestamp == -3:
            best = max(records, key=lambda r: r.timestamp, default=None)
            return (best.offset, best.timestamp) if best else (-1, -1)
        for record in records:
            if record.timestamp >= timestamp:
                return record.offset, record.timestamp
        return -1, -1

    def close(self) -> None:
        self.deleted = True
        for segment in self.segments.values():
            segment.close()
        for partition in self._partitions.values():
            partition.wake_waiters()
