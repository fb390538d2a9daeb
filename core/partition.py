"""A virtual partition: offsets, a batch index, idempotent-producer state, and waiters.

A partition owns no file or task. Its batches live in whichever segment owned it when they
were appended; the index remembers (segment, position) per batch in compact int arrays, so
an idle partition costs a few hundred bytes.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import trio

from .errors import ErrorCode
from .metadata import ChunkSlice
from .recordbatch import BatchHeader
from .txn.partition_state import AbortedTxn, PartitionTxns

INT32_MAX = 2**31 - 1
# Like Kafka: the last five batches per producer are remembered to answer retried duplicates.
PRODUCER_BATCH_CACHE = 5
# `Partition.reserved` of a partition whose offsets are not reserved (no metadata store).
UNRESERVED = 1 << 62
# The tier-1 batch index is one flat array of rows of these int64 columns: one array object
# per partition instead of one per column (a written partition cost ~110 bytes per column).
_BASE, _LAST, _SEGMENT, _POSITION, _SIZE, _TS_PREFIX, _MAX_TS = range(7)
_ROW = 7
# The index of every partition with no tier-1 batch (new, or all of it in tier 2): one
# shared array, never written to (an empty array of its own cost 80 bytes per partition).
_NO_ROWS = array("q")


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


# The outcome of most checks, shared (callers only read it).
_IN_ORDER = SequenceCheck()

_last_offset = attrgetter("last_offset")  # the tier-2 index's sort key: slices bisect on it


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class Partition:
    # __slots__: a gateway may hold 100,000s of partitions (no per-instance __dict__)
    __slots__ = (
        "index",
        "next_offset",
        "high_watermark",
        "log_start_offset",
        "compacted_end",
        "_rows",
        "_slices",
        "_producers",
        "txns",
        "bytes_in",
        "records_in",
        "_waiters",
        "reserved",
        "reserve_at",
        "raised_at",
        "raised_offset",
        "deferred",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.next_offset = 0  # log end offset: next offset to assign
        self.high_watermark = 0  # everything below is durable and visible to consumers
        self.log_start_offset = 0
        # Below this offset compaction rewrote tier 2: reads go there, never to the tier-1
        # copies (which still hold the removed records).
        self.compacted_end = 0
        # Rows of (base offset, last offset, segment id, position, size, running maximum of
        # batch max-timestamps, batch max-timestamp). The running maximum is monotonic, so
        # timestamp lookups bisect; it runs from the first batch ever indexed: after a
        # prefix is dropped it may overstate, which only starts a lookup earlier (each
        # batch's own maximum decides).
        self._rows = _NO_ROWS
        # Tier-2 index, one entry per chunk slice, sorted by offset: None until the first,
        # the slice itself while it is the only one, then a list (see _slice_seq).
        self._slices: ChunkSlice | list[ChunkSlice] | None = None
        self._producers: dict[int, ProducerState] | None = None
        self.txns: PartitionTxns | None = None  # created by the first transactional batch
        # Appended since this process started (the scaler balances splits with them).
        self.bytes_in = 0
        self.records_in = 0
        self._waiters: set[trio.Event] | None = None
        # Offset reservation (core/stream/reservations.py): offsets at or above `reserved`
        # are not covered by the metadata store yet, so an append ending above it is
        # neither acknowledged nor visible (`deferred`, in offset order) until the
        # reservation is raised; an append ending above `reserve_at` asks for a raise.
        self.reserved = UNRESERVED
        self.reserve_at = UNRESERVED
        # trio time and next offset at the last raise (-1: none yet): the partition's rate
        self.raised_at = -1.0
        self.raised_offset = 0
        self.deferred: list | None = None

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
        rows = self._rows
        if rows is _NO_ROWS:
            rows = self._rows = array("q")
        previous = rows[-_ROW + _TS_PREFIX] if rows else -1
        rows.extend(
            (
                base_offset,
                last,
                segment_id,
                position,
                size,
                previous if previous > max_timestamp else max_timestamp,
                max_timestamp,
            )
        )
        self.next_offset = last + 1

    def index_batch(
        self,
        header: BatchHeader,
        base_offset: int,
        segment_id: int,
        position: int,
        size: int,
        replay: bool = False,
        control: int | None = None,
    ) -> AbortedTxn | None:
        """Index a stored batch and remember its producer's sequence (the one path for
        appends and for replaying a log on start). `control` is a marker's type
        (recordbatch.CONTROL_COMMIT / CONTROL_ABORT); returns the range a marker aborted."""
        self.add_batch(
            base_offset, header.record_count, header.max_timestamp, segment_id, position, size
        )
        if header.is_transactional:
            if self.txns is None:
                self.txns = PartitionTxns()
            if header.is_control:
                self._fence_epoch(header.producer_id, header.producer_epoch)
                return self.txns.on_marker(header.producer_id, base_offset, control == 1)
            self.txns.on_data(header.producer_id, base_offset)
        if header.producer_id >= 0:
            self.record_sequence(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.record_count,
                base_offset,
                replay=replay,
            )
        return None

    def _fence_epoch(self, producer_id: int, epoch: int) -> None:
        """A marker written with a newer epoch fences the producer's older epochs here."""
        if self._producers is None:
            self._producers = {}
        state = self._producers.get(producer_id)
        if state is None or epoch > state.epoch:
            self._producers[producer_id] = ProducerState(epoch)

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, else the high watermark."""
        first = self.txns.first_unstable() if self.txns is not None else None
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def restore_aborted(self, producer_id: int, first_offset: int, last_offset: int) -> None:
        if self.txns is None:
            self.txns = PartitionTxns()
        self.txns.add_aborted(AbortedTxn(producer_id, first_offset, last_offset))

    def open_txn_snapshot(self) -> dict[int, int] | None:
        """producer id -> first offset of open transactions (None: never transactional)."""
        return self.txns.durable_open(self.high_watermark) if self.txns is not None else None

    def restore_open_txn(self, producer_id: int, first_offset: int) -> None:
        if first_offset >= self.next_offset:
            return  # its data did not survive: nothing of it to hide
        if self.txns is None:
            self.txns = PartitionTxns()
        self.txns.restore_open(producer_id, first_offset)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        return self.txns.aborted_between(start, end) if self.txns is not None else []

    def _column(self, k: int) -> memoryview:
        """Column k of the index as a strided view, for bisect. Use it within one
        expression: the array cannot grow while a view of it lives."""
        return memoryview(self._rows)[k::_ROW]

    def _row_count(self) -> int:
        return len(self._rows) // _ROW

    def truncate_to(self, offset: int) -> None:
        """Forget every batch at or after `offset` (undo of a failed, unacknowledged write)."""
        keep = bisect.bisect_left(self._column(_BASE), offset)
        if keep < self._row_count():
            del self._rows[keep * _ROW :]
            if not self._rows:
                self._rows = _NO_ROWS
        self.next_offset = self._rows[-_ROW + _LAST] + 1 if self._rows else offset
        self.high_watermark = min(self.high_watermark, self.next_offset)
        if self._producers:
            for state in self._producers.values():
                state.batches = [b for b in state.batches if b.base_offset < offset]
        if self.txns is not None:
            self.txns.truncate_to(offset)

    @property
    def local_start_offset(self) -> int:
        """The first offset indexed in tier 1; older offsets are read from tier 2."""
        return self._rows[_BASE] if self._rows else self.next_offset

    def size_bytes(self) -> int:
        """Bytes the partition holds: its tier-1 batches plus tier-2 slices older than them."""
        local_start = self.local_start_offset
        tier2 = sum(s.byte_length for s in self.slices() if s.last_offset < local_start)
        return self.local_bytes_after(-1) + tier2

    @property
    def local_batch_count(self) -> int:
        return self._row_count()

    def drop_local_prefix(self, count: int) -> None:
        """Forget the `count` oldest tier-1 index entries (their files were trimmed)."""
        if count <= 0:
            return
        del self._rows[: count * _ROW]
        if not self._rows:
            self._rows = _NO_ROWS
        # The running maximum is not rebuilt (a pass over every batch still indexed, on
        # the event loop, for each trimmed file): see its comment in __init__.

    def local_bytes_after(self, offset: int) -> int:
        """Bytes of tier-1 indexed batches that start after `offset`."""
        i = bisect.bisect_right(self._column(_BASE), offset)
        return sum(self._rows[i * _ROW + _SIZE :: _ROW])

    def local_location(self, i: int) -> tuple[int, int]:
        """(segment id, position) of the i-th oldest tier-1 index entry."""
        j = i * _ROW
        return self._rows[j + _SEGMENT], self._rows[j + _POSITION]

    def skip_lost(self, end: int) -> None:
        """Offsets below `end` may have been acknowledged but are lost (the local log is
        gone): the log starts at `end`, the next append gets `end`. Producer states are
        forgotten, as Kafka forgets producers whose batches are all below the log start."""
        self.next_offset = max(self.next_offset, end)
        self.high_watermark = self.next_offset
        self.log_start_offset = max(self.log_start_offset, end)
        self._producers = None

    def forget_producers_below(self, offset: int) -> None:
        """Forget producers whose remembered batches all start below `offset` (the log
        start): their sequences are unknown from here, as after Kafka's log start moves."""
        if not self._producers:
            return
        for producer_id, state in list(self._producers.items()):
            if state.batches and state.batches[-1].base_offset < offset:
                del self._producers[producer_id]

    # --- tier-2 index ------------------------------------------------------------------

    def _slice_seq(self) -> Sequence[ChunkSlice]:
        """The tier-2 index as a sequence: None is empty, a lone slice is held as itself
        (a one-element list cost ~90 bytes more, for most of a million partitions)."""
        held = self._slices
        if held is None:
            return ()
        return (held,) if isinstance(held, ChunkSlice) else held

    def _set_slices(self, slices: list[ChunkSlice]) -> None:
        self._slices = None if not slices else slices[0] if len(slices) == 1 else slices

    def add_slice(self, location: ChunkSlice) -> None:
        held = self._slices
        if held is None:
            self._slices = location
        else:
            slices = [held] if isinstance(held, ChunkSlice) else held
            i = bisect.bisect_left(slices, location.last_offset, key=_last_offset)
            slices.insert(i, location)
            self._slices = slices
        self.next_offset = max(self.next_offset, location.last_offset + 1)

    def slices(self) -> list[ChunkSlice]:
        return list(self._slice_seq())

    def slice_for(self, offset: int) -> ChunkSlice | None:
        """The tier-2 slice holding `offset`, or the first one after it."""
        slices = self._slice_seq()
        i = bisect.bisect_left(slices, offset, key=_last_offset)
        return slices[i] if i < len(slices) else None

    def slice_for_timestamp(self, timestamp: int) -> ChunkSlice | None:
        """The first tier-2 slice holding a record with timestamp >= `timestamp`."""
        for location in self._slice_seq():
            if (
                location.max_timestamp >= timestamp
                and location.last_offset >= self.log_start_offset
            ):
                return location
        return None

    def drop_slices_below(self, offset: int) -> None:
        """Forget tier-2 slices that end before `offset` (their chunk was deleted)."""
        slices = self._slice_seq()
        keep = bisect.bisect_left(slices, offset, key=_last_offset)
        if keep:
            self._set_slices(list(slices[keep:]))

    def remove_chunk_slices(self, chunk_ids: set[int]) -> None:
        """Forget the tier-2 slices of these chunks (compaction replaced them)."""
        self._set_slices([s for s in self._slice_seq() if s.chunk_id not in chunk_ids])

    def locate(
        self, offset: int, max_bytes: int, first_may_exceed: bool = True, limit: int | None = None
    ) -> list[BatchLocation]:
        """Batches from the one holding `offset`, up to the high watermark and `max_bytes`.

        With `first_may_exceed` the first batch is returned whole even if larger than
        max_bytes, so a consumer always makes progress (Kafka does this for the first
        non-empty partition of a fetch). `limit` (the LSO for read_committed) replaces the
        high watermark as the end.
        """
        end = self.high_watermark if limit is None else limit
        rows = self._rows
        j = bisect.bisect_left(self._column(_LAST), offset) * _ROW
        found: list[BatchLocation] = []
        total = 0
        while j < len(rows) and rows[j + _LAST] < end:
            size = rows[j + _SIZE]
            if total + size > max_bytes and (found or not first_may_exceed):
                break
            found.append(
                BatchLocation(
                    rows[j + _BASE], rows[j + _LAST], rows[j + _SEGMENT], rows[j + _POSITION], size
                )
            )
            total += size
            j += _ROW
        return found

    def batches_from_timestamp(self, timestamp: int) -> Iterator[BatchLocation]:
        """Durable tier-1 batches from the first one holding a record with timestamp >=
        `timestamp` on, in offset order (the caller stops at its first match)."""
        i = bisect.bisect_left(self._column(_TS_PREFIX), timestamp)
        while (location := self._location(i)) is not None:
            if self._rows[i * _ROW + _MAX_TS] >= timestamp:
                yield location
            i += 1

    def batch_with_max_timestamp(self, from_offset: int = 0) -> BatchLocation | None:
        """The durable tier-1 batch (ending at or after `from_offset`) with the largest
        timestamp; the earliest one on a tie."""
        rows = self._rows
        first = bisect.bisect_left(self._column(_LAST), from_offset)
        best = -1
        for i in range(first, self._row_count()):
            j = i * _ROW
            if rows[j + _LAST] >= self.high_watermark:
                break
            if best < 0 or rows[j + _MAX_TS] > rows[best * _ROW + _MAX_TS]:
                best = i
        return self._location(best) if best >= 0 else None

    def _location(self, i: int) -> BatchLocation | None:
        rows, j = self._rows, i * _ROW
        if j >= len(rows) or rows[j + _LAST] >= self.high_watermark:
            return None
        return BatchLocation(
            rows[j + _BASE],
            rows[j + _LAST],
            rows[j + _SEGMENT],
            rows[j + _POSITION],
            rows[j + _SIZE],
        )

    # --- idempotent producers ---------------------------------------------------------

    def check_sequence(
        self, producer_id: int, epoch: int, first_seq: int, count: int
    ) -> SequenceCheck:
        state = self._producers.get(producer_id) if self._producers else None
        if state is None:
            return _IN_ORDER
        batches = state.batches
        # The common case first: the batch right after the last one (never a retry of a
        # remembered batch: those end at or before the last sequence).
        if (
            epoch == state.epoch
            and batches
            and first_seq == _next_sequence(batches[-1].last_sequence)
        ):
            return _IN_ORDER
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
        return _IN_ORDER

    def record_sequence(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        count: int,
        base_offset: int,
        replay: bool = False,
    ) -> None:
        """Remember a producer's batch. With `replay` (rebuilding state on start, on top
        of a saved snapshot) older epochs and batches already known are ignored."""
        if self._producers is None:
            self._producers = {}
        state = self._producers.get(producer_id)
        if (
            replay
            and state is not None
            and (epoch < state.epoch or any(b.base_offset >= base_offset for b in state.batches))
        ):
            return
        if state is None or epoch != state.epoch:
            state = self._producers[producer_id] = ProducerState(epoch)
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        batches = state.batches
        batches.append(ProducerBatch(first_seq, last_seq, base_offset))
        if len(batches) > PRODUCER_BATCH_CACHE:
            del batches[:-PRODUCER_BATCH_CACHE]

    def restore_producer(
        self, producer_id: int, epoch: int, batches: list[tuple[int, int, int]]
    ) -> None:
        if self._producers is None:
            self._producers = {}
        self._producers[producer_id] = ProducerState(
            epoch, [ProducerBatch(*b) for b in batches[-PRODUCER_BATCH_CACHE:]]
        )

    def producer_snapshot(self) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
        """(producer id, epoch, batches) for every producer, durable batches only: a batch
        still being written may yet fail and be rolled back."""
        snapshot = []
        for producer_id, state in (self._producers or {}).items():
            durable = [
                (b.first_sequence, b.last_sequence, b.base_offset)
                for b in state.batches
                if b.base_offset < self.high_watermark
            ]
            if durable:
                snapshot.append((producer_id, state.epoch, durable))
        return snapshot

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
