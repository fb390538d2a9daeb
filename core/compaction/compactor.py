"""The background compactor: rewrites tier-2 chunks of compacted topics.

One run over a stream (every `interval_s`, one stream at a time):
1. plan each partition (`plan.py`); skip the stream when none is due;
2. build, per due partition, key -> latest offset over its dirty slices (ranged GETs,
   parsing in a worker thread);
3. for every chunk holding a due slice, in (segment, position) order — which is offset
   order for each partition, splits and merges included — read the object, filter the due
   slices (other partitions' slices are copied), PUT a NEW object, then swap the chunk in
   SQLite (one transaction through the metadata worker, with the partitions' compacted
   ends) and in memory (no checkpoint in between), and delete the old object after a grace
   period for reads already holding it;
4. move the due partitions' compacted ends to the end of their cleanable range.

A SIGKILL anywhere leaves the old chunk or the new one referenced, never neither: objects
PUT but not committed, and old objects whose swap committed, are garbage collected at start.
Reads below a partition's compacted end go to tier 2, never to tier-1 copies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from ..metadata import ChunkRecord, MetadataStore
from ..metadata_worker import MetadataWorker
from ..scaling.crash import crash_point
from ..segments.chunks import iter_batches, pack_chunk
from ..segments.objectstore import ObjectStore
from ..stream import Stream
from .plan import CompactionConfig, PartitionPlan, oldest_dirty_ms, plan_partition
from .records import ScannedRecord, filter_batch, iter_keys

log = logging.getLogger(__name__)

OLD_OBJECT_GRACE_S = 30.0  # reads that looked up the old chunk just before the swap


@dataclass(slots=True)
class CompactionSettings:
    interval_s: float = 15.0  # Kafka's log.cleaner.backoff.ms
    threads: int = 1  # parsing/rewriting threads (Kafka's log.cleaner.threads)


@dataclass(slots=True)
class CompactionStats:
    runs: int = 0  # stream runs that rewrote or checked something
    chunks_rewritten: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_reclaimed: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    aborted: int = 0  # swaps refused because a chunk went away meanwhile
    garbage_objects_deleted: int = 0
    last_run_lag_seconds: float = 0.0  # how long the oldest dirty data waited
    last_run_seconds: float = 0.0
    last_run_unix_ms: int = 0
    seconds_total: float = 0.0


@dataclass(slots=True)
class _Filter:
    """What one due partition keeps, given one chunk's seal time."""

    latest: dict[bytes, int]
    range_end: int
    tombstones_due: bool
    removed: int = 0
    tombstones_removed: int = 0
    tombstones_kept: int = 0

    def keep(self, r: ScannedRecord) -> bool:
        if r.offset == self.range_end:
            return True  # keeps the partition's end offset in tier 2
        if r.key is None:
            return False  # like Kafka's cleaner: a keyless record has no place here
        latest = self.latest.get(r.key)
        if latest is not None and latest > r.offset:
            return False
        if r.tombstone:
            if self.tombstones_due:
                self.tombstones_removed += 1
                return False
            self.tombstones_kept += 1
        return True


@dataclass(slots=True)
class _Rewrite:
    parts: list[tuple[int, list[bytes]]] = field(default_factory=list)
    removed: int = 0
    tombstones_removed: int = 0
    tombstones_kept: int = 0


