"""A stream: one Kafka topic, its virtual partitions and the segments that hold their data.

`Stream` holds the state; each concern that works on it has a module of its own:
`ownership` (which open segment owns a partition, scale events), `recovery` (opening and
replaying the logs on start), `append` (produce and idempotence), `reads` (fetch from
tier 1 or tier 2), `timestamps` (ListOffsets by time across tiers) and `tier_index` (the
tier-2 chunks the partitions index).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from ..api import AppendResult, PendingAppend, ReadResult, ScaleResult
from ..metadata import ChunkRecord, ChunkSlice, MetadataStore, ProducerSnapshot, TopicRecord
from ..partition import Partition
from ..segments.log import SegmentLog, Tier1Usage, WalSink
from ..shared_ints import shared
from . import append, ownership, reads, recovery, tier_index, timestamps
from .reservations import Reservations, initial_reserve_at
from .stats import SegmentStats


class TierLink(Protocol):
    """What a stream needs from tier 2 (`core.tiering.TierManager` provides it)."""

    usage: Tier1Usage

    @property
    def roll_bytes(self) -> int: ...

    @property
    def roll_age_s(self) -> float: ...

    def on_rolled(self, segment: SegmentLog) -> None: ...

    async def read_slice(self, stream: Stream, location: ChunkSlice) -> bytes: ...

    def prefetch(self, stream: Stream, location: ChunkSlice) -> None: ...


class WalLink(Protocol):
    """The node's write-ahead log in object storage (`core.wal.writer.WalWriter`)."""

    def bind(self, topic: str, topic_id: uuid.UUID) -> WalSink: ...


