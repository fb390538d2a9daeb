"""The stream store: every topic's stream, their metadata, and the tasks that flush them.

`StreamStore` is the engine behind `core.api.Store`: handlers talk to it through that
interface only. It owns a nursery in which each segment's flusher, the scalers and tier 2
run. `run` opens (and recovers) everything, `stop` drains queued writes and closes.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import trio

from .api import PendingRead, ReadResult, ScaleResult, TopicError, validate_topic_name
from .cluster.view import CLUSTER
from .compaction import CompactionSettings, Compactor
from .configs.topic import validate_topic_configs
from .configs.topic_defs import ConfigError
from .errors import ErrorCode
from .metadata import (
    MetadataStore,
    SegmentRecord,
    SQLiteMetadataStore,
    TopicExistsError,
    TopicRecord,
)
from .metadata_worker import MetadataWorker
from .scaling.placement import least_loaded_other, place_segments
from .scaling.plan import ScaleError, split_range
from .scaling.policy import Decision
from .scaling.scaler import RateMeter, run_scaler
from .segments.log import SegmentLog, appends_sent_together
from .segments.objectstore import ObjectStore, open_object_store
from .stream import Stream, reads
from .stream.handover import MoveTimings, hand_over
from .stream.reservations import Reservations
from .tiering import TierManager, TierSettings
from .wal.restore import restore_tails
from .wal.writer import WalSettings, WalWriter

log = logging.getLogger(__name__)

MAX_PARTITIONS_PER_TOPIC = 100_000
PLACEMENTS = ("least-loaded", "creator")
WAL_KINDS = ("local", "object")


@dataclass(slots=True)
class StoreSettings:
    data_dir: str
    default_partitions: int = 1
    auto_create_topics: bool = True
    scaling_window_s: float = 60.0  # the scaler's sliding window
    scaling_interval_s: float = 5.0  # how often the scaler evaluates each stream
    tier2_url: str | None = None  # None: a folder `tier2` in the data dir; or s3://bucket/prefix
    s3_endpoint: str | None = None
    tier: TierSettings = field(default_factory=TierSettings)
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    # the write-ahead log: "local" (fsync'd files) or "object" (core/wal); several nodes set
    # the incarnation their lease was taken in (the write-ahead commits are fenced on it)
    wal: str = "local"
    wal_settings: WalSettings = field(default_factory=WalSettings)
    wal_incarnation: int = 0
    # None: SQLite in the data dir; postgresql://...: shared metadata (docs/several-nodes.md)
    metadata_url: str | None = None
    node_id: int | None = None  # with metadata_url: this node (owner of what it creates)
    # several active nodes: where a new topic's segments go (docs/several-nodes.md, placement):
    # "least-loaded" (one segment per live node, up to the partition count) or
    # "creator" (one segment, on the node that creates the topic)
    placement: str = field(
        default_factory=lambda: os.environ.get("STREAMGATE_PLACEMENT", "least-loaded")
    )


class StreamStore:
    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings
        self.streams: dict[str, Stream] = {}
        self._by_id: dict[uuid.UUID, Stream] = {}
        self.meters: dict[str, RateMeter] = {}
        self._metadata: MetadataStore | None = None
        self.object_store: ObjectStore | None = None
        self._tier: TierManager | None = None
        self._worker: MetadataWorker | None = None
        self.reservations: Reservations | None = None
        self.compactor: Compactor | None = None
        self.wal: WalWriter | None = None
        self._nursery: trio.Nursery | None = None
        self._stopping = trio.Event()
        self.cluster_id = ""
        # Called with the topic's name after a delete (e.g. committed offsets are dropped).
        self.on_topic_deleted: list[Callable[[str], None]] = []
        # (topic, result, cause) after each applied split or merge (the console's history)
        self.on_scaled: list[Callable[[str, ScaleResult, str], None]] = []

    @property
    def metadata(self) -> MetadataStore:
        assert self._metadata is not None, "store is not running"
        return self._metadata

    @property
    def tier(self) -> TierManager:
        assert self._tier is not None, "store is not running"
        return self._tier

    @property
    def worker(self) -> MetadataWorker:
        """The one thread metadata commits run in (the group coordinator uses it too)."""
        assert self._worker is not None, "store is not running"
        return self._worker

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open and recover the store, then keep segment flushers, uploads and retention
        running until `stop`."""
        os.makedirs(self._streams_dir, exist_ok=True)
        if self.settings.wal not in WAL_KINDS:
            raise ValueError(
                f"wal must be one of {', '.join(WAL_KINDS)}, got {self.settings.wal!r}"
            )
        if self.settings.placement not in PLACEMENTS:
            raise ValueError(
                f"placement must be one of {', '.join(PLACEMENTS)}, got {self.settings.placement!r}"
            )
        if self.settings.metadata_url:
            from .metadata.postgres import PostgresMetadataStore  # psycopg only when asked for

            pg = PostgresMetadataStore(self.settings.metadata_url, self.settings.node_id)
            metadata: MetadataStore = pg
            self._metadata = metadata
            self.cluster_id = pg.cluster_id()
        else:
            metadata = SQLiteMetadataStore(os.path.join(self.settings.data_dir, "metadata.db"))
            self._metadata = metadata
            self.cluster_id = self._load_cluster_id()
        self.object_store = open_object_store(
            self.settings.tier2_url, self.settings.data_dir, self.settings.s3_endpoint
        )
        self._worker = MetadataWorker()
        self.reservations = Reservations(self._worker.call)
        self._tier = TierManager(self.object_store, metadata, self._worker, self.settings.tier)
        self.compactor = Compactor(
            self.object_store,
            metadata,
            self._worker,
            self.settings.compaction,
            self._tier.cache.drop_object,
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                tier_scope = trio.CancelScope()
                tier_done = trio.Event()
                nursery.start_soon(_run_cancellable, tier_scope, tier_done, self._tier.run)
                reservations_scope = trio.CancelScope()
                reservations_done = trio.Event()
                nursery.start_soon(
                    _run_cancellable, reservations_scope, reservations_done, self.reservations.run
                )
                topics = metadata.load_topics()
                wal_scope = trio.CancelScope()
                wal_done = trio.Event()
                if self.settings.wal == "object":
                    self.wal = WalWriter(
                        self.object_store,
                        metadata,
                        self._worker.call,
                        self.settings.node_id or 1,
                        self.settings.wal_settings,
                    )
                    self.wal.incarnation = self.settings.wal_incarnation
                    if self.settings.node_id is not None:
                        self._tier.key_writer = (
                            f".n{self.settings.node_id}i{self.settings.wal_incarnation}"
                        )
                    await restore_tails(
                        metadata,
                        self.object_store,
                        self._streams_dir,
                        topics,
                        self.settings.node_id,
                        self._worker.call,
                    )
                    nursery.start_soon(_run_cancellable, wal_scope, wal_done, self.wal.run)
                else:
                    wal_done.set()
                for record in topics:
                    self._open_stream(record)
                self._remove_orphan_directories()
                compaction_scope = trio.CancelScope()
                compaction_done = trio.Event()
                nursery.start_soon(
                    _run_cancellable, compaction_scope, compaction_done, self.compactor.run
                )
                log.info(
                    "store open: %d topics in %s, tier 2: %s",
                    len(self.streams),
                    self.settings.data_dir,
                    self.object_store.description,
                )
                task_status.started()
                await self._stopping.wait()
                compaction_scope.cancel()
                await compaction_done.wait()
                wal_scope.cancel()  # what it has not recorded was never acknowledged
                await wal_done.wait()
                reservations_scope.cancel()
                tier_scope.cancel()  # uploads in flight are redone after the next start
                await tier_done.wait()  # no upload thread may still read a file we close
                for stream in self.streams.values():
                    for segment in stream.segments.values():
                        segment.close()
            await self._settle_reservations()
        finally:
            metadata.close()
            self.object_store.close()

    def stop(self) -> None:
        self._stopping.set()

    async def _settle_reservations(self) -> None:
        """A clean stop: every append is durable (or failed and undone), so each partition
        this node leads ends exactly at its next offset; that becomes its mark. A local log
        removed after a clean stop with everything in tier 2 then loses nothing."""
        for stream in self.streams.values():
            if stream.deleted or stream.reservations is None:
                continue
            ends = {
                index: partition.next_offset
                for index, partition in stream.iter_partitions()
                if partition.reserved != partition.next_offset
                and CLUSTER.is_local(stream.name, index)
            }
            if not ends:
                continue
            try:
                await self.worker.call(self.metadata.settle_reservations, stream.name, ends)
            except Exception as exc:  # noqa: BLE001 - the marks stay upper bounds
                log.warning("topic %s: settling offset reservations failed: %s", stream.name, exc)

    @property
    def _streams_dir(self) -> str:
        return os.path.join(self.settings.data_dir, "streams")

    def _load_cluster_id(self) -> str:
        path = os.path.join(self.settings.data_dir, "cluster_id")
        if not os.path.exists(path):
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(uuid.uuid4().hex[:22])
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        with open(path) as f:
            return f.read().strip()

    def adopt_topics(self, records: list[TopicRecord]) -> None:
        """Several nodes: open the topics another node created (known ones are skipped)."""
        for record in records:
            if record.name not in self.streams and self._nursery is not None:
                self._open_stream(record)

    def _open_stream(self, record: TopicRecord) -> Stream:
        nursery = self._nursery
        assert nursery is not None
        stream = Stream(
            record,
            os.path.join(self._streams_dir, record.topic_id.hex),
            self.metadata,
            lambda segment: nursery.start_soon(_run_flusher, segment),
            self.tier,
            self.reservations,
            self.wal,
        )
        for segment in stream.open_segments():
            nursery.start_soon(_run_flusher, segment)
        self.streams[record.name] = stream
        self._by_id[record.topic_id] = stream
        self.tier.attach(stream)
        if self.compactor is not None:
            self.compactor.attach(stream)
        settings = self.settings
        meter = self.meters[record.name] = RateMeter(stream, settings.scaling_window_s)
        nursery.start_soon(
            run_scaler,
            stream,
            self._apply_decision,
            settings.scaling_window_s,
            settings.scaling_interval_s,
            self._stopping,
            meter,
        )
        return stream

    # --- scale events ------------------------------------------------------------------

    def _apply_decision(self, stream: Stream, decision: Decision) -> None:
        if decision.kind == "move" and decision.to_node is not None:
            # several nodes: a cold segment joins its neighbour's node (scaling/gather.py)
            if self._nursery is not None:
                self._check_local(stream, decision.seal)
                self._nursery.start_soon(self._split_to, stream, decision, decision.to_node)
            return
        if CLUSTER.enabled and decision.kind == "split" and self._nursery is not None:
            # several nodes: the last successor goes to a less loaded live node, if any
            target = least_loaded_other(CLUSTER.open_segment_counts(), CLUSTER.node_id)
            if target is not None:
                self._check_local(stream, decision.seal)
                self._nursery.start_soon(self._split_to, stream, decision, target)
                return
        self._scale(stream, decision.seal, decision.new_ranges, f"policy: {decision.reason}")

    async def _split_to(self, stream: Stream, decision: Decision, target: int) -> None:
        from .metadata.postgres import PostgresMetadataStore

        pg = self.metadata
        assert isinstance(pg, PostgresMetadataStore)
        owners = [CLUSTER.node_id] * (len(decision.new_ranges) - 1) + [target]
        try:
            await hand_over(
                stream, pg, self.worker.call, decision.seal, decision.new_ranges, owners
            )
        except Exception as exc:  # noqa: BLE001 - a refused or failed split: keep serving
            log.warning("topic %s: split to node %d refused: %s", stream.name, target, exc)

    def _check_local(self, stream: Stream, seal: list[int]) -> None:
        """Several nodes: only the owner of a segment seals it (ScaleError otherwise); a
        merge of segments on two nodes is refused (move one of them first)."""
        for segment_id in seal:
            if not CLUSTER.segment_is_local(stream.name, segment_id):
                node = CLUSTER.segment_nodes.get(stream.name, {}).get(segment_id)
                raise ScaleError(
                    f"segment {segment_id} of {stream.name!r} is owned by node {node}; "
                    "scale it there"
                )

    def scale(self, name: str, seal: list[int], new_ranges: list[tuple[int, int]]) -> ScaleResult:
        """A manual scale event (admin endpoint). TopicError for an unknown topic,
        ScaleError when the request is refused."""
        return self._scale(self._existing(name), seal, new_ranges, "manual")

    def split(self, name: str, segment_id: int, parts: int = 2) -> ScaleResult:
        """Split open segment `segment_id` into `parts` ranges balanced by partition count."""
        stream = self._existing(name)
        for first, last, owner in stream.owners():
            if owner == segment_id:
                return self._scale(
                    stream, [segment_id], split_range(first, last, parts), "manual split"
                )
        raise ScaleError(f"segment {segment_id} is not an open segment of {name!r}")

    def merge(self, name: str, segment_ids: list[int]) -> ScaleResult:
        """Merge adjacent open segments into one."""
        stream = self._existing(name)
        ranges = [(f, last) for f, last, sid in stream.owners() if sid in set(segment_ids)]
        if len(ranges) != len(set(segment_ids)):
            raise ScaleError(f"not all of {segment_ids} are open segments of {name!r}")
        whole = (min(r[0] for r in ranges), max(r[1] for r in ranges))
        return self._scale(stream, segment_ids, [whole], "manual merge")

    def _scale(
        self, stream: Stream, seal: list[int], new_ranges: list[tuple[int, int]], why: str
    ) -> ScaleResult:
        self._check_local(stream, seal)
        try:
            result = stream.scale(seal, new_ranges)
        except ValueError as exc:  # ScaleError, or the metadata transaction refused it
            log.warning("topic %s: scale %s -> %s refused: %s", stream.name, seal, new_ranges, exc)
            raise ScaleError(str(exc)) from None
        if CLUSTER.enabled:  # several nodes: the successors stay on this node
            for successor in result.successors:
                CLUSTER.set_segment_owner(stream.name, successor.segment_id, CLUSTER.node_id)
        log.info(
            "topic %s: %s, epoch %d: sealed %s, opened %s (%s)",
            stream.name,
            result.kind,
            result.epoch,
            result.sealed,
            [(s.segment_id, s.first_partition, s.last_partition) for s in result.successors],
            why,
        )
        for listener in self.on_scaled:
            listener(stream.name, result, why)
        return result

    async def move(
        self, name: str, segment_id: int, to_node: int, parts: int = 1, cause: str = "requested"
    ) -> tuple[ScaleResult, MoveTimings]:
        """Several nodes: hand open segment `segment_id` over to node `to_node` (parts=1),
        or split it into `parts` successors, the last one on `to_node` and the others
        here. ScaleError / TopicError when refused (docs/several-nodes.md "Placement and moving
        segments")."""
        from .metadata.postgres import PostgresMetadataStore

        stream = self._existing(name)
        pg = self.metadata
        if not isinstance(pg, PostgresMetadataStore) or not CLUSTER.enabled:
            raise ScaleError("moving segments needs several active nodes (--multi-node true)")
        for first, last, owner in stream.owners():
            if owner == segment_id:
                ranges = [(first, last)] if parts <= 1 else split_range(first, last, parts)
                break
        else:
            raise ScaleError(f"segment {segment_id} is not an open segment of {name!r}")
        owners = [CLUSTER.node_id] * (len(ranges) - 1) + [to_node]
        if owners == [CLUSTER.node_id]:
            raise ScaleError(f"segment {segment_id} is on node {to_node} already")
        return await hand_over(
            stream, pg, self.worker.call, [segment_id], ranges, owners, cause=cause
        )

    def _remove_orphan_directories(self) -> None:
        """Drop stream folders whose topic is gone (a crash in the middle of a delete)."""
        known = {stream.record.topic_id.hex for stream in self.streams.values()}
        for entry in os.listdir(self._streams_dir):
            if entry not in known:
                shutil.rmtree(os.path.join(self._streams_dir, entry), ignore_errors=True)

    # --- topics ------------------------------------------------------------------------

    def topics(self) -> list[Stream]:
        return list(self.streams.values())

    def get(self, name: str) -> Stream | None:
        return self.streams.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> Stream | None:
        return self._by_id.get(topic_id)

    def check_new_topic(
        self, name: str, partitions: int = -1, configs: Mapping[str, str | None] | None = None
    ) -> tuple[int, dict[str, str]]:
        """What `create_topic` would create: (partition count, normalised configs).

        Changes nothing; raises TopicError (INVALID_CONFIG etc.) when the topic is refused.
        """
        validate_topic_name(name)
        if name in self.streams:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = self.settings.default_partitions
        if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, f"partitions must be 1..{MAX_PARTITIONS_PER_TOPIC}"
            )
        try:
            return partitions, validate_topic_configs(configs or {}, partitions)
        except ConfigError as exc:
            raise TopicError(exc.error_code, str(exc)) from None

    def create_topic(
        self, name: str, partitions: int = -1, configs: Mapping[str, str | None] | None = None
    ) -> Stream:
        """Create a topic with one segment owning all its partitions. Raises TopicError."""
        partitions, checked = self.check_new_topic(name, partitions, configs)
        record = TopicRecord(
            name,
            uuid.uuid4(),
            partitions,
            checked,
            segments=[SegmentRecord(0, 0, 0, partitions - 1)],
        )
        try:
            if CLUSTER.enabled and self.settings.placement == "least-loaded":
                self._create_placed(record)
            else:
                self.metadata.create_topic(record)
                if CLUSTER.enabled:  # led here at once, before the next sync says so
                    CLUSTER.set_segments(name, [(0, 0, partitions - 1, CLUSTER.node_id)])
                    CLUSTER.touch(name)
        except TopicExistsError as exc:  # another node created it first
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)) from None
        log.info("created topic %s with %d partitions", name, partitions)
        return self._open_stream(record)

    def _create_placed(self, record: TopicRecord) -> None:
        """Several nodes: min(partitions, live nodes) segments with contiguous partition
        ranges, each on a live node, least loaded (fewest open segments) first."""
        from .metadata.postgres import PostgresMetadataStore

        pg = self.metadata
        assert isinstance(pg, PostgresMetadataStore)
        nodes = place_segments(pg.node_loads(), record.partitions, CLUSTER.node_id)
        ranges = (
            split_range(0, record.partitions - 1, len(nodes))
            if len(nodes) > 1
            else [(0, record.partitions - 1)]
        )
        record.segments = [SegmentRecord(i, 0, f, last) for i, (f, last) in enumerate(ranges)]
        pg.create_topic_placed(record, nodes)
        CLUSTER.touch(record.name)
        CLUSTER.set_segments(
            record.name,
            [
                (s.segment_id, s.first_partition, s.last_partition, n)
                for s, n in zip(record.segments, nodes, strict=True)
            ],
        )
        log.info("topic %s: segments placed on nodes %s", record.name, nodes)

    def get_or_create(self, name: str) -> Stream | None:
        """The topic, auto-created with the default partition count if allowed."""
        stream = self.streams.get(name)
        if stream is None and self.settings.auto_create_topics:
            try:
                stream = self.create_topic(name)
            except TopicError as exc:
                if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
                # several nodes: another node created it since our last sync
                self.adopt_topics([r for r in self.metadata.load_topics() if r.name == name])
                stream = self.streams.get(name)
        return stream

    async def delete_topic(self, name: str) -> None:
        """Delete durably, then forget the stream and remove its files (off the loop)."""
        stream = self._existing(name)
        await self.worker.call(self.metadata.delete_topic, name)
        if self.streams.get(name) is not stream:
            return  # a concurrent delete of the same topic finished first
        await self._forget(stream, "deleted")

    async def forget_topic(self, name: str, why: str) -> None:
        """Several nodes: another node deleted the topic; close it and remove its files."""
        stream = self.streams.get(name)
        if stream is not None:
            await self._forget(stream, why)

    async def _forget(self, stream: Stream, why: str) -> None:
        name = stream.name
        del self.streams[name]
        self._by_id.pop(stream.topic_id, None)
        self.meters.pop(name, None)
        log.info("topic %s %s", name, why)
        try:
            CLUSTER.forget(name)
            stream.close()
            self.tier.forget_topic(stream)
        except Exception:  # forgotten all the same: its files still go
            log.exception("topic %s: closing it failed", name)
        for listener in self.on_topic_deleted:
            listener(name)
        await trio.to_thread.run_sync(shutil.rmtree, stream.directory, True)

    def update_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> dict[str, str]:
        """Replace the topic's whole set of configs (durably, unless `validate_only`).

        Returns the normalised configs; raises TopicError (UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_CONFIG, ...) and then changes nothing.
        """
        stream = self._existing(name)
        try:
            checked = validate_topic_configs(configs, stream.partition_count)
        except ConfigError as exc:
            raise TopicError(exc.error_code, str(exc)) from None
        if not validate_only:
            self.metadata.update_topic_configs(name, checked)
            stream.record.configs = checked
            log.info("topic %s configs: %s", name, checked)
        return checked

    def grow_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        """Raise the topic's partition count to `count`; the tail segment owns the new ones.

        The topic record and the segment are updated in one metadata transaction, then the
        stream in memory. TopicError (UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS) if the
        topic is unknown or `count` is not larger than today's count (or too large).
        """
        stream = self._existing(name)
        if count <= stream.partition_count:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {stream.partition_count} partitions; "
                f"the new count must be larger, got {count}",
            )
        if count > MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, f"partitions must be 1..{MAX_PARTITIONS_PER_TOPIC}"
            )
        if validate_only:
            return
        self.metadata.grow_partitions(name, count, stream.tail_segment_id)
        stream.grow_partitions(count)
        log.info("topic %s grown to %d partitions", name, count)

    def _existing(self, name: str) -> Stream:
        stream = self.streams.get(name)
        if stream is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        return stream

    async def delete_records(self, name: str, index: int, offset: int) -> tuple[int, int]:
        """DeleteRecords: raise a partition's log start offset to `offset` (-1: the high
        watermark), durably. Returns (error code, low watermark)."""
        stream = self.streams.get(name)
        if stream is None or not stream.has_partition(index):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
        partition = stream.partition(index)
        if offset == -1:
            offset = partition.high_watermark
        if offset < 0 or offset > partition.high_watermark:
            return ErrorCode.OFFSET_OUT_OF_RANGE, -1
        if offset > partition.log_start_offset:
            await self.tier.advance_log_starts(stream, {index: offset})
            log.info("topic %s partition %d: records before %d deleted", name, index, offset)
        return ErrorCode.NONE, partition.log_start_offset

    async def allocate_producer_id(self) -> int:
        return await self.worker.call(self.metadata.next_counter, "producer_id")

    def appends_sent_together(self) -> AbstractContextManager[None]:
        return appends_sent_together()

    def finish_reads_now(self, pending: Sequence[PendingRead]) -> list[ReadResult] | None:
        planned = [p for p in pending if isinstance(p, reads.LocalRead)]
        assert len(planned) == len(pending), "reads planned by another store"
        return reads.finish_now(planned)  # the tail of the logs: no thread hop, no await

    async def finish_reads(self, pending: Sequence[PendingRead]) -> list[ReadResult]:
        planned = [p for p in pending if isinstance(p, reads.LocalRead)]
        assert len(planned) == len(pending), "reads planned by another store"
        return await reads.finish(planned)  # one thread hop for a whole Fetch


async def _run_cancellable(
    scope: trio.CancelScope, done: trio.Event, fn: Callable[[], Awaitable[None]]
) -> None:
    try:
        with scope:
            await fn()
    finally:
        done.set()


async def _run_flusher(segment: SegmentLog) -> None:
    try:
        await segment.run_flusher()
    finally:
        if not segment.sealed:  # a sealed log keeps its file open for reads
            segment.release()