class Compactor:
    def __init__(
        self,
        object_store: ObjectStore,
        metadata: MetadataStore,
        worker: MetadataWorker,
        settings: CompactionSettings,
        drop_cached: Any = None,
    ) -> None:
        self.object_store = object_store
        self.settings = settings
        self.stats = CompactionStats()
        self._metadata = metadata
        self._worker = worker
        self._limiter = trio.CapacityLimiter(max(1, settings.threads))
        self._streams: dict[str, Stream] = {}
        # Per topic: when the next kept tombstone passes its horizon (unknown after start).
        self._tombstones_due_ms: dict[str, int] = {}
        self._plans: dict[str, list[PartitionPlan]] = {}
        self._drop_cached = drop_cached  # the tier-2 read cache's drop_object
        self._nursery: trio.Nursery | None = None
        self.running: str | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def attach(self, stream: Stream) -> None:
        """Take on an opened stream: its partitions' compacted ends (read on the loop,
        like the rest of a stream's recovery)."""
        self._streams[stream.name] = stream
        for index, end in self._metadata.load_compacted_ends(stream.name).items():
            if stream.has_partition(index):
                stream.partition(index).compacted_end = end

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Collect garbage left by a crash, then compact every `interval_s` until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            for stream in list(self._streams.values()):
                try:
                    await self.collect_garbage(stream)
                except Exception:
                    log.exception("topic %s: compaction garbage collection failed", stream.name)
            while True:
                await self.run_once()
                await trio.sleep(self.settings.interval_s)

    async def run_once(self, now_ms: int | None = None) -> None:
        for stream in list(self._streams.values()):
            if stream.deleted:
                self._streams.pop(stream.name, None)
                continue
            try:
                await self.compact_stream(stream, now_ms)
            except Exception:  # one stream's problem must not stop the others
                log.exception("topic %s: compaction failed", stream.name)
            finally:
                self.running = None

    # --- one run -----------------------------------------------------------------------

    async def compact_stream(self, stream: Stream, now_ms: int | None = None) -> bool:
        """Compact the stream's due partitions; True if a run happened."""
        config = CompactionConfig.of(stream.record.configs)
        if not config.compact:
            self._plans.pop(stream.name, None)
            return False
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        due_at = self._tombstones_due_ms.get(stream.name, 0)
        tombstones_due = due_at <= now_ms
        plans = [
            p
            for index, partition in stream.iter_partitions()
            if (
                p := plan_partition(index, partition, stream.chunks, config, now_ms, tombstones_due)
            )
            is not None
        ]
        self._plans[stream.name] = plans
        due = [p for p in plans if p.due]
        if not due:
            if tombstones_due and stream.name not in self._tombstones_due_ms:
                self._tombstones_due_ms[stream.name] = 2**63 - 1  # nothing cleaned yet
            return False
        started = time.monotonic()
        self.running = stream.name
        oldest = oldest_dirty_ms(due, stream.chunks)
        self.stats.last_run_lag_seconds = (now_ms - oldest) / 1000 if oldest else 0.0
        log.info(
            "topic %s: compacting partitions %s",
            stream.name,
            ", ".join(f"{p.index} ({p.reason})" for p in due),
        )
        try:
            return await self._run(stream, config, due, now_ms, tombstones_due, due_at, started)
        finally:
            for plan in due:
                plan.latest = {}  # the key maps can be large: not kept past the run

    async def _run(
        self,
        stream: Stream,
        config: CompactionConfig,
        due: list[PartitionPlan],
        now_ms: int,
        tombstones_due: bool,
        due_at: int,
        started: float,
    ) -> bool:
        for plan in due:
            for s in plan.dirty:
                chunk = stream.chunks.get(s.chunk_id)
                if chunk is None:
                    return False  # retention got there first; try again next time
                data = await self.object_store.get_range(
                    chunk.object_key, s.byte_start, s.byte_length
                )
                self.stats.bytes_read += len(data)
                await trio.to_thread.run_sync(_add_keys, plan.latest, data, limiter=self._limiter)
        by_partition = {p.index: p for p in due}
        wanted = {(s.chunk_id, p.index) for p in due for s in p.slices}
        chunk_ids = {chunk_id for chunk_id, _ in wanted}
        next_due = 2**63 - 1
        for chunk_id in sorted(
            chunk_ids,
            key=lambda c: (
                (stream.chunks[c].segment_id, stream.chunks[c].start_position)
                if c in stream.chunks
                else (-1, -1)
            ),
        ):
            chunk = stream.chunks.get(chunk_id)
            if chunk is None or stream.deleted:
                continue
            horizon = chunk.created_ms + config.delete_retention_ms
            filters = {
                s.partition: _Filter(
                    by_partition[s.partition].latest,
                    by_partition[s.partition].range_end,
                    horizon <= now_ms,
                )
                for s in chunk.slices
                if (chunk_id, s.partition) in wanted
            }
            kept = await self._rewrite_chunk(stream, chunk, filters)
            if kept and horizon > now_ms:
                next_due = min(next_due, horizon)
        if stream.deleted:
            return True
        ends = {p.index: p.range_end + 1 for p in due}
        await self._worker.call(self._metadata.replace_chunks, stream.name, [], [], ends)
        for index, end in ends.items():
            partition = stream.partition(index)
            partition.compacted_end = max(partition.compacted_end, end)
        # A run that was not for tombstones skipped partitions that may hold some.
        self._tombstones_due_ms[stream.name] = next_due if tombstones_due else min(due_at, next_due)
        self.stats.runs += 1
        elapsed = time.monotonic() - started
        self.stats.last_run_seconds = elapsed
        self.stats.seconds_total += elapsed
        self.stats.last_run_unix_ms = int(time.time() * 1000)
        self._plans[stream.name] = [
            p
            for index, partition in stream.iter_partitions()
            if (p := plan_partition(index, partition, stream.chunks, config, now_ms)) is not None
        ]
        return True

    async def _rewrite_chunk(
        self, stream: Stream, chunk: ChunkRecord, filters: dict[int, _Filter]
    ) -> int:
        """Filter one chunk's due slices into a new object and swap it in; returns the
        number of tombstones kept (they need another pass once past their horizon)."""
        data = await self.object_store.get_range(chunk.object_key, 0, chunk.size)
        self.stats.bytes_read += len(data)
        result = await trio.to_thread.run_sync(
            _filter_chunk, data, chunk, filters, limiter=self._limiter
        )
        if result.removed == 0:
            return result.tombstones_kept
        new: ChunkRecord | None = None
        if result.parts:
            built = await trio.to_thread.run_sync(pack_chunk, result.parts, limiter=self._limiter)
            key = compacted_key(chunk.object_key)
            await self.object_store.put(key, built.parts)
            self.stats.bytes_written += built.size
            new = ChunkRecord(
                chunk.segment_id,
                chunk.start_position,
                chunk.end_position,
                key,
                built.size,
                built.slices,
                created_ms=chunk.created_ms,  # tombstone horizons count from the first seal
            )
            crash_point("compaction-after-put")
        ends: dict[int, int] = {}
        for s in chunk.slices:
            if s.partition in filters:
                ends[s.partition] = s.last_offset + 1
        try:
            await self._worker.call(
                self._metadata.replace_chunks,
                stream.name,
                [chunk.chunk_id],
                [new] if new is not None else [],
                ends,
            )
        except KeyError:
            self.stats.aborted += 1
            if new is not None:
                self._spawn(self._delete_later, [new.object_key], 0.0)
            return 0
        # In memory at once (no checkpoint since the commit): readers see old or new.
        stream.chunks.pop(chunk.chunk_id, None)
        for index in {s.partition for s in chunk.slices}:
            stream.partition(index).remove_chunk_slices({chunk.chunk_id})
        if new is not None:
            stream.add_chunk(new)
        for index, end in ends.items():
            partition = stream.partition(index)
            partition.compacted_end = max(partition.compacted_end, end)
        crash_point("compaction-after-commit")
        if self._drop_cached is not None:
            self._drop_cached(chunk.object_key)
        self.stats.chunks_rewritten += 1
        self.stats.records_removed += result.removed
        self.stats.tombstones_removed += result.tombstones_removed
        self.stats.bytes_reclaimed += chunk.size - (new.size if new is not None else 0)
        self._spawn(self._delete_later, [chunk.object_key], OLD_OBJECT_GRACE_S)
        return result.tombstones_kept

    # --- garbage -------------------------------------------------------------------------

    async def collect_garbage(self, stream: Stream) -> int:
        """Delete the stream's objects no chunk row references that no upload will claim:
        compaction outputs never committed, and chunks already replaced or expired (below
        their segment's confirmed upload end)."""
        prefix = stream.record.topic_id.hex + "/"
        keys = await self.object_store.list_keys(prefix)
        referenced = {c.object_key for c in stream.chunks.values()}
        uploaded_end = {s.segment_id: s.uploaded_end for s in stream.record.segments}
        garbage = []
        for key in keys:
            if key in referenced:
                continue
            parts = key[len(prefix) :].split("/")
            if len(parts) != 2 or not parts[1].endswith(".chunk"):
                continue
            name = parts[1]
            try:
                segment_id, position = int(parts[0]), int(name.split(".")[0])
            except ValueError:
                continue
            # `.c<ns>` marks a compaction output (`name` always ends in ".chunk", which
            # contains ".c" too: a plain chunk uploaded meanwhile must not match)
            compacted = ".c" in name[: -len(".chunk")]
            if compacted or position < uploaded_end.get(segment_id, -1):
                garbage.append(key)
        if garbage:
            log.info("topic %s: deleting %d unreferenced objects", stream.name, len(garbage))
            await self.object_store.delete_many(garbage)
            self.stats.garbage_objects_deleted += len(garbage)
        return len(garbage)

    def _spawn(self, fn: Any, *args: object) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    async def _delete_later(self, keys: list[str], delay: float) -> None:
        await trio.sleep(delay)
        try:
            await self.object_store.delete_many(keys)
        except Exception as exc:  # left as garbage for the next start
            log.warning("tier 2: deleting replaced objects %s failed: %s", keys, exc)

    # --- figures -----------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Totals and, per compacted topic, each partition's progress (JSON-ready)."""
        topics: dict[str, Any] = {}
        for name, plans in self._plans.items():
            stream = self._streams.get(name)
            if stream is None or stream.deleted:
                continue
            topics[name] = {
                str(p.index): {
                    "compacted_end": stream.partition(p.index).compacted_end,
                    "cleanable_end": p.range_end + 1,
                    "cleanable_bytes": p.cleanable_bytes,
                    "dirty_bytes": p.dirty_bytes,
                    "dirty_ratio": round(p.dirty_ratio, 4),
                }
                for p in plans
            }
        return {
            **asdict(self.stats),
            "interval_s": self.settings.interval_s,
            "running": self.running,
            "topics": topics,
        }


