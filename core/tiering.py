"""Tier 2: moving rolled tier-1 files into object storage, reading them back, retention.

- **Upload**: every rolled log file becomes one chunk (core/segments/chunks.py). A segment's
  files go up one at a time, oldest first; a successor segment waits until its predecessors
  are completely uploaded, so each partition's offsets reach tier 2 in order. The chunk is
  recorded in the metadata store only after the object store confirmed the PUT; a failed
  PUT is retried with exponential backoff for as long as it takes.
- **Trim**: confirmed files stay in tier 1 as a read cache up to `local_retain_bytes`, then
  the oldest are deleted. Files not yet confirmed count against the tier-1 budget
  (`Tier1Usage`): above it producers get a retriable error instead of filling the disk.
- **Read**: a partition's slice of a chunk is fetched with one ranged GET into a bounded
  LRU cache; concurrent readers of the same slice share one GET.
- **Retention**: `retention.ms` / `retention.bytes` raise partitions' log start offsets
  slice by slice; DeleteRecords raises them by hand. A chunk is deleted once every slice in
  it is below its partition's log start (metadata first, then the object).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from .api import StoreUnavailable
from .cluster.view import CLUSTER
from .configs.topic_defs import split_list
from .metadata import ChunkRecord, ChunkSlice, MetadataStore, OpenTxnSnapshot
from .metadata_worker import MetadataWorker
from .scaling.crash import crash_point
from .segments.chunks import build_chunk, chunk_key
from .segments.log import LogFile, SegmentLog, Tier1Usage
from .segments.objectstore import Body, ObjectNotFound, ObjectStore, ObjectStoreUnavailable
from .segments.tier2_health import FailureReporter, reason_for
from .stream import Stream

log = logging.getLogger(__name__)

_BACKOFF_FIRST_S = 0.2
_BACKOFF_MAX_S = 10.0
# Every tier-1 file holds a descriptor: trim uploaded ones beyond this count too, whatever
# their bytes (age-rolled files of idle segments are small).
MAX_RETAINED_FILES = 256
_MAX_PREFETCHES = 8  # slices read ahead at once, over all catch-up readers


@dataclass(slots=True)
class TierSettings:
    chunk_bytes: int = 8 << 20  # roll a tier-1 file (cut a chunk) at this size...
    chunk_age_s: float = 5.0  # ...or when its first entry is this old
    tier1_budget_bytes: int = 1 << 30  # not-yet-uploaded bytes before produce is refused
    local_retain_bytes: int = 256 << 20  # uploaded files kept in tier 1 for fast reads
    cache_bytes: int = 64 << 20  # tier-2 slices cached in memory
    retention_check_interval_s: float = 30.0
    upload_concurrency: int = 4  # segments uploading at the same time


@dataclass(slots=True)
class TierStats:
    chunks_uploaded: int = 0
    bytes_uploaded: int = 0
    upload_errors: int = 0
    chunks_deleted: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    bytes_fetched: int = 0
    read_errors: int = 0


class SliceCache:
    """Bounded LRU of slice bytes by (object key, byte start, byte length)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self._entries: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()

    def get(self, key: tuple[str, int, int]) -> bytes | None:
        data = self._entries.get(key)
        if data is not None:
            self._entries.move_to_end(key)
        return data

    def put(self, key: tuple[str, int, int], data: bytes) -> None:
        if len(data) > self.capacity or key in self._entries:
            return
        self._entries[key] = data
        self.size += len(data)
        while self.size > self.capacity:
            _key, evicted = self._entries.popitem(last=False)
            self.size -= len(evicted)

    def drop_object(self, object_key: str) -> None:
        for key in [k for k in self._entries if k[0] == object_key]:
            self.size -= len(self._entries.pop(key))


