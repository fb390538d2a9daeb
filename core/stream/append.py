"""Produce: validating batches, assigning offsets, idempotent-producer checks, durability."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import trio

from ..api import AppendResult
from ..cluster.fencing import FENCE
from ..cluster.view import CLUSTER
from ..errors import ErrorCode
from ..partition import Partition
from ..recordbatch import RecordBatchError, control_type, patch_base_offset, split_batches
from ..segments.log import PendingAppend as LogAppend
from ..shared_ints import shared

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger(__name__)

_PARTITION_LEADER_EPOCH = (0).to_bytes(4, "big", signed=True)  # bytes 12-16 of a batch


class Ticket:
    """One queued log entry: what `on_durable` / `on_failed` need to finish it, and its
    completion (`done` once durable or failed, `error` then set when it failed).

    The entry's token and the producer's handle in one object, and no trio.Event unless a
    task waits: most results are read without waiting (a group commit finishes a whole
    request's partitions at once), and an event per batch was a measurable part of the
    event loop's work per Produce.
    """

    __slots__ = ("partition", "base_offset", "end_offset", "done", "error", "notify", "_event")

    def __init__(self, partition: Partition, base_offset: int, end_offset: int) -> None:
        self.partition = partition
        self.base_offset = base_offset
        self.end_offset = end_offset
        self.done = False
        self.error: int = ErrorCode.NONE
        # Called once when finished, by the task that finishes it (it must not raise).
        self.notify: Callable[[], None] | None = None
        self._event: trio.Event | None = None

    def finish(self, error: int = ErrorCode.NONE) -> None:
        """Durable (or failed with `error`): wake the task waiting, if any."""
        self.error = error
        self.done = True
        if self._event is not None:
            self._event.set()
        notify = self.notify
        if notify is not None:
            self.notify = None
            notify()

    async def wait(self) -> None:
        """Return once finished (at once if it is)."""
        if not self.done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()


@dataclass(slots=True)
class PendingProduce:
    """An append that is queued; `wait` returns its result once it is durable."""

    partition: Partition
    first_offset: int
    end_offset: int
    ticket: Ticket | None  # None when every batch was a retried duplicate

    def result_now(self) -> AppendResult | None:
        """The result if it is already known (durable or failed); None while it is not."""
        ticket = self.ticket
        if ticket is not None:
            if not ticket.done:
                return None
            if ticket.error:
                return AppendResult(ticket.error, message="write to the log failed")
        if self.partition.high_watermark < self.end_offset:
            return None  # a duplicate still in flight: `wait` knows the rest
        if not FENCE.valid():
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, message="node lease lost")
        return AppendResult(ErrorCode.NONE, self.first_offset, self.partition.log_start_offset)

    def notify_when_done(self, callback: Callable[[], None]) -> bool:
        """Have `callback` called once, by the task that finishes this append, when
        `result_now` knows the result; False if that moment cannot be told (the caller
        waits instead). For an append whose result is not known yet."""
        ticket = self.ticket
        if ticket is None or ticket.done or ticket.notify is not None:
            return False  # a retried duplicate waits on the high watermark, not a ticket
        ticket.notify = callback
        return True

    async def wait(self) -> AppendResult:
        partition = self.partition
        if self.ticket is not None:
            await self.ticket.wait()
            if self.ticket.error:
                return AppendResult(self.ticket.error, message="write to the log failed")
        while partition.high_watermark < self.end_offset:  # a duplicate still in flight
            if partition.next_offset < self.end_offset:
                return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, message="write failed")
            event = trio.Event()
            partition.add_waiter(event)
            await event.wait()
        if not FENCE.valid():  # this node's lease lapsed: another node may own it now
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, message="node lease lost")
        return AppendResult(ErrorCode.NONE, self.first_offset, partition.log_start_offset)


def start_append(
    stream: Stream,
    index: int,
    records: bytes | memoryview | None,
    acks: int,
    transactional: bool = False,
    marker: bool = False,
) -> AppendResult | PendingProduce:
    """Validate a Produce request's records and queue them on the partition's segment.

    Synchronous, so callers that run it in request order get appends in request order.
    Returns the final result (an error, or acks=0), or a PendingProduce to await.
    `transactional`: the request carried a transactional id (checked by the transaction
    coordinator), so its batches must have the transactional bit; `marker`: a transaction
    marker written by the coordinator (control batches come from nowhere else).
    """
    if stream.deleted or not stream.has_partition(index):
        return AppendResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if not FENCE.valid():  # nothing is written once this node's lease lapsed
        return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, message="node lease lost")
    if not CLUSTER.is_local(stream.name, index):  # another node owns its segment
        return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, message="another node leads")
    # Tier 2 is behind (or down): retriable, nothing is written (a marker still goes in).
    if stream.usage.full and not marker:
        return AppendResult(
            ErrorCode.KAFKA_STORAGE_ERROR,
            message="local log budget is full until tier 2 catches up; retry",
        )
    try:
        batches = split_batches(records or b"")
    except RecordBatchError as exc:
        return AppendResult(exc.error_code, message=str(exc))
    if not batches:
        return AppendResult(ErrorCode.CORRUPT_MESSAGE, message="no record batch")
    partition = stream.partition(index)
    for header, _ in batches:
        if header.is_control != marker:
            why = "control batches are written by the coordinator only"
            return AppendResult(ErrorCode.INVALID_RECORD, message=why)
        if not marker and header.is_transactional != transactional:
            why = (
                "a transactional batch needs a transactional id in the request"
                if header.is_transactional
                else "a request with a transactional id needs transactional batches"
            )
            return AppendResult(ErrorCode.INVALID_RECORD, message=why)
    segment_id = stream.ownership.owner_of(index)
    if not CLUSTER.segment_is_local(stream.name, segment_id):  # handed over: fenced
        return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, message="another node leads")
    segment = stream.segments[segment_id]
    stats = stream.stats[segment_id]
    first_offset: int | None = None
    ticket: Ticket | None = None
    wait_for_offset = 0
    for header, view in batches:
        if header.producer_id >= 0 and not marker:
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
        batch[12:16] = _PARTITION_LEADER_EPOCH
        count = header.record_count
        end = base_offset + count
        ticket = Ticket(partition, base_offset, end)
        pending = segment.append(index, batch, ticket)
        size = len(batch)
        partition.index_batch(
            header,
            base_offset,
            segment_id,
            pending.position,
            size,
            False,
            control_type(batch) if marker else None,
        )
        stats.bytes_in += size
        stats.records_in += count
        if partition.bytes_in:
            partition.bytes_in += size
        else:  # a first batch: its size is one that many partitions repeat
            partition.bytes_in = shared(size)
        partition.records_in += count
        first_offset = base_offset if first_offset is None else first_offset
        wait_for_offset = end
    assert first_offset is not None
    if partition.next_offset > partition.reserve_at:  # past half of the reserved block
        stream.request_reservation(partition)
    if acks == 0:
        return AppendResult(ErrorCode.NONE, first_offset, partition.log_start_offset)
    return PendingProduce(partition, first_offset, wait_for_offset, ticket)


def on_durable(appended: list[LogAppend]) -> None:
    """A segment log fsync'd these appends: advance high watermarks, wake the producers."""
    for pending in appended:
        ticket = cast(Ticket, pending.token)
        partition = ticket.partition
        if ticket.end_offset > partition.reserved:  # not reserved yet: wait for the raise
            if partition.deferred is None:
                partition.deferred = []
            partition.deferred.append(ticket)
            continue
        partition.advance_high_watermark(ticket.end_offset)
        ticket.finish()


def release_deferred(partition: Partition) -> None:
    """The partition's reservation was raised: acknowledge and show the durable appends
    that now lie below it (in offset order; the rest wait for the next raise)."""
    waiting: list[Ticket] = partition.deferred or []
    kept: list[Ticket] = []
    for ticket in waiting:
        if kept or ticket.end_offset > partition.reserved:
            kept.append(ticket)
            continue
        partition.advance_high_watermark(ticket.end_offset)
        ticket.finish()
    partition.deferred = kept or None


def fail_deferred(partition: Partition) -> None:
    """The topic is gone: end the appends still waiting for a reservation."""
    waiting: list[Ticket]
    waiting, partition.deferred = partition.deferred or [], None
    for ticket in waiting:
        ticket.finish(ErrorCode.KAFKA_STORAGE_ERROR)


def on_failed(stream_name: str, failed: list[LogAppend], exc: Exception) -> None:
    """A segment log could not write these appends: forget them, fail the producers."""
    log.error("stream %s: %d appends failed: %s", stream_name, len(failed), exc)
    for pending in failed:
        ticket = cast(Ticket, pending.token)
        partition = ticket.partition
        if partition.next_offset > ticket.base_offset:
            partition.truncate_to(ticket.base_offset)
        ticket.finish(ErrorCode.KAFKA_STORAGE_ERROR)
