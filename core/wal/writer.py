"""Gathering every segment's appends into write-ahead objects (see the package docstring).

Contract: `submit` takes a group of entries a segment log has just written and synced
locally; the group's `wal_committed` callback runs (on the loop, in submission order)
once an object holding it is in the object store and recorded in the metadata store.
Until then nothing in it is acknowledged. A group is never reported failed: a store that
refuses writes is retried until it answers (producers meanwhile see their request time
out, a retriable error), and a node fenced by the metadata store stops acknowledging for
good (`FENCE`).

Pacing: an object starts once `flush_ms` has passed since the previous one started or
`flush_bytes` are waiting. An idle node therefore writes at once (latency: one PUT and one
commit), a busy one at most 1000/flush_ms objects a second whatever its partition count
(cost: docs/tiers.md). The default pace depends on the store: S3 bills each PUT, a
folder does not. Up to `MAX_IN_FLIGHT` objects are being PUT at once, so a slow PUT does
not cap a node's produce rate; they are recorded in the order they started (a later
object never commits before an earlier one: no hole, and acknowledgements stay in order).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from ..cluster.fencing import FENCE
from ..failure_log import FailureLog
from ..metadata import MetadataStore, WalFenced, WalRange
from ..scaling.crash import crash_point
from ..segments.objectstore import LocalFolderStore, ObjectStore
from .layout import encode_header

if TYPE_CHECKING:
    import uuid

    from ..segments.log import PendingAppend, SegmentLog, WalSink

log = logging.getLogger(__name__)

# Pacing under load (docs/tiers.md has the arithmetic): S3 bills every PUT, so at most 10
# objects a second per node; a folder bills nothing, so only latency counts there.
DEFAULT_FLUSH_MS_S3 = 100.0
DEFAULT_FLUSH_MS_FOLDER = 5.0
DEFAULT_FLUSH_BYTES = 4 << 20
_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 2.0
_FOLD_EVERY_S = 2.0
_REPORT_EVERY_S = 30.0
MAX_IN_FLIGHT = 4
KEY_PREFIX = "wal"


@dataclass(frozen=True, slots=True)
class WalSettings:
    flush_ms: float | None = None  # None: by the store (DEFAULT_FLUSH_MS_*)
    flush_bytes: int = DEFAULT_FLUSH_BYTES


@dataclass(slots=True)
class _Group:
    topic: str
    topic_id: uuid.UUID
    log: SegmentLog
    start: int  # log position of the group's first entry header
    end: int
    buffers: Sequence[bytes | bytearray | memoryview]
    batch: list[PendingAppend]


@dataclass(slots=True)
class WalStats:
    objects: int = 0
    bytes: int = 0
    put_seconds: float = 0.0
    commit_seconds: float = 0.0
    folded: int = 0
    failures: dict[str, int] = field(default_factory=dict)


class _BoundSink:
    __slots__ = ("_writer", "_topic", "_topic_id")

    def __init__(self, writer: WalWriter, topic: str, topic_id: uuid.UUID) -> None:
        self._writer, self._topic, self._topic_id = writer, topic, topic_id

    def submit(
        self,
        log: SegmentLog,
        buffers: Sequence[bytes | bytearray | memoryview],
        batch: list[PendingAppend],
    ) -> None:
        self._writer.submit(self._topic, self._topic_id, log, buffers, batch)


class WalWriter:
    def __init__(
        self,
        object_store: ObjectStore,
        metadata: MetadataStore,
        call: Callable[..., Awaitable[object]],
        node_id: int,
        settings: WalSettings,
    ) -> None:
        """`call` runs a metadata method off the event loop (the store's MetadataWorker)."""
        self.object_store = object_store
        self.metadata = metadata
        self._call = call
        self.node_id = node_id
        self.incarnation = 0  # several nodes: set once the node holds its lease
        self.settings = settings
        self.flush_s = (
            settings.flush_ms
            if settings.flush_ms is not None
            else DEFAULT_FLUSH_MS_FOLDER
            if isinstance(object_store, LocalFolderStore)
            else DEFAULT_FLUSH_MS_S3
        ) / 1000
        self.stats = WalStats()
        self._pending: list[_Group] = []
        self._pending_bytes = 0
        self._work = trio.Event()
        self._full = trio.Event()
        self._last_start = -1e9
        self._sequence = 0
        self._failures = FailureLog("write-ahead objects: ", log, _REPORT_EVERY_S)
        self.stats.failures = self._failures.counts

    def bind(self, topic: str, topic_id: uuid.UUID) -> WalSink:
        return _BoundSink(self, topic, topic_id)

    def submit(
        self,
        topic: str,
        topic_id: uuid.UUID,
        log: SegmentLog,
        buffers: Sequence[bytes | bytearray | memoryview],
        batch: list[PendingAppend],
    ) -> None:
        from ..segments.log import ENTRY_HEADER

        start = batch[0].position - ENTRY_HEADER.size
        end = batch[-1].end
        self._pending.append(_Group(topic, topic_id, log, start, end, buffers, batch))
        self._pending_bytes += end - start
        self._work.set()
        if self._pending_bytes >= self.settings.flush_bytes:
            self._full.set()

    async def run(self) -> None:
        """Write objects as groups arrive, and fold away the ones tier 2 caught up with."""
        slots = trio.Semaphore(MAX_IN_FLIGHT)
        recorded = trio.Event()  # the previous object's commit is over
        recorded.set()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._sweep_orphans)
            nursery.start_soon(self._fold_loop)
            while True:
                await self._work.wait()
                self._work = trio.Event()
                if not self._pending:
                    continue
                due = self._last_start + self.flush_s
                if trio.current_time() < due and self._pending_bytes < self.settings.flush_bytes:
                    with trio.move_on_at(due):
                        await self._full.wait()
                groups, self._pending, self._pending_bytes = self._pending, [], 0
                self._full = trio.Event()
                self._last_start = trio.current_time()
                await slots.acquire()
                done = trio.Event()
                nursery.start_soon(self._write, groups, recorded, done, slots)
                recorded = done

    def _key(self) -> str:
        self._sequence += 1
        return f"{self._prefix}{time.time_ns():020d}-{os.getpid()}-{self._sequence:09d}"

    async def _write(
        self,
        groups: list[_Group],
        previous: trio.Event,
        done: trio.Event,
        slots: trio.Semaphore,
    ) -> None:
        """PUT the object (beside the others in flight), then record it once the previous
        one is recorded, then acknowledge its groups."""
        try:
            await self._put_and_record(groups, previous)
        finally:
            done.set()
            slots.release()

    async def _put_and_record(self, groups: list[_Group], previous: trio.Event) -> None:
        ranges: list[WalRange] = []
        pieces: list[bytes | bytearray | memoryview] = []
        offset = 0
        for g in groups:
            last = ranges[-1] if ranges else None
            if (
                last is not None
                and (last.topic, last.topic_id, last.segment_id)
                == (g.topic, g.topic_id, g.log.segment_id)
                and last.end_position == g.start
            ):
                ranges[-1] = last._replace(end_position=g.end)
            else:
                ranges.append(
                    WalRange(g.topic, g.topic_id, g.log.segment_id, g.start, g.end, offset)
                )
            pieces.extend(g.buffers)
            offset += g.end - g.start
        header = encode_header(ranges)
        key = self._key()
        size = len(header) + offset
        started = time.perf_counter()
        body = [header, *(memoryview(p) if isinstance(p, bytearray) else p for p in pieces)]
        await self._retry("write", lambda: self.object_store.put(key, body))
        put_done = time.perf_counter()
        crash_point("wal-after-put")
        await previous.wait()
        if FENCE.lost:  # an earlier object was refused: this one is never acknowledged
            return
        recording = time.perf_counter()
        stored = [r._replace(object_offset=r.object_offset + len(header)) for r in ranges]
        try:
            await self._retry(
                "record",
                lambda: self._call(
                    self.metadata.commit_wal_object,
                    key,
                    self.node_id,
                    size,
                    stored,
                    self.incarnation,
                ),
            )
        except WalFenced as exc:
            FENCE.lose()
            log.error("write-ahead object refused, this node acknowledges nothing more: %s", exc)
            return
        crash_point("wal-after-record")
        self.stats.objects += 1
        self.stats.bytes += size
        self.stats.put_seconds += put_done - started
        self.stats.commit_seconds += time.perf_counter() - recording
        for g in groups:
            try:
                g.log.wal_committed(g.batch)
            except Exception:
                log.exception("segment %d: durability callback failed", g.log.segment_id)

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[object]]) -> None:
        delay = _BACKOFF_FIRST_S
        failing = False
        while True:
            try:
                await attempt()
            except WalFenced:
                raise
            except Exception as exc:  # the store or the database: retried until it works
                failing = True
                self._report(what, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)
                continue
            if failing:
                self._failures.succeeded(what)
            return

    def _report(self, what: str, exc: BaseException) -> None:
        self._failures.failed(what, exc, "retrying (nothing is acknowledged meanwhile)")

    @property
    def _prefix(self) -> str:
        return f"{KEY_PREFIX}/node-{self.node_id}/"

    async def _sweep_orphans(self) -> None:
        """Objects an earlier process of this node wrote but never recorded (killed between
        the write and the commit, or fenced) were never acknowledged: delete them. Runs
        once at start, before this process has written an object of its own."""
        try:
            keys = await self.object_store.list_keys(self._prefix)
            recorded = await self._call(self.metadata.wal_object_keys, self.node_id)
            assert isinstance(recorded, list)
            mine = f"-{os.getpid()}-"
            orphans = [k for k in keys if k not in set(recorded) and mine not in k]
            if orphans:
                await self.object_store.delete_many(orphans)
                log.info("write-ahead objects: deleted %d never recorded", len(orphans))
        except Exception as exc:  # garbage only: the next start tries again
            self._report("sweep", exc)

    async def _fold_loop(self) -> None:
        """Delete the objects whose every range is in tier-2 chunks: metadata rows first
        (a crash after leaves unreferenced objects, garbage, never a hole)."""
        while True:
            await trio.sleep(_FOLD_EVERY_S)
            try:
                keys = await self._call(self.metadata.folded_wal_objects)
                if keys:
                    assert isinstance(keys, list)
                    await self._call(self.metadata.forget_wal_objects, keys)
                    crash_point("fold-after-forget")
                    await self.object_store.delete_many(keys)
                    self.stats.folded += len(keys)
            except Exception as exc:  # retried at the next round
                self._report("fold", exc)
