"""Committed offsets: a write-through cache over the metadata store.

Every change is made durable (one SQLite transaction, synchronous=FULL) before it is
visible in memory, so an acknowledged OffsetCommit survives a crash. Reads never touch
the disk: everything is loaded once when the coordinator starts (with several nodes, an
OffsetFetch first reads its group's rows from the shared database: `load_fresh`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

import trio

from core.metadata import CommittedOffset

log = logging.getLogger(__name__)

Partition = tuple[str, int]  # (topic, partition index)
Offload = Callable[..., Awaitable[None]]  # offload(fn, *args): run fn(*args) off the loop


class OffsetPersistence(Protocol):
    """The slice of `core.metadata.MetadataStore` the offset cache needs."""

    def load_offsets(self) -> list[CommittedOffset]: ...
    def commit_offsets(self, offsets: list[CommittedOffset]) -> None: ...
    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None
    ) -> None: ...


async def run_inline(fn: Callable[..., None], *args: object) -> None:
    """Run a persistence call on the event loop (fine for a store that does no I/O)."""
    fn(*args)


class _CommitBatch:
    """Offset commits written in one transaction; `done` is set once it committed or failed."""

    def __init__(self) -> None:
        self.offsets: list[CommittedOffset] = []
        self.writer_chosen = False
        self.done = trio.Event()
        self.error: Exception | None = None


class OffsetStore:
    def __init__(self, persistence: OffsetPersistence, offload: Offload = run_inline) -> None:
        """`offload` runs a blocking persistence call off the event loop (the store's
        metadata worker); memory is updated right after it returns."""
        self._persistence = persistence
        self._offload = offload
        self._groups: dict[str, dict[Partition, CommittedOffset]] = {}
        self._open_batch: _CommitBatch | None = None
        self._write_lock = trio.Lock()
        # Several active nodes: reads one group's rows from the shared database, so an
        # OffsetFetch sees every commit made on any node (set by cli.app)
        self.group_loader: Callable[[str], Awaitable[list[CommittedOffset]]] | None = None
        for offset in persistence.load_offsets():
            self._groups.setdefault(offset.group_id, {})[(offset.topic, offset.partition)] = offset

    def refresh_group(self, group_id: str, offsets: list[CommittedOffset], replace: bool) -> None:
        """Several nodes: bring the cache of a group up to the database's rows, so they are
        current when coordination moves here. `replace` (another node coordinates the
        group): the rows replace the cache; else a row wins only if it is no older than
        the cached one (a commit made here meanwhile is never undone)."""
        merged = {} if replace else dict(self._groups.get(group_id, {}))
        for offset in offsets:
            key = (offset.topic, offset.partition)
            current = merged.get(key)
            if current is None or offset.commit_ms >= current.commit_ms:
                merged[key] = offset
        if merged:
            self._groups[group_id] = merged
        else:
            self._groups.pop(group_id, None)

    async def load_fresh(self, group_id: str) -> None:
        """Several nodes: bring the group's cache up to the database before it is read, so
        a commit made on another node just before the group's coordinator moved here is
        not missed. Merged as `refresh_group` does (a newer commit here wins); a database
        that cannot be read leaves the cache as it is (it is at most one refresh old)."""
        if self.group_loader is None:
            return
        try:
            rows = await self.group_loader(group_id)
        except Exception as exc:
            log.warning("offsets of group %r not reloaded, serving the cache: %s", group_id, exc)
            return
        self.refresh_group(group_id, rows, replace=False)

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._groups.get(group_id))

    async def commit(self, offsets: list[CommittedOffset]) -> None:
        """Store the offsets durably (all of them or, on error, none), then cache them.

        Group commit: commits arriving while a transaction is being written join the next
        one, whose first caller writes it for all (one fsync for many OffsetCommits).
        """
        if not offsets:
            return
        batch = self._open_batch
        if batch is None:
            batch = self._open_batch = _CommitBatch()
        batch.offsets.extend(offsets)
        if batch.writer_chosen:
            await batch.done.wait()
            if batch.error is not None:
                raise batch.error
            return
        batch.writer_chosen = True
        # Shielded: the others in the batch wait for this write, whatever happens to the
        # request that started it.
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                if self._open_batch is batch:
                    self._open_batch = None  # later commits start the next batch
                try:
                    await self._offload(self._persistence.commit_offsets, batch.offsets)
                except Exception as exc:
                    batch.error = exc
                    raise
                else:
                    for offset in batch.offsets:
                        group = self._groups.setdefault(offset.group_id, {})
                        group[(offset.topic, offset.partition)] = offset
                finally:
                    batch.done.set()

    def get(self, group_id: str, partition: Partition) -> CommittedOffset | None:
        return self._groups.get(group_id, {}).get(partition)

    def all_of(self, group_id: str) -> list[CommittedOffset]:
        """Every committed offset of the group, ordered by topic and partition."""
        offsets = self._groups.get(group_id, {})
        return [offsets[key] for key in sorted(offsets)]

    async def delete_group(self, group_id: str) -> None:
        if group_id in self._groups:
            await self._offload(self._persistence.delete_offsets, group_id)
            self._groups.pop(group_id, None)

    async def delete(self, group_id: str, partitions: Iterable[Partition]) -> None:
        offsets = self._groups.get(group_id, {})
        present = [p for p in partitions if p in offsets]
        if not present:
            return
        await self._offload(self._persistence.delete_offsets, group_id, present)
        offsets = self._groups.get(group_id, {})  # re-read: a commit may have run meanwhile
        for partition in present:
            offsets.pop(partition, None)
        if not offsets:
            self._groups.pop(group_id, None)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's offsets from memory (the metadata store deleted its rows
        in the same transaction as the topic)."""
        for group_id in list(self._groups):
            offsets = self._groups[group_id]
            for key in [k for k in offsets if k[0] == topic]:
                del offsets[key]
            if not offsets:
                del self._groups[group_id]