def compacted_key(object_key: str) -> str:
    """A new, unique key next to the chunk's: `<position>.c<ns>.chunk`."""
    base = object_key.split(".")[0]
    return f"{base}.c{time.time_ns()}.chunk"


def _add_keys(latest: dict[bytes, int], data: bytes) -> None:
    for info in iter_batches(data):
        for offset, key, _tombstone in iter_keys(
            memoryview(data)[info.start : info.start + info.size]
        ):
            if key is not None:
                latest[key] = offset


def _filter_chunk(data: bytes, chunk: ChunkRecord, filters: Mapping[int, _Filter]) -> _Rewrite:
    out = _Rewrite()
    view = memoryview(data)
    for s in sorted(chunk.slices, key=lambda s: s.partition):
        raw = view[s.byte_start : s.byte_start + s.byte_length]
        batches = [bytes(raw[i.start : i.start + i.size]) for i in iter_batches(raw)]
        f = filters.get(s.partition)
        if f is not None:
            kept: list[bytes] = []
            for batch in batches:
                filtered, removed = filter_batch(batch, f.keep)
                f.removed += removed
                if filtered is not None:
                    kept.append(filtered)
            batches = kept
            out.removed += f.removed
            out.tombstones_removed += f.tombstones_removed
            out.tombstones_kept += f.tombstones_kept
        if batches:
            out.parts.append((s.partition, batches))
    return out
