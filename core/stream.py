"""A stream: one Kafka topic, its virtual partitions and the segments that hold their data.

The open segments (the current epoch) own contiguous ranges of the partitions; `_owners`
maps a partition to its open segment, and the partition index remembers the segment of every
batch. A scale event (`scale`) seals segments and opens successors: committed in metadata
first, then switched in memory synchronously, i.e. between two appends. Sealed segments stay
readable; offsets and producer state are per partition and simply continue.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from .errors import ErrorCode
from .metadata import (
    ChunkRecord,
    ChunkSlice,
    MetadataStore,
    ProducerSnapshot,
    SegmentRecord,
    TopicRecord,
)
from .partition import BatchLocation, Partition
from .recordbatch import (
    RecordBatchError,
    decode_records,
    patch_base_offset,
    read_batch_header,
    split_batches,
)
from .scaling.crash import crash_point
from .scaling.plan import ScaleError, check_scale
from .segments.chunks import iter_batches
from .segments.log import (
    LogTrimmed,
    PendingAppend,
    SegmentLog,
    Tier1Usage,
    log_file_name,
    parse_log_file_name,
)
from .segments.objectstore import ObjectNotFound, ObjectStoreUnavailable
from .tiering import READ_AHEAD_SLICES

if TYPE_CHECKING:
    from .tiering import TierManager

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


@dataclass(slots=True)
class SegmentStats:
    """Counters of one segment since this process opened it (metrics and the scaler)."""

    created: float  # time.monotonic() when opened or created
    bytes_in: int = 0
    records_in: int = 0
    bytes_out: int = 0


@dataclass(slots=True)
class ScaleResult:
    kind: str  # "split" or "merge"
    epoch: int
    sealed: list[int]
    successors: list[SegmentRecord]


def _legacy_segment_of_file(name: str) -> int | None:
    """The segment id of a pre-rolling `segment-<id>.log` file name."""
    middle = name[len("segment-") : -len(".log")]
    if name.startswith("segment-") and name.endswith(".log") and middle.isdigit():
        return int(middle)
    return None


class Stream:
    def __init__(
        self,
        record: TopicRecord,
        directory: str,
        metadata: MetadataStore | None = None,
        spawn_flusher: Callable[[SegmentLog], None] | None = None,
        tier: TierManager | None = None,
    ) -> None:
        """`metadata` and `spawn_flusher` (starts a log's flusher task) are needed by
        `scale`; `tier` (rolling, uploads, tier-2 reads) by everything beyond tier 1."""
        self.record = record
        self.directory = directory
        self._metadata = metadata
        self._spawn_flusher = spawn_flusher
        self.tier = tier
        self.usage = tier.usage if tier is not None else Tier1Usage()
        # Confirmed tier-2 chunks by id.
        self.chunks: dict[int, ChunkRecord] = {}
        self._partitions: dict[int, Partition] = {}
        self.segments: dict[int, SegmentLog] = {}
        self.stats: dict[int, SegmentStats] = {}
        # (first partition, last partition, segment id) of the open segments, sorted.
        self._owners: list[tuple[int, int, int]] = []
        self.scale_events = {"split": 0, "merge": 0}
        self.deleted = False

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def partition_count(self) -> int:
        return self.record.partitions

    def _new_log(
        self,
        segment_id: int,
        after: list[SegmentLog] | None = None,
        uploaded_end: int = 0,
        existing_bases: Sequence[int] = (),
    ) -> SegmentLog:
        tier = self.tier
        return SegmentLog(
            self.directory,
            segment_id,
            self._on_durable,
            self._on_failed,
            after,
            roll_bytes=tier.settings.chunk_bytes if tier else 8 << 20,
            roll_age_s=tier.settings.chunk_age_s if tier else 5.0,
            uploaded_end=uploaded_end,
            usage=self.usage,
            on_rolled=tier.on_rolled if tier else None,
            existing_bases=existing_bases,
        )

    def open_segments(self) -> list[SegmentLog]:
        """Open and replay every segment's log; returns the open ones for their flushers.

        Logs are replayed in segment id order: a successor always has a larger id than the
        segments it replaced, so each partition's batches are indexed in offset order.
        Segment files without a metadata row (a scale event that crashed before its commit)
        are removed.
        """
        os.makedirs(self.directory, exist_ok=True)
        known = {seg.segment_id for seg in self.record.segments}
        bases: dict[int, list[int]] = {}
        for entry in os.listdir(self.directory):
            parsed = parse_log_file_name(entry)
            if parsed is None and (legacy := _legacy_segment_of_file(entry)) is not None:
                # A data folder from before rolling files: its one file starts at 0.
                parsed = (legacy, 0)
                os.rename(
                    os.path.join(self.directory, entry),
                    os.path.join(self.directory, log_file_name(legacy, 0)),
                )
                entry = log_file_name(legacy, 0)
            if parsed is None:
                continue
            if parsed[0] not in known:
                log.warning("stream %s: removing uncommitted segment file %s", self.name, entry)
                os.remove(os.path.join(self.directory, entry))
            else:
                bases.setdefault(parsed[0], []).append(parsed[1])
        if self._metadata is not None:
            for partition_index, offset in self._metadata.load_log_starts(self.name).items():
                self.partition(partition_index).log_start_offset = offset
            for chunk in self._metadata.load_chunks(self.name):
                self.add_chunk(chunk)
            for saved in self._metadata.load_producer_states(self.name):
                self.partition(saved.partition).restore_producer(
                    saved.producer_id, saved.epoch, saved.batches
                )
        now = time.monotonic()
        for seg in sorted(self.record.segments, key=lambda s: s.segment_id):
            segment = self._new_log(
                seg.segment_id,
                uploaded_end=seg.uploaded_end,
                existing_bases=bases.get(seg.segment_id, ()),
            )
            self.segments[seg.segment_id] = segment
            self.stats[seg.segment_id] = SegmentStats(now)
            self._replay(seg.segment_id, segment)
            if seg.sealed:
                segment.seal()
            else:
                self._owners.append((seg.first_partition, seg.last_partition, seg.segment_id))
        self._owners.sort()
        for partition in self._partitions.values():
            slices = partition.slices()
            tier2_end = slices[-1].last_offset + 1 if slices else 0
            partition.next_offset = max(
                partition.next_offset, tier2_end, partition.log_start_offset
            )
            partition.high_watermark = partition.next_offset
        return [self.segments[segment_id] for _f, _l, segment_id in self._owners]

    def _replay(self, segment_id: int, segment: SegmentLog) -> None:
        for entry in segment.replay():
            header = read_batch_header(entry.batch)
            partition = self.partition(entry.partition)
            if partition.local_batch_count and header.base_offset != partition.next_offset:
                # Successor flushers wait for their predecessors, so this is not expected.
                log.warning(
                    "stream %s partition %d: segment %d batch at offset %d, expected %d",
                    self.name,
                    entry.partition,
                    segment_id,
                    header.base_offset,
                    partition.next_offset,
                )
                if header.base_offset < partition.next_offset:
                    continue  # already indexed: never index an offset twice
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
                    replay=True,
                )

    def partition(self, index: int) -> Partition:
        """The partition object, created on first use: idle partitions cost nothing."""
        partition = self._partitions.get(index)
        if partition is None:
            partition = self._partitions[index] = Partition(index)
        return partition

    def iter_partitions(self) -> list[tuple[int, Partition]]:
        """The partitions that exist in memory (used or replayed); idle ones do not."""
        return list(self._partitions.items())

    def has_partition(self, index: int) -> bool:
        return 0 <= index < self.record.partitions

    def _owner(self, index: int) -> tuple[int, SegmentLog]:
        i = bisect.bisect_right(self._owners, (index, 2**31, 2**63)) - 1
        first, last, segment_id = self._owners[i]
        assert first <= index <= last, "open segments must cover every partition"
        return segment_id, self.segments[segment_id]

    def owners(self) -> list[tuple[int, int, int]]:
        """(first partition, last partition, segment id) of the open segments, sorted."""
        return list(self._owners)

    @property
    def epoch(self) -> int:
        return max((seg.epoch for seg in self.record.segments), default=0)

    def scale(self, seal: Sequence[int], new_ranges: Sequence[tuple[int, int]]) -> ScaleResult:
        """Seal open segments `seal` and open successors owning `new_ranges` (epoch + 1).

        Validated first (ScaleError: not open, not adjacent, ranges not tiling the sealed
        partitions, not a split or merge). The successors' files are created, then one
        metadata transaction commits the event; only then the switch happens in memory,
        synchronously, so every append queued before it went to the old segments and every
        later one goes to the successors. The sealed logs drain their queues and stay open
        for reads; successors flush only after their predecessors drained. A crash before
        the commit leaves orphan files that `open_segments` removes.
        """
        if self._metadata is None or self._spawn_flusher is None:
            raise ScaleError("stream is not attached to a store")
        if self.deleted:
            raise ScaleError("stream is deleted")
        kind, ranges = check_scale(self._owners, seal, new_ranges)
        next_id = max(self.segments) + 1
        epoch = self.epoch + 1
        successors = [
            SegmentRecord(next_id + i, epoch, first, last) for i, (first, last) in enumerate(ranges)
        ]
        predecessors = [self.segments[segment_id] for segment_id in seal]
        logs = [self._new_log(s.segment_id, predecessors) for s in successors]
        crash_point("scale-before-commit")
        try:
            self._metadata.scale_segments(self.name, list(seal), successors)
        except BaseException:
            for segment_log in logs:
                segment_log.close()  # no file exists before the first write
            raise
        crash_point("scale-after-commit")
        # From here on synchronous: no append can run between the seal and the switch.
        now = time.monotonic()
        for segment_log in predecessors:
            segment_log.seal()
        sealed = set(seal)
        for seg in self.record.segments:
            if seg.segment_id in sealed:
                seg.sealed = True
        self.record.segments.extend(successors)
        for record, segment_log in zip(successors, logs, strict=True):
            self.segments[record.segment_id] = segment_log
            self.stats[record.segment_id] = SegmentStats(now)
            self._spawn_flusher(segment_log)
        self._owners = sorted(
            [o for o in self._owners if o[2] not in sealed]
            + [(s.first_partition, s.last_partition, s.segment_id) for s in successors]
        )
        self.scale_events[kind] += 1
        return ScaleResult(kind, epoch, list(seal), successors)

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
        if self.usage.full:  # tier 2 is behind (or down): retriable, nothing is written
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
        partition = self.partition(index)
        for header, _ in batches:
            if header.is_transactional or header.is_control:
                return AppendResult(
                    ErrorCode.INVALID_RECORD, message="transactions are not supported"
                )
        segment_id, segment = self._owner(index)
        stats = self.stats[segment_id]
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
            stats.bytes_in += len(batch)
            stats.records_in += header.record_count
            partition.bytes_in += len(batch)
            partition.records_in += header.record_count
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

    async def read(
        self, index: int, offset: int, max_bytes: int, first_may_exceed: bool = True
    ) -> ReadResult:
        """Whole batches from `offset`, from tier 1 or (for older offsets) a tier-2 chunk."""
        if self.deleted or not self.has_partition(index):
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        partition = self.partition(index)
        hw, start = partition.high_watermark, partition.log_start_offset
        if offset < start or offset > hw:
            return ReadResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start)
        if offset >= partition.local_start_offset:
            try:
                return ReadResult(
                    ErrorCode.NONE,
                    hw,
                    start,
                    self._read_local(partition, offset, max_bytes, first_may_exceed),
                )
            except LogTrimmed:
                pass  # trimmed while indexed: the chunk has it
        try:
            batches = await self._read_tier2(partition, offset, max_bytes, first_may_exceed)
        except (ObjectStoreUnavailable, ObjectNotFound, OSError) as exc:
            log.warning(
                "topic %s partition %d: tier-2 read at %d failed: %s", self.name, index, offset, exc
            )
            return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR, hw, start)
        return ReadResult(ErrorCode.NONE, hw, start, batches)

    def _read_local(
        self, partition: Partition, offset: int, max_bytes: int, first_may_exceed: bool
    ) -> list[bytes]:
        batches = []
        for loc in partition.locate(offset, max_bytes, first_may_exceed):
            batches.append(self.segments[loc.segment_id].read(loc.position, loc.size))
            self.stats[loc.segment_id].bytes_out += loc.size
        return batches

    async def _read_tier2(
        self, partition: Partition, offset: int, max_bytes: int, first_may_exceed: bool
    ) -> list[bytes]:
        """Batches from the tier-2 slice holding `offset` (one ranged GET, then the cache)."""
        location = partition.slice_for(offset)
        if location is None or self.tier is None:
            return []
        data = await self.tier.read_slice(self, location)
        following = location
        for _ in range(READ_AHEAD_SLICES):  # a catch-up reader will want these next
            following = partition.slice_for(following.last_offset + 1)
            if following is None or following.first_offset >= partition.local_start_offset:
                break
            self.tier.prefetch(self, following)
        batches: list[bytes] = []
        total = 0
        view = memoryview(data)
        for info in iter_batches(view):
            if info.last_offset < offset:
                continue
            if info.last_offset >= partition.high_watermark:
                break
            if total + info.size > max_bytes and (batches or not first_may_exceed):
                break
            batches.append(bytes(view[info.start : info.start + info.size]))
            total += info.size
        return batches

    async def offset_for_timestamp(self, index: int, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record at or after `timestamp` and at or after
        the log start; (-1, -1) if none. timestamp -3 asks for the record with the largest
        timestamp (ListOffsets v7). Tier-2 slices older than tier 1 are searched first, in
        offset order, then tier 1. ObjectStoreUnavailable while tier 2 is down."""
        partition = self.partition(index)
        if timestamp == -3:
            return await self._max_timestamp_record(partition)
        for location in self._tier2_only_slices(partition):
            if location.max_timestamp < timestamp:
                continue
            for record in await self._slice_records(partition, location):
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        for batch_location in partition.batches_from_timestamp(timestamp):
            if batch_location.last_offset < partition.log_start_offset:
                continue
            for record in self._local_records(partition, batch_location):
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return -1, -1

    async def _max_timestamp_record(self, partition: Partition) -> tuple[int, int]:
        candidates = []
        location = partition.batch_with_max_timestamp(partition.log_start_offset)
        if location is not None:
            candidates.extend(self._local_records(partition, location))
        slices = self._tier2_only_slices(partition)
        if slices:
            best_slice = max(slices, key=lambda s: s.max_timestamp)
            best_local = max((r.timestamp for r in candidates), default=-1)
            if best_slice.max_timestamp >= best_local:
                candidates.extend(await self._slice_records(partition, best_slice))
        if not candidates:
            return -1, -1
        best = max(candidates, key=lambda r: (r.timestamp, -r.offset))
        return best.offset, best.timestamp

    def _tier2_only_slices(self, partition: Partition) -> list[ChunkSlice]:
        """Slices holding offsets at or after the log start that tier 1 no longer has."""
        start, local = partition.log_start_offset, partition.local_start_offset
        return [s for s in partition.slices() if s.last_offset >= start and s.first_offset < local]

    def _local_records(self, partition: Partition, location: BatchLocation) -> list:
        try:
            batch = self.segments[location.segment_id].read(location.position, location.size)
        except LogTrimmed:  # trimmed after indexing: its slice was searched already
            return []
        return [r for r in decode_records(batch) if r.offset >= partition.log_start_offset]

    async def _slice_records(self, partition: Partition, location: ChunkSlice) -> list:
        assert self.tier is not None
        data = await self.tier.read_slice(self, location)
        start = partition.log_start_offset
        records = []
        for info in iter_batches(data):
            if info.last_offset >= start:
                batch = data[info.start : info.start + info.size]
                records.extend(r for r in decode_records(batch) if r.offset >= start)
        return records

    # --- tier 2 ------------------------------------------------------------------------

    def add_chunk(self, chunk: ChunkRecord) -> None:
        """Index a confirmed chunk's slices in their partitions."""
        self.chunks[chunk.chunk_id] = chunk
        for s in chunk.slices:
            s.chunk_id = chunk.chunk_id
            self.partition(s.partition).add_slice(s)

    def producer_snapshots(self, partitions: set[int]) -> list[ProducerSnapshot]:
        """The durable producer states of `partitions`, saved with a chunk."""
        return [
            ProducerSnapshot(index, producer_id, epoch, batches)
            for index in sorted(partitions)
            for producer_id, epoch, batches in self.partition(index).producer_snapshot()
        ]

    def forget_trimmed(self) -> None:
        """Drop tier-1 index entries whose files were trimmed (reads go to tier 2)."""
        for partition in self._partitions.values():
            count = 0
            while count < partition.local_batch_count:
                segment_id, position = partition.local_location(count)
                if position >= self.segments[segment_id].local_start:
                    break
                count += 1
            partition.drop_local_prefix(count)

    def expired_chunks(self) -> list[ChunkRecord]:
        """Chunks every slice of which lies below its partition's log start offset."""
        return [
            chunk
            for chunk in self.chunks.values()
            if all(
                s.last_offset < self.partition(s.partition).log_start_offset for s in chunk.slices
            )
        ]

    def forget_chunks(self, chunks: list[ChunkRecord]) -> None:
        for chunk in chunks:
            self.chunks.pop(chunk.chunk_id, None)
        touched = {s.partition for chunk in chunks for s in chunk.slices}
        for index in touched:
            partition = self.partition(index)
            partition.drop_slices_below(partition.log_start_offset)

    def close(self) -> None:
        """The topic was deleted: stop its logs and give back its share of the budget."""
        self.deleted = True
        for segment in self.segments.values():
            self.usage.pending -= segment.unuploaded_bytes
            segment.close()
        for partition in self._partitions.values():
            partition.wake_waiters()
