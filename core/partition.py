"""A virtual partition: offsets, a batch index, idempotent-producer state, and waiters.

A partition owns no file or task. Its batches live in whichever segment owned it when they
were appended; the index remembers (segment, position) per batch in compact int arrays, so
an idle partition costs a few hundred bytes.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field

import trio

from .errors import ErrorCode

INT32_MAX = 2**31 - 1
# Like Kafka: the last five batches per producer are remembered to answer retried duplicates.
PRODUCER_BATCH_CACHE = 5


@dataclass(slots=True)
class ProducerBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int


@dataclass(slots=True)
class ProducerState:
    epoch: int
    batches: list[ProducerBatch] = field(default_factory=list)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


@dataclass(slots=True)
class BatchLocation:
    base_offset: int
    last_offset: int
    segment_id: int
    position: int
    size: int


class SequenceCheck:
    """Outcome of the idempotent-producer check for one batch."""

    __slots__ = ("error", "duplicate_of")

    def __init__(self, error: int = ErrorCode.NONE, duplicate_of: int | None = None) -> None:
        self.error = error
        self.duplicate_of = duplicate_of


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class Partition:
    def __init__(self, index: int) -> None:
        self.index = index
        self.next_offset = 0  # log end offset: next offset to assign
        self.high_watermark = 0  # everything below is durable and visible to consumers
        self.log_start_offset = 0
        self._base_offsets = array("q")
        self._last_offsets = array("q")
        self._segment_ids = array("i")
        self._positions = array("q")
        self._sizes = array("i")
        # Running maximum of batch max-timestamps: monotonic, so timestamp lookups bisect.
        self._max_ts_prefix = array("q")
        self._producers: dict[int, ProducerState] | None = None
        # Appended since this process started (the scaler balances splits with them).
        self.bytes_in = 0
        self.records_in = 0
        self._waiters: set[trio.Event] | None = None

    # --- index -------------------------------------------------------------------------

    def add_batch(
        self,
        base_offset: int,
        record_count: int,
        max_timestamp: int,
        segment_id: int,
        position: int,
        size: int,
    ) -> None:
        last = base_offset + record_count - 1
        self._base_offsets.append(base_offset)
        self._last_offsets.append(last)
        self._segment_ids.append(segment_id)
        self._positions.append(position)
        self._sizes.append(size)
        previous = self._max_ts_prefix[-1] if self._max_ts_prefix else -1
        self._max_ts_prefix.append(max(previous, max_timestamp))
        self.next_offset = last + 1

    def truncate_to(self, offset: int) -> None:
        """Forget every batch at or after `offset` (undo of a failed, unacknowledged write)."""
        keep = bisect.bisect_left(self._base_offsets, offset)
        for column in (
            self._base_offsets,
            self._last_offsets,
            self._segment_ids,
            self._positions,
            self._sizes,
            self._max_ts_prefix,
        ):
            del column[keep:]
        self.next_offset = self._last_offsets[-1] + 1 if self._last_offsets else offset
        self.high_watermark = min(self.high_watermark, self.next_offset)
        if self._producers:
            for state in self._producers.values():
                state.batches = [b for b in state.batches if b.base_offset < offset]

    def locate(
        self, offset: int, max_bytes: int, first_may_exceed: bool = True
    ) -> list[BatchLocation]:
        """Batches from the one holding `offset`, up to the high watermark and `max_bytes`.

        With `first_may_exceed` the first batch is returned whole even if larger than
        max_bytes, so a consumer always makes progress (Kafka does this for the first
        non-empty partition of a fetch).
        """
        i = bisect.bisect_left(self._last_offsets, offset)
        found: list[BatchLocation] = []
        total = 0
        while i < len(self._base_offsets) and self._last_offsets[i] < self.high_watermark:
            size = self._sizes[i]
            if total + size > max_bytes and (found or not first_may_exceed):
                break
            found.append(
                BatchLocation(
                    self._base_offsets[i],
                    self._last_offsets[i],
                    self._segment_ids[i],
                    self._positions[i],
                    size,
                )
            )
            total += size
            i += 1
        return found

    def batch_for_timestamp(self, timestamp: int) -> BatchLocation | None:
        """The first durable batch holding a record with timestamp >= `timestamp`."""
        i = bisect.bisect_left(self._max_ts_prefix, timestamp)
        return self._location(i)

    def batch_with_max_timestamp(self) -> BatchLocation | None:
        if not self._max_ts_prefix:
            return None
        return self._location(bisect.bisect_left(self._max_ts_prefix, self._max_ts_prefix[-1]))

    def _location(self, i: int) -> BatchLocation | None:
        if i >= len(self._base_offsets) or self._last_offsets[i] >= self.high_watermark:
            return None
        return BatchLocation(
            self._base_offsets[i],
            self._last_offsets[i],
            self._segment_ids[i],
            self._positions[i],
            self._sizes[i],
        )

    # --- idempotent producers ---------------------------------------------------------

    def check_sequence(
        self, producer_id: int, epoch: int, first_seq: int, count: int
    ) -> SequenceCheck:
        state = self._producers.get(producer_id) if self._producers else None
        if state is None:
            return SequenceCheck()
        if epoch < state.epoch:
            return SequenceCheck(ErrorCode.INVALID_PRODUCER_EPOCH)
        if epoch > state.epoch:
            return SequenceCheck(
                ErrorCode.NONE if first_seq == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            )
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        for batch in state.batches:
            if batch.first_sequence == first_seq and batch.last_sequence == last_seq:
                return SequenceCheck(duplicate_of=batch.base_offset)
        if state.batches and first_seq != _next_sequence(state.last_sequence):
            return SequenceCheck(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return SequenceCheck()

    def record_sequence(
        self, producer_id: int, epoch: int, first_seq: int, count: int, base_offset: int
    ) -> None:
        if self._producers is None:
            self._producers = {}
        state = self._producers.get(producer_id)
        if state is None or epoch != state.epoch:
            state = self._producers[producer_id] = ProducerState(epoch)
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        state.batches.append(ProducerBatch(first_seq, last_seq, base_offset))
        del state.batches[:-PRODUCER_BATCH_CACHE]

    # --- waiting for data --------------------------------------------------------------

    def advance_high_watermark(self, offset: int) -> None:
        if offset > self.high_watermark:
            self.high_watermark = offset
            self.wake_waiters()

    def wake_waiters(self) -> None:
        if self._waiters:
            for event in self._waiters:
                event.set()
            self._waiters = None

    def add_waiter(self, event: trio.Event) -> None:
        """Set `event` the next time the high watermark moves or the partition goes away."""
        if self._waiters is None:
            self._waiters = set()
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        if self._waiters:
            self._waiters.discard(event)