class _Loading:
    """A GET in flight that other readers of the same slice wait for."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.data: bytes | None = None
        self.error: Exception | None = None


class TierManager:
    """Tier 2 for every attached stream (`attach` on open, `forget_topic` on delete)."""

    def __init__(
        self,
        object_store: ObjectStore,
        metadata: MetadataStore,
        worker: MetadataWorker,
        settings: TierSettings,
    ) -> None:
        self.object_store = object_store
        self.settings = settings
        self._metadata = metadata
        self._worker = worker
        self._streams: dict[str, Stream] = {}
        self.usage = Tier1Usage(settings.tier1_budget_bytes)
        self.stats = TierStats()
        # several nodes on object-storage WAL: ".n<node>i<incarnation>" in chunk keys
        self.key_writer = ""
        self.cache = SliceCache(settings.cache_bytes)
        self._loading: dict[tuple[str, int, int], _Loading] = {}
        self._wake = trio.Event()
        self._in_flight: set[tuple[str, int]] = set()
        # Uploaded files still in tier 1, in upload order: the trim queue.
        self._retained: deque[tuple[Stream, SegmentLog, LogFile]] = deque()
        self.retained_bytes = 0
        self.upload_lags: deque[float] = deque(maxlen=10_000)  # seconds, roll to confirm
        self.outage_since: float | None = None
        # tier-2 failures in a few lines: one per kind, then a summary now and then
        self.reporter = FailureReporter.for_store(object_store)
        self._nursery: trio.Nursery | None = None
        self._prefetching = 0
        self._unlink_limiter = trio.CapacityLimiter(1)  # trimmed files, one thread at a time

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Upload, trim and enforce retention until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._upload_loop)
            nursery.start_soon(self._retention_loop)
            task_status.started()

    @property
    def roll_bytes(self) -> int:
        return self.settings.chunk_bytes

    @property
    def roll_age_s(self) -> float:
        return self.settings.chunk_age_s

    def attach(self, stream: Stream) -> None:
        """Take on a freshly opened stream; register its uploaded files for trimming."""
        self._streams[stream.name] = stream
        for segment in stream.segments.values():
            for f in segment.files:
                if f.uploaded:
                    self._retained.append((stream, segment, f))
                    self.retained_bytes += f.size
        _unlink_all(self._trim_local())  # on start, before the topic serves: no one waits
        self._wake.set()

    def on_rolled(self, _segment: SegmentLog) -> None:
        self._wake.set()

    # --- upload ------------------------------------------------------------------------

    async def _upload_loop(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                self._wake = trio.Event()
                for stream in list(self._streams.values()):
                    for segment_id, segment in list(stream.segments.items()):
                        if len(self._in_flight) >= self.settings.upload_concurrency:
                            break
                        key = (stream.record.topic_id.hex, segment_id)
                        if key in self._in_flight or not segment.files_to_upload():
                            continue
                        if not _predecessors_uploaded(stream, segment_id):
                            continue
                        self._in_flight.add(key)
                        nursery.start_soon(self._upload_segment, stream, segment, key)
                await self._wake.wait()

    async def _upload_segment(
        self, stream: Stream, segment: SegmentLog, key: tuple[str, int]
    ) -> None:
        delay = _BACKOFF_FIRST_S
        try:
            while not stream.deleted:
                pending = segment.files_to_upload()
                if not pending:
                    return
                try:
                    await self._upload_file(stream, segment, pending[0])
                    delay = _BACKOFF_FIRST_S
                except Exception as exc:  # a bug or a local read error: keep the store serving
                    # (tier 2's own failures are retried in _put_with_backoff): said as
                    # "upload failed", with a traceback once per exception type
                    self.reporter.failed("upload", exc, unexpected=True)
                    self.stats.upload_errors += 1
                    await trio.sleep(delay)
                    delay = min(delay * 2, _BACKOFF_MAX_S)
        finally:
            self._in_flight.discard(key)
            self._wake.set()

    async def _upload_file(self, stream: Stream, segment: SegmentLog, f: LogFile) -> None:
        data = await trio.to_thread.run_sync(segment.read_file, f)
        built = await trio.to_thread.run_sync(build_chunk, data, f.base)
        key = chunk_key(stream.record.topic_id.hex, segment.segment_id, f.base, self.key_writer)
        await self._put_with_backoff(stream, key, built.parts)
        if stream.deleted:
            return
        chunk = ChunkRecord(segment.segment_id, f.base, f.end, key, built.size, built.slices)
        producers = stream.producer_snapshots({s.partition for s in built.slices})
        try:
            await self._worker.call(self._metadata.commit_chunk, stream.name, chunk, producers)
        except KeyError:  # the topic went away while the chunk was in flight
            return
        crash_point("chunk-after-commit")
        if stream.deleted:
            return
        trimmable = await self._save_open_txns(stream, {s.partition for s in built.slices})
        stream.add_chunk(chunk)
        segment.mark_uploaded(f)
        self.stats.chunks_uploaded += 1
        self.stats.bytes_uploaded += built.size
        if f.opened_at >= 0:  # unknown for files replayed after a restart
            self.upload_lags.append(trio.current_time() - f.opened_at)
        if not trimmable:
            return  # kept in tier 1 so a restart's replay still finds its open transactions
        f.partitions = frozenset(s.partition for s in built.slices)
        self._retained.append((stream, segment, f))
        self.retained_bytes += f.size
        trimmed = self._trim_local()
        if trimmed:
            await trio.to_thread.run_sync(_unlink_all, trimmed, limiter=self._unlink_limiter)

    async def _put_with_backoff(self, stream: Stream, key: str, data: Body) -> None:
        delay = _BACKOFF_FIRST_S
        while not stream.deleted:
            try:
                await self.object_store.put(key, data)
            except Exception as exc:
                if reason_for(exc) is None:
                    raise  # not a tier-2 failure it knows: `_upload_segment` reports it
                self.stats.upload_errors += 1
                if self.outage_since is None:
                    self.outage_since = time.monotonic()
                self.reporter.failed("upload", exc)
                await trio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)
                continue
            self.outage_since = None
            self.reporter.succeeded("upload")
            return

    async def _save_open_txns(self, stream: Stream, partitions: set[int]) -> bool:
        """Make the open transactions of the chunk's partitions durable before the file may
        be trimmed: once a transaction's first batches are only in tier 2, replaying tier 1
        on restart no longer shows it open. Saved here, once per chunk, rather than on
        every transaction's first Produce, so the produce path pays nothing. False if the
        save failed (then the file must stay in tier 1)."""
        snapshots = []
        for index in sorted(partitions):
            partition = stream.partition(index)
            state = partition.open_txn_snapshot()
            if state is not None:
                snapshots.append(OpenTxnSnapshot(index, partition.next_offset, state))
        if not snapshots:
            return True
        try:
            await self._worker.call(self._metadata.save_open_txns, stream.name, snapshots)
        except Exception as exc:  # noqa: BLE001 - any failure: keep the file, keep serving
            log.warning("topic %s: saving open transactions failed: %s", stream.name, exc)
            return False
        return True

    # --- trim --------------------------------------------------------------------------

    def _trim_local(self) -> list[str]:
        """Trim uploaded files beyond the local retention; returns their paths, which the
        caller unlinks (they are already out of every index and closed)."""
        paths: list[str] = []
        while self._retained and (
            self.retained_bytes > self.settings.local_retain_bytes
            or len(self._retained) > MAX_RETAINED_FILES
        ):
            stream, segment, f = self._retained.popleft()
            self.retained_bytes -= f.size
            if stream.deleted or f not in segment.files:
                continue
            # Trim in log order: older uploaded files of the segment go first.
            trimmed = []
            while segment.files and segment.files[0] is not f and segment.files[0].uploaded:
                trimmed.append(segment.trim_oldest(unlink=False))
            if segment.files and segment.files[0] is f:
                trimmed.append(segment.trim_oldest(unlink=False))
            touched: set[int] | None = set()
            for gone in trimmed:
                assert gone is not None
                paths.append(gone.path)
                if touched is not None:
                    touched = None if gone.partitions is None else touched | gone.partitions
            stream.forget_trimmed(touched)
        return paths

    # --- read --------------------------------------------------------------------------

    async def read_slice(self, stream: Stream, location: ChunkSlice) -> bytes:
        """A partition's bytes in a chunk: the cache, or one ranged GET shared by all
        concurrent readers. StoreUnavailable while tier 2 is down (or the chunk is gone)."""
        try:
            return await self._read_slice(stream, location)
        except StoreUnavailable:
            raise
        except (ObjectNotFound, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def _read_slice(self, stream: Stream, location: ChunkSlice) -> bytes:
        chunk = stream.chunks.get(location.chunk_id)
        if chunk is None:
            raise ObjectNotFound(f"chunk {location.chunk_id} was deleted")
        key = (chunk.object_key, location.byte_start, location.byte_length)
        cached = self.cache.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached
        loading = self._loading.get(key)
        if loading is not None:
            await loading.done.wait()
            if loading.data is None:
                assert loading.error is not None
                raise loading.error
            return loading.data
        loading = self._loading[key] = _Loading()
        self.stats.cache_misses += 1
        try:
            data = await self.object_store.get_range(
                chunk.object_key, location.byte_start, location.byte_length
            )
            if len(data) != location.byte_length:
                raise ObjectStoreUnavailable(
                    f"short read of {chunk.object_key}: {len(data)} of {location.byte_length}"
                )
        except Exception as exc:
            self.stats.read_errors += 1
            loading.error = exc
            if isinstance(exc, ObjectNotFound | ValueError):  # gone or wrong: not tier 2's
                raise
            reason = self.reporter.failed("read", exc, "fetches get a retriable error")
            if isinstance(exc, StoreUnavailable) or reason_for(exc) is None:
                raise
            # e.g. no credentials: readers get the retriable error, not a traceback
            unavailable = StoreUnavailable(f"tier 2 {self.object_store.description}: {reason}")
            loading.error = unavailable
            raise unavailable from exc
        else:
            self.reporter.succeeded("read")
            loading.data = data
            self.stats.bytes_fetched += len(data)
            self.cache.put(key, data)
            return data
        finally:
            del self._loading[key]
            loading.done.set()

    def prefetch(self, stream: Stream, location: ChunkSlice) -> None:
        """Start reading a slice in the background (catch-up read-ahead); errors are left
        for the reader that needs it to meet."""
        chunk = stream.chunks.get(location.chunk_id)
        if chunk is None or self._prefetching >= _MAX_PREFETCHES:
            return
        key = (chunk.object_key, location.byte_start, location.byte_length)
        if key in self._loading or self.cache.get(key) is not None:
            return
        self._prefetching += 1
        self._spawn(self._prefetch, stream, location)

    async def _prefetch(self, stream: Stream, location: ChunkSlice) -> None:
        try:
            await self.read_slice(stream, location)
        except StoreUnavailable:
            pass
        finally:
            self._prefetching -= 1

    # --- retention ---------------------------------------------------------------------

    async def _retention_loop(self) -> None:
        while True:
            await trio.sleep(self.settings.retention_check_interval_s)
            for stream in list(self._streams.values()):
                try:
                    await self.apply_retention(stream)
                except Exception:  # one stream's problem must not stop the others
                    log.exception("topic %s: retention check failed", stream.name)

    async def apply_retention(self, stream: Stream, now_ms: int | None = None) -> None:
        """Raise log start offsets past tier-2 slices that retention.ms / retention.bytes
        expire. Data still only in tier 1 is never expired (like Kafka's active segment)."""
        if "delete" not in split_list(stream.record.configs.get("cleanup.policy", "delete")):
            return  # `compact` alone: only compaction removes data, like Kafka
        retention_ms = _config_int(stream.record.configs, "retention.ms")
        retention_bytes = _config_int(stream.record.configs, "retention.bytes")
        if retention_ms < 0 and retention_bytes < 0:
            return
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        new_starts: dict[int, int] = {}
        for index, partition in stream.iter_partitions():
            # several nodes: each partition's leader applies it (it has loaded the
            # partition's whole chunk history; other nodes' views of it may be stale)
            if not CLUSTER.is_local(stream.name, index):
                continue
            start = partition.log_start_offset
            slices = [s for s in partition.slices() if s.last_offset >= start]
            if retention_ms >= 0:
                for s in slices:
                    if s.max_timestamp >= now_ms - retention_ms:
                        break
                    start = max(start, s.last_offset + 1)
            if retention_bytes >= 0 and slices:
                size = sum(s.byte_length for s in slices) + partition.local_bytes_after(
                    slices[-1].last_offset
                )
                for s in slices:
                    if s.last_offset < start:
                        size -= s.byte_length
                    elif size - s.byte_length >= retention_bytes:
                        size -= s.byte_length
                        start = s.last_offset + 1
                    else:
                        break
            if start > partition.log_start_offset:
                new_starts[index] = start
        if new_starts:
            log.info("topic %s: retention raises log start offsets %s", stream.name, new_starts)
            await self.advance_log_starts(stream, new_starts)

    async def advance_log_starts(self, stream: Stream, starts: dict[int, int]) -> None:
        """Raise log start offsets durably, then delete the chunks that became unreachable
        (their metadata in the same transaction, their objects in the background).

        Memory moves first, so no read below the new start begins while the commit runs;
        if the commit fails, what this call raised (and nothing raised since) is undone."""
        previous: dict[int, tuple[int, int]] = {}
        for index, offset in starts.items():
            partition = stream.partition(index)
            raised = max(partition.log_start_offset, offset)
            previous[index] = (partition.log_start_offset, raised)
            partition.log_start_offset = raised
        expired = stream.expired_chunks()
        try:
            expired_ids = [c.chunk_id for c in expired]
            await self._worker.call(
                self._metadata.delete_chunks, stream.name, expired_ids, dict(starts)
            )
        except BaseException:
            for index, (before, raised) in previous.items():
                partition = stream.partition(index)
                if partition.log_start_offset == raised:
                    partition.log_start_offset = before
            raise
        stream.forget_chunks(expired)
        for chunk in expired:
            self.cache.drop_object(chunk.object_key)
        if expired:
            self.stats.chunks_deleted += len(expired)
            self._spawn(self._delete_objects, [c.object_key for c in expired])

    def forget_topic(self, stream: Stream) -> None:
        """Detach a deleted topic; delete its objects in the background."""
        if self._streams.get(stream.name) is stream:
            del self._streams[stream.name]
        self._spawn(self._delete_prefix, stream.record.topic_id.hex + "/")

    def _spawn(self, fn: Callable[..., Awaitable[None]], *args: object) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn, *args)

    async def _delete_objects(self, keys: list[str]) -> None:
        """Retried until it works; a restart meanwhile leaves the objects as orphans
        (garbage, never a hole: their metadata is already gone)."""
        delay = _BACKOFF_FIRST_S
        while True:
            try:
                await self.object_store.delete_many(keys)
            except Exception as exc:  # retried whatever it is: a background task must not die
                self.reporter.failed("delete", exc)
                await trio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)
                continue
            self.reporter.succeeded("delete")
            return

    async def _delete_prefix(self, prefix: str) -> None:
        try:
            keys = await self.object_store.list_keys(prefix)
        except Exception as exc:
            self.reporter.failed("list", exc, f"the objects under {prefix} stay behind")
            return
        self.reporter.succeeded("list")
        if keys:
            await self._delete_objects(keys)

    # --- figures -----------------------------------------------------------------------

    def upload_lag_quantiles(self) -> tuple[float, float]:
        """(p50, p99) seconds from a file's first entry to its chunk being confirmed."""
        lags = sorted(self.upload_lags)
        if not lags:
            return math.nan, math.nan
        return lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))]


def _predecessors_uploaded(stream: Stream, segment_id: int) -> bool:
    """True when every sealed segment this one (partly) replaced is completely uploaded."""
    records = {r.segment_id: r for r in stream.record.segments}
    me = records.get(segment_id)
    if me is None:
        return False
    for other in records.values():
        if other.segment_id >= segment_id or not other.sealed:
            continue
        if other.last_partition < me.first_partition or other.first_partition > me.last_partition:
            continue
        segment = stream.segments.get(other.segment_id)
        if segment is not None and not segment.complete:
            return False
    return True


def _config_int(configs: dict[str, str], name: str) -> int:
    try:
        return int(configs.get(name, "-1"))
    except ValueError:
        return -1


def _unlink_all(paths: list[str]) -> None:
    """Remove trimmed tier-1 files (closed and out of every index already)."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:  # left behind: the next start sees an uploaded file, trims it
            log.warning("could not remove trimmed file %s: %s", path, exc)