class Stream:
    def __init__(
        self,
        record: TopicRecord,
        directory: str,
        metadata: MetadataStore | None = None,
        spawn_flusher: Callable[[SegmentLog], None] | None = None,
        tier: TierLink | None = None,
        reservations: Reservations | None = None,
        wal: WalLink | None = None,
    ) -> None:
        """`metadata` and `spawn_flusher` (starts a log's flusher task) are needed by
        `scale`; `tier` (rolling, uploads, tier-2 reads) by everything beyond tier 1;
        `reservations` (with `metadata`) reserves offsets before they are acknowledged
        (core/stream/reservations.py; without it offsets are not reserved)."""
        self.record = record
        self.directory = directory
        self.metadata = metadata
        self.spawn_flusher = spawn_flusher
        self.tier = tier
        self.wal = wal  # with `--wal object`: where synced appends go to become durable
        self.usage = tier.usage if tier is not None else Tier1Usage()
        # Confirmed tier-2 chunks by id.
        self.chunks: dict[int, ChunkRecord] = {}
        self._partitions: dict[int, Partition] = {}
        self.segments: dict[int, SegmentLog] = {}
        self.stats: dict[int, SegmentStats] = {}
        self.ownership = ownership.Ownership()
        self.scale_events = {"split": 0, "merge": 0}
        self.deleted = False
        self.reservations = reservations if metadata is not None else None
        # partition -> its offset reservation in the metadata store, as last loaded or
        # raised here (a partition object created later starts from it)
        self.reserved_marks: dict[int, int] = {}

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def topic_id(self) -> uuid.UUID:
        return self.record.topic_id

    @property
    def partition_count(self) -> int:
        return self.record.partitions

    @property
    def configs(self) -> dict[str, str]:
        return self.record.configs

    @property
    def epoch(self) -> int:
        return max((seg.epoch for seg in self.record.segments), default=0)

    def new_log(
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
            append.on_durable,
            functools.partial(append.on_failed, self.name),
            after,
            roll_bytes=tier.roll_bytes if tier else 8 << 20,
            roll_age_s=tier.roll_age_s if tier else 5.0,
            uploaded_end=uploaded_end,
            usage=self.usage,
            on_rolled=tier.on_rolled if tier else None,
            existing_bases=existing_bases,
            wal=self.wal.bind(self.name, self.topic_id) if self.wal is not None else None,
        )

    # --- partitions --------------------------------------------------------------------

    def partition(self, index: int) -> Partition:
        """The partition object, created on first use: idle partitions cost nothing."""
        partition = self._partitions.get(index)
        if partition is None:
            partition = self._new_partition(index)
            # keyed by the partition's shared index, not the caller's (a request's) int
            self._partitions[partition.index] = partition
        return partition

    def reset_partition(self, index: int) -> Partition:
        """A fresh, empty partition object (a node taking over a partition from another
        reloads it from the database: core/stream/handover.py)."""
        partition = self._new_partition(index)
        self._partitions[partition.index] = partition
        return partition

    def _new_partition(self, index: int) -> Partition:
        # the index and marks as shared objects: every topic repeats them
        partition = Partition(shared(index))
        if self.reservations is not None:
            partition.reserved = shared(self.reserved_marks.get(index, 0))
            partition.reserve_at = shared(initial_reserve_at(partition.reserved))
        return partition

    def request_reservation(self, partition: Partition) -> None:
        """An append passed the middle of the partition's reserved block: ask for more."""
        if self.reservations is not None:
            self.reservations.request(self, partition)

    def loaded_partition(self, index: int) -> Partition | None:
        """The partition object if it exists in memory (no creation)."""
        return self._partitions.get(index)

    def iter_partitions(self) -> list[tuple[int, Partition]]:
        """The partitions that exist in memory (used or replayed); idle ones do not."""
        return list(self._partitions.items())

    def has_partition(self, index: int) -> bool:
        return 0 <= index < self.record.partitions

    # --- the concerns, each in its module ------------------------------------------------

    def open_segments(self) -> list[SegmentLog]:
        return recovery.open_segments(self)

    def owners(self) -> list[tuple[int, int, int]]:
        """(first partition, last partition, segment id) of the open segments, sorted."""
        return self.ownership.ranges()

    @property
    def tail_segment_id(self) -> int:
        """The open segment that owns the stream's last partition (new partitions go there)."""
        return self.ownership.tail()

    def add_segment(self, segment_id: int, log: SegmentLog, created: float) -> None:
        """A segment's log joins the stream, its counters starting at `created`
        (time.monotonic()): on recovery, a scale event's successors, a segment handed over
        by another node. Its flusher is the caller's to start."""
        self.segments[segment_id] = log
        self.stats[segment_id] = SegmentStats(created)

    def scale(self, seal: Sequence[int], new_ranges: Sequence[tuple[int, int]]) -> ScaleResult:
        return ownership.scale(self, seal, new_ranges)

    def grow_partitions(self, count: int) -> None:
        ownership.grow_partitions(self, count)

    async def append(
        self, index: int, records: bytes | memoryview | None, acks: int
    ) -> AppendResult:
        """Validate and append; returns once durable (acks != 0), or at once for acks=0."""
        started = self.start_append(index, records, acks)
        if isinstance(started, AppendResult):
            return started
        return await started.wait()

    def start_append(
        self,
        index: int,
        records: bytes | memoryview | None,
        acks: int,
        transactional: bool = False,
    ) -> AppendResult | PendingAppend:
        return append.start_append(self, index, records, acks, transactional)

    def start_marker(self, index: int, marker: bytes) -> AppendResult | PendingAppend:
        """Queue a transaction marker (a control batch) like any append."""
        return append.start_append(self, index, marker, -1, marker=True)

    async def read(
        self,
        index: int,
        offset: int,
        max_bytes: int,
        first_may_exceed: bool = True,
        read_committed: bool = False,
    ) -> ReadResult:
        return await reads.read(self, index, offset, max_bytes, first_may_exceed, read_committed)

    def plan_read(
        self,
        index: int,
        offset: int,
        max_bytes: int,
        first_may_exceed: bool = True,
        read_committed: bool = False,
    ) -> ReadResult | reads.LocalRead | None:
        return reads.plan(self, index, offset, max_bytes, first_may_exceed, read_committed)

    async def offset_for_timestamp(self, index: int, timestamp: int) -> tuple[int, int]:
        return await timestamps.offset_for_timestamp(self, index, timestamp)

    def add_chunk(self, chunk: ChunkRecord) -> None:
        tier_index.add_chunk(self, chunk)

    def producer_snapshots(self, partitions: set[int]) -> list[ProducerSnapshot]:
        return tier_index.producer_snapshots(self, partitions)

    def forget_trimmed(self, partitions: Collection[int] | None = None) -> None:
        tier_index.forget_trimmed(self, partitions)

    def expired_chunks(self) -> list[ChunkRecord]:
        return tier_index.expired_chunks(self)

    def forget_chunks(self, chunks: list[ChunkRecord]) -> None:
        tier_index.forget_chunks(self, chunks)

    def close(self) -> None:
        """The topic was deleted: stop its logs and give back its share of the budget."""
        self.deleted = True
        for segment in self.segments.values():
            self.usage.pending -= segment.unuploaded_bytes
            segment.close()
        for partition in self._partitions.values():
            append.fail_deferred(partition)
            partition.wake_waiters()
