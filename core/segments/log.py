"""Tier-1 append log of one segment, with group-committed fsync.

File layout: a sequence of entries, each
    u32 batch length | u32 crc32c(partition + batch) | i32 partition | batch bytes
The batch is the producer's RecordBatch with its baseOffset already patched in. Appends are
queued in memory and written by one flusher task: it `writev`s everything queued, fsyncs once,
and only then reports the entries durable, so any number of concurrent producers share one
flush. On open the file is replayed and cut after the last complete, CRC-valid entry.

A scale event *seals* a log: it takes no more appends, its flusher drains what is queued and
returns, and the file stays open for reads. A successor log (`after=`) does not flush until
its predecessors have drained, so a partition's batches become durable (and visible) in
offset order across the seal.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import crc32c
import trio

log = logging.getLogger(__name__)

ENTRY_HEADER = struct.Struct(">IIi")
# Guard against a corrupt length field sending replay off to allocate gigabytes.
MAX_ENTRY_BYTES = 1 << 30
# writev takes at most IOV_MAX buffers per call.
_IOV_MAX = 512


class LogWriteError(Exception):
    """The entries could not be made durable (disk full, I/O error); nothing was acknowledged."""


@dataclass(slots=True)
class PendingAppend:
    partition: int
    position: int  # file position of the batch bytes (after the entry header)
    end: int  # file position after the entry
    token: object  # opaque, handed back to the durability callback


@dataclass(slots=True)
class ReplayedEntry:
    partition: int
    position: int
    batch: bytes


class SegmentLog:
    """One segment's append-only file. Single writer (the flusher task)."""

    def __init__(
        self,
        path: str,
        on_durable: Callable[[list[PendingAppend]], None],
        on_failed: Callable[[list[PendingAppend], Exception], None],
        after: list[SegmentLog] | None = None,
    ) -> None:
        self.path = path
        self._after = after or []
        self._on_durable = on_durable
        self._on_failed = on_failed
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.durable_size = os.fstat(self._fd).st_size
        self.logical_size = self.durable_size  # includes queued, not yet written entries
        self._queued_buffers: list[bytes | memoryview] = []
        self._queued: list[PendingAppend] = []
        self._work = trio.Event()
        self._flushed = trio.Event()
        self.closed = False  # no more appends (sealed or shut down)
        self.sealed = False  # closed by a scale event: the file stays open for reads
        self.drained = trio.Event()  # set when the flusher has returned
        self.drain_failed = False
        self._flusher_running = False

    # --- recovery ----------------------------------------------------------------------

    def replay(self) -> Iterator[ReplayedEntry]:
        """Yield every valid entry; truncate the file after the last one (a torn write)."""
        pos = 0
        size = self.durable_size
        while pos + ENTRY_HEADER.size <= size:
            header = os.pread(self._fd, ENTRY_HEADER.size, pos)
            length, crc, partition = ENTRY_HEADER.unpack(header)
            if length > MAX_ENTRY_BYTES or pos + ENTRY_HEADER.size + length > size:
                break
            batch = os.pread(self._fd, length, pos + ENTRY_HEADER.size)
            if crc32c.crc32c(batch, crc32c.crc32c(header[8:12])) != crc:
                break
            yield ReplayedEntry(partition, pos + ENTRY_HEADER.size, batch)
            pos += ENTRY_HEADER.size + length
        if pos < size:
            log.warning("%s: cutting %d bytes of torn or corrupt tail", self.path, size - pos)
            os.ftruncate(self._fd, pos)
            os.fsync(self._fd)
        self.durable_size = self.logical_size = pos

    # --- appends -----------------------------------------------------------------------

    def append(self, partition: int, batch: bytes | bytearray, token: object) -> PendingAppend:
        """Queue an entry; the durability callback fires once it is fsync'd."""
        if self.closed:
            raise LogWriteError("segment log is closed")
        prefix = struct.pack(">i", partition)
        header = ENTRY_HEADER.pack(
            len(batch), crc32c.crc32c(batch, crc32c.crc32c(prefix)), partition
        )
        position = self.logical_size + ENTRY_HEADER.size
        self.logical_size = position + len(batch)
        pending = PendingAppend(partition, position, self.logical_size, token)
        self._queued_buffers += (header, batch)
        self._queued.append(pending)
        self._work.set()
        return pending

    def _write_and_sync(self, buffers: list[bytes | memoryview], start: int) -> None:
        """Runs in a worker thread: write at `start`, then fsync."""
        position = start
        for i in range(0, len(buffers), _IOV_MAX):
            chunk = buffers[i : i + _IOV_MAX]
            expected = sum(len(b) for b in chunk)
            written = os.pwritev(self._fd, chunk, position)
            while written < expected:  # short write: finish the remainder
                rest = b"".join(bytes(b) for b in chunk)[written:]
                n = os.pwrite(self._fd, rest, position + written)
                if n == 0:
                    raise OSError(errno.EIO, "short write")
                written += n
            position += expected
        os.fsync(self._fd)

    async def run_flusher(self) -> None:
        """Write and fsync queued entries until closed, draining the queue before returning.

        Run in the store's nursery. Waits first for the predecessor logs to drain; if one of
        them failed, whatever is queued here fails too (its partitions were rolled back).
        """
        self._flusher_running = True
        try:
            for predecessor in self._after:
                await predecessor.drained.wait()
                if predecessor.drain_failed and self._queued:
                    self._fail_from(
                        self.durable_size, [], OSError(errno.EIO, "predecessor segment failed")
                    )
            self._after = []
            await self._flush_until_closed()
        finally:
            self._flusher_running = False
            self.drained.set()

    async def _flush_until_closed(self) -> None:
        while True:
            if not self._queued:
                if self.closed:
                    return
                await self._work.wait()
                self._work = trio.Event()
                continue
            buffers, batch = self._queued_buffers, self._queued
            self._queued_buffers, self._queued = [], []
            start = self.durable_size
            try:
                await trio.to_thread.run_sync(self._write_and_sync, buffers, start)
            except OSError as exc:
                self.drain_failed = self.drain_failed or self.closed
                self._fail_from(start, batch, exc)
            else:
                self.durable_size = batch[-1].end
                self._on_durable(batch)
            flushed, self._flushed = self._flushed, trio.Event()
            flushed.set()

    def _fail_from(self, start: int, batch: list[PendingAppend], exc: OSError) -> None:
        """Undo a failed write: cut the file back and fail this batch and everything queued."""
        log.error("%s: write failed at %d: %s", self.path, start, exc)
        failed = batch + self._queued
        self._queued_buffers, self._queued = [], []
        try:
            os.ftruncate(self._fd, start)
        except OSError as trunc_exc:  # the cut is redone by replay on the next start
            log.error("%s: could not truncate after failed write: %s", self.path, trunc_exc)
        self.logical_size = self.durable_size = start
        self._on_failed(failed, LogWriteError(str(exc)))

    async def wait_idle(self) -> None:
        """Wait until everything queued so far has been flushed (or failed)."""
        while self._queued or self.logical_size != self.durable_size:
            await self._flushed.wait()

    # --- reads -------------------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def seal(self) -> None:
        """Refuse further appends; the flusher drains the queue and returns; reads go on."""
        self.closed = self.sealed = True
        self._work.set()

    def close(self) -> None:
        """Refuse appends and stop the flusher (after it drains). A sealed log whose flusher
        has already returned (or never ran) releases its file at once."""
        self.closed = True
        self.sealed = False
        self._work.set()
        if not self._flusher_running:
            self.release()

    def release(self) -> None:
        """Close the file descriptor (after the flusher has returned)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
