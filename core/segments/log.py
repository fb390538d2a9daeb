"""Tier-1 append log of one segment: rolling files, group-committed fsync.

A segment's log is a byte sequence addressed by *log positions* that only grow. It is kept
in files `segment-<id>.<base position>.log`; each file holds entries
    u32 batch length | u32 crc32c(partition + batch) | i32 partition | batch bytes
The batch is the producer's RecordBatch with its baseOffset already patched in. Appends are
queued in memory and written by one flusher task: it writes everything queued and syncs it
once (one `pwritev` with `RWF_DSYNC`, else `pwritev` then fsync), and only then reports the
entries durable, so any number of concurrent producers share
one flush. On open every file is replayed and cut after its last complete, CRC-valid entry.

The flusher *rolls* the file it writes to when it reaches `roll_bytes`, when its first entry
is `roll_age_s` old, or when the segment is sealed. A rolled file is complete and durable:
it becomes one tier-2 chunk, and once the chunk is confirmed the file may be trimmed (deleted
from the head of the log). Positions below `local_start` are then only in tier 2.

A scale event *seals* a log: it takes no more appends, its flusher drains what is queued,
rolls the last file and returns; the files stay open for reads. A successor log (`after=`)
does not flush until its predecessors have drained, so a partition's batches become durable
(and visible) in offset order across the seal.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import math
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import crc32c
import trio

from core.gathered_io import IOV_MAX, advance, views_of, write_all
from core.segments import durable_writer
from core.segments.commit_times import COMMIT_TIMES
from core.segments.flush_threads import FLUSH_THREADS
from core.segments.readahead import AHEAD

log = logging.getLogger(__name__)

ENTRY_HEADER = struct.Struct(">IIi")
# Guard against a corrupt length field sending replay off to allocate gigabytes.
MAX_ENTRY_BYTES = 1 << 30
# pwritev with RWF_DSYNC (Linux 4.7+) writes and syncs in one call, with fdatasync's
# guarantee for the bytes written, the file's new size included. The flush thread then takes
# the GIL back once per group instead of twice, and it waits for it while the loop is busy.
_dsync_writes = hasattr(os, "RWF_DSYNC")
DEFAULT_ROLL_BYTES = 8 << 20
DEFAULT_ROLL_AGE_S = 5.0
# The flusher thread goes on with entries queued during an fsync for at most this many
# more groups / seconds before handing back to the loop (which decides rolls).
_PIPELINE_GROUPS = 16
_PIPELINE_S = 0.05
# Native writes into the open file at once: the next group goes out while the previous
# one syncs (the file system commits them together) instead of queueing behind it.
_NATIVE_IN_FLIGHT = 2
# A small native write that grows its file carries this many zero bytes after it. The
# writes that land in those zeros change no file size or block map, so their RWF_DSYNC
# waits for the data alone, not for a journal commit too (measured on ext4: 1-2 KB writes
# 0.16-0.19 -> 0.08-0.12 ms). Only small groups: a large one's sync is mostly its data,
# and the padded write costs 0.5 ms where it falls (once per ~100 small groups).
_ZERO_PAD = bytes(256 << 10)
_PAD_GROUPS_UP_TO = 16 << 10


# Recently fsync'd batches stay in memory (all logs together up to this many bytes, oldest
# dropped first), so a consumer at the tail is served without a worker-thread hop.
RECENT_BUDGET_BYTES = 64 << 20


class WalSink(Protocol):
    """Where a log hands its synced groups with the write-ahead log in object storage
    (core/wal): it calls the log's `wal_committed` with each, in order, once recorded."""

    def submit(
        self,
        log: SegmentLog,
        buffers: Sequence[bytes | bytearray | memoryview],
        batch: list[PendingAppend],
    ) -> None: ...


def _write_durably(
    fd: int, buffers: Sequence[bytes | bytearray | memoryview], position: int
) -> None:
    """Write `buffers` at `position` and make them durable before returning."""
    global _dsync_writes
    written = 0
    if _dsync_writes and len(buffers) <= IOV_MAX:
        try:
            written = os.pwritev(fd, buffers, position, os.RWF_DSYNC)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            _dsync_writes = False  # not on this kernel or file system: write, then fsync
            log.info("RWF_DSYNC writes unsupported (%s): tier 1 writes, then fsyncs", exc)
        else:
            if written == sum(len(b) for b in buffers):
                return
    # What is left (everything without RWF_DSYNC, the rest of a short write), then an fsync.
    views = views_of(buffers)
    at = position + written

    def pwrite(pieces: list[memoryview]) -> int:
        nonlocal at
        n = os.pwritev(fd, pieces, at)
        if n == 0:
            raise OSError(errno.EIO, "short write")
        at += n
        return n

    write_all(pwrite, views[advance(views, 0, written) :])
    os.fsync(fd)


class _RecentBatches:
    """The process's most recently durable batches, by (log, position), oldest first out."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self.order: deque[tuple[SegmentLog, int, int]] = deque()

    def add(self, owner: SegmentLog, position: int, batch: bytes | bytearray | memoryview) -> None:
        owner._recent[position] = batch
        self.order.append((owner, position, len(batch)))
        self.size += len(batch)
        while self.size > self.budget and self.order:
            old, old_position, length = self.order.popleft()
            old._recent.pop(old_position, None)
            self.size -= length


_recent = _RecentBatches(RECENT_BUDGET_BYTES)


def set_read_memory(recent_bytes: int, read_ahead_bytes: int) -> None:
    """The process's memory for recently durable batches and for read-ahead of tier-1
    files (core/segments/readahead.py); 0 turns either off. Set before serving."""
    _recent.budget = max(0, recent_bytes)
    AHEAD.configure(read_ahead_bytes)


class _GroupFailed(Exception):
    """A group's write or fsync failed in the flusher thread (the groups before it are
    durable and already reported)."""

    def __init__(self, start: int, batch: list[PendingAppend], error: OSError) -> None:
        super().__init__(str(error))
        self.start = start
        self.batch = batch
        self.error = error


class LogWriteError(Exception):
    """The entries could not be made durable (disk full, I/O error); nothing was acknowledged."""


class LogTrimmed(Exception):
    """The position was trimmed from tier 1 after its chunk was confirmed in tier 2."""


class Tier1Usage:
    """Bytes appended to tier-1 logs and not yet confirmed in tier 2, over the whole store.

    Producers are refused (retriably) while `pending` is above `budget`: the local disk
    budget that lets produce go on through an object-store outage, but not without limit.
    """

    def __init__(self, budget: int = 1 << 62) -> None:
        self.budget = budget
        self.pending = 0

    @property
    def full(self) -> bool:
        return self.pending >= self.budget


@dataclass(slots=True)
class LogFile:
    base: int  # log position of the file's first byte
    path: str
    fd: int
    size: int  # durable bytes in the file
    # Bytes from the file's start already on disk, entries or zero padding (see _ZERO_PAD):
    # a write ending at or below this grows nothing. Replay cuts the zeros after the end.
    zeroed: int = 0
    opened_at: float = -1.0  # trio clock when the file got its first entry; -1: unknown
    closed: bool = False  # rolled: complete, durable, ready to become a chunk
    uploaded: bool = False  # its chunk is confirmed in tier 2: the file may be trimmed
    # The partitions with entries in it, known once its chunk is built (None: not known);
    # a trim then revisits only their indexes, not every partition of the stream.
    partitions: frozenset[int] | None = None

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(slots=True)
class PendingAppend:
    partition: int
    position: int  # log position of the batch bytes (after the entry header)
    end: int  # log position after the entry
    token: object  # opaque, handed back to the durability callback


@dataclass(slots=True)
class _InFlight:
    """A group handed to a native thread, not yet seen done."""

    write: Any  # durable_writer's Write
    buffers: list[bytes | bytearray | memoryview]
    batch: list[PendingAppend]
    start: int
    file: LogFile
    padded: bool = False  # zeros follow its entries: nothing may be written after it yet


@dataclass(slots=True)
class ReplayedEntry:
    partition: int
    position: int
    batch: bytes


# The logs appended to inside `appends_sent_together`, sent as it ends (None outside it).
_sent_at_end: list[SegmentLog] | None = None


@contextlib.contextmanager
def appends_sent_together() -> Iterator[None]:
    """Appends made inside (synchronous code: one request's) go to the native writer as it
    ends, one write per log, without waking the flusher task: a task switch and the wait
    for the loop to reach that task saved per group commit."""
    global _sent_at_end
    if _sent_at_end is not None:  # nested: the outermost sends
        yield
        return
    logs: list[SegmentLog] = []
    _sent_at_end = logs
    try:
        yield
    finally:
        _sent_at_end = None
        for log in logs:
            log._send_now()


def log_file_name(segment_id: int, base: int) -> str:
    return f"segment-{segment_id}.{base:020d}.log"


def parse_log_file_name(name: str) -> tuple[int, int] | None:
    """(segment id, base position) of `segment-<id>.<base>.log`; None for other names."""
    if not (name.startswith("segment-") and name.endswith(".log")):
        return None
    parts = name[len("segment-") : -len(".log")].split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def iter_entries(data: bytes | memoryview, base: int = 0) -> Iterator[ReplayedEntry]:
    """The valid entries of a log file's bytes, stopping at the first torn or corrupt one."""
    view = memoryview(data)
    pos = 0
    size = len(view)
    while pos + ENTRY_HEADER.size <= size:
        length, crc, partition = ENTRY_HEADER.unpack_from(view, pos)
        start = pos + ENTRY_HEADER.size
        if length > MAX_ENTRY_BYTES or start + length > size:
            return
        batch = view[start : start + length]
        if crc32c.crc32c(batch, crc32c.crc32c(view[pos + 8 : start])) != crc:
            return
        yield ReplayedEntry(partition, base + start, bytes(batch))
        pos = start + length


# A group commit done in a worker thread: the (header, batch) buffers written, their appends,
# the file they went to and whether that file was created for them.
_Group = tuple[list[bytes | bytearray | memoryview], list[PendingAppend], LogFile, bool]


class SegmentLog:
    """One segment's append-only log. Single writer (the flusher task)."""

    def __init__(
        self,
        directory: str,
        segment_id: int,
        on_durable: Callable[[list[PendingAppend]], None],
        on_failed: Callable[[list[PendingAppend], Exception], None],
        after: list[SegmentLog] | None = None,
        *,
        roll_bytes: int = DEFAULT_ROLL_BYTES,
        roll_age_s: float = DEFAULT_ROLL_AGE_S,
        uploaded_end: int = 0,
        usage: Tier1Usage | None = None,
        on_rolled: Callable[[SegmentLog], None] | None = None,
        existing_bases: Sequence[int] = (),
        wal: WalSink | None = None,
    ) -> None:
        """`existing_bases`: base positions of this segment's files already on disk (the
        caller lists the stream's folder once for all its segments). `wal`: with the
        write-ahead log in object storage (core/wal), synced groups go there and count as
        durable only once it reports them (`wal_committed`)."""
        self._wal = wal
        self.directory = directory
        self.segment_id = segment_id
        self.roll_bytes = roll_bytes
        self.roll_age_s = roll_age_s
        self.uploaded_end = uploaded_end  # positions below are confirmed in tier 2
        self.usage = usage or Tier1Usage()
        self._on_rolled = on_rolled
        self._after = after or []
        self._on_durable = on_durable
        self._on_failed = on_failed
        self.files: list[LogFile] = []
        self._bases: list[int] = []
        for base in sorted(existing_bases):
            path = self._path(base)
            fd = os.open(path, os.O_RDWR)
            self.files.append(LogFile(base, path, fd, os.fstat(fd).st_size))
            self._bases.append(base)
        end = self.files[-1].end if self.files else 0
        # With every file trimmed, positions go on from the uploaded end: chunk keys are
        # named by position and must never be reused.
        self.durable_size = max(end, uploaded_end)
        self.logical_size = self.durable_size  # includes queued, not yet written entries
        # entries below are acknowledgeable: synced, and with the object WAL recorded there.
        # Only files below it become chunks, so a chunk's producer states cover all of it.
        self.committed_end = self.durable_size
        self._queued_buffers: list[bytes | bytearray | memoryview] = []
        self._queued: list[PendingAppend] = []
        # The flusher's worker thread takes what was queued meanwhile right after an fsync
        # (see _write_groups): the queue is swapped under this lock.
        self._queue_lock = threading.Lock()
        self._work = trio.Event()
        self._flushed = trio.Event()
        self._roll_requested = False
        self.closed = False  # no more appends (sealed or shut down)
        self.sealed = False  # closed by a scale event: the files stay open for reads
        self.drained = trio.Event()  # set when the flusher has returned
        self.drain_failed = False
        self._flusher_running = False
        # Native writes (durable_writer): the eventfd their threads bump, the writes in
        # flight (oldest first), and whether the flusher waits on that eventfd now.
        self._wake: durable_writer.WakeFd | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._flusher_on_wake = False
        self._thread_writing = False  # a flush thread writes (and takes from the queue)
        self._send_at_end = False  # listed to send when `appends_sent_together` ends
        # Zero padding (see _ZERO_PAD) until a write fails: near a full disk the zeros
        # could be what no longer fits.
        self._padding = True
        # position -> batch bytes of recently durable entries (see _RecentBatches)
        self._recent: dict[int, bytes | bytearray | memoryview] = {}

    def _path(self, base: int) -> str:
        return os.path.join(self.directory, log_file_name(self.segment_id, base))

    # --- recovery ----------------------------------------------------------------------

    def replay(self) -> Iterator[ReplayedEntry]:
        """Yield every valid entry; cut each file after its last one (a torn write).

        Afterwards every file is closed (complete): new appends start a new file, and the
        old ones are uploaded if they are not yet in tier 2.
        """
        for f in list(self.files):
            data = os.pread(f.fd, f.size, 0) if f.size else b""
            valid = 0
            for entry in iter_entries(data, f.base):
                valid = entry.position - f.base + len(entry.batch)
                yield entry
            cut = f.size - valid
            if cut:
                if data.count(0, valid) == cut:  # the zero padding of a write
                    log.debug("%s: cutting %d bytes of zeros", f.path, cut)
                else:
                    log.warning("%s: cutting %d bytes of torn or corrupt tail", f.path, cut)
                os.ftruncate(f.fd, valid)
                os.fsync(f.fd)
                f.size = valid
        for f in list(self.files):
            if f.size == 0:  # nothing durable was ever in it
                self._remove_file(f)
                continue
            f.closed = True
            f.uploaded = f.end <= self.uploaded_end
            if not f.uploaded:
                self.usage.pending += f.size
        end = self.files[-1].end if self.files else 0
        self.durable_size = self.logical_size = max(end, self.uploaded_end)
        self.committed_end = self.durable_size

    def _remove_file(self, f: LogFile, unlink: bool = True) -> None:
        AHEAD.forget(self, f.base, f.end)
        os.close(f.fd)
        if unlink:
            os.remove(f.path)
        i = self.files.index(f)
        del self.files[i]
        del self._bases[i]

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
        self.usage.pending += ENTRY_HEADER.size + len(batch)
        pending = PendingAppend(partition, position, self.logical_size, token)
        with self._queue_lock:
            self._queued_buffers += (header, batch)
            self._queued.append(pending)
        if _sent_at_end is not None and self._may_send_now():
            if not self._send_at_end:  # (sent by `appends_sent_together` as it ends)
                self._send_at_end = True
                _sent_at_end.append(self)
        else:
            self._wake_flusher()
        return pending

    @property
    def _active(self) -> LogFile | None:
        """The file appends are written to; None before the first write after a roll."""
        if self.files and not self.files[-1].closed:
            return self.files[-1]
        return None

    def _write_and_sync(
        self, buffers: list[bytes | bytearray | memoryview], start: int, target: LogFile | None
    ) -> LogFile:
        """Runs in a worker thread: write at log position `start` (into a new file when
        `target` is None), then fsync. Returns the file written."""
        started = time.perf_counter()
        created = target is None
        if target is None:
            path = self._path(start)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            target = LogFile(start, path, fd, 0)
        try:
            _write_durably(target.fd, buffers, start - target.base)
            if created:  # the new file's name must be durable before its entries count
                dir_fd = os.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            COMMIT_TIMES.observe(time.perf_counter() - started)
        except BaseException:
            if created:
                os.close(target.fd)
                with contextlib.suppress(OSError):
                    os.remove(target.path)
            raise
        return target

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
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_roll_age)
                await self._flush_until_closed()
                nursery.cancel_scope.cancel()
        finally:
            self._flusher_running = False
            if self._in_flight:  # cancelled while idle, after a request sent a write
                with trio.CancelScope(shield=True):
                    while not all(w.write.done for w in self._in_flight):
                        await self._wait_for_wake()
                self._in_flight.clear()
            if self._wake is not None:
                self._wake.close()
                self._wake = None
            self.drained.set()

    async def _watch_roll_age(self) -> None:
        """Wake the flusher when the active file is `roll_age_s` old.

        A task of its own, sleeping once per file, so that the flusher's wait for work has
        no deadline: a deadline there cost a cancel scope (and a move in trio's deadline
        heap) per group commit."""
        while True:
            active = self._active
            if active is not None and active.size:
                due = active.opened_at + self.roll_age_s
                if trio.current_time() < due:
                    await trio.sleep_until(due)
                    continue
                self._wake_flusher()  # due: rolled at the flusher's next pass
            # Nothing to watch (or just signalled): a file opened during this sleep is due
            # after it ends, so the check above still finds it in time.
            await trio.sleep(self.roll_age_s)

    def _roll_due(self) -> bool:
        active = self._active
        if active is None or active.size == 0:
            return False
        return (
            self._roll_requested
            or active.size >= self.roll_bytes
            or trio.current_time() >= active.opened_at + self.roll_age_s
        )

    def _roll(self) -> None:
        """Close the active file: it is complete and durable, ready to become a chunk."""
        self._roll_requested = False
        active = self._active
        if active is None or active.size == 0:
            return
        active.closed = True
        if self._on_rolled is not None:
            self._on_rolled(self)

    def request_roll(self) -> None:
        """Roll the active file at the flusher's next chance (e.g. before a shutdown)."""
        self._roll_requested = True
        self._wake_flusher()

    async def _flush_until_closed(self) -> None:
        in_flight = self._in_flight
        while True:
            if in_flight:
                await self._next_native_step(in_flight)
                continue
            if self._roll_due():
                self._roll()
            active = self._active
            native = durable_writer.NATIVE
            if not self._queued:
                if self.closed:
                    if self.sealed:  # a sealed log is complete: its last file is a chunk
                        self._roll()
                    return
                if native is not None and active is not None and self._wake is not None:
                    # Appends into the open file go out as their request ends (`_send_now`):
                    # wait where that write's thread wakes this task, the roll and close
                    # signals too. (The eventfd is made by the log's first native write: a
                    # log never written since the start holds none.)
                    self._flusher_on_wake = True
                    try:
                        await self._wait_for_wake()
                    finally:
                        self._flusher_on_wake = False
                else:
                    await self._work.wait()  # (a roll by age: `_watch_roll_age` sets it)
                    self._work = trio.Event()
                continue
            if active is not None and native is not None:
                # Into the open file: native threads, no GIL hand-offs. (A new file's
                # creation and its directory's fsync stay with the flush threads.)
                await trio.lowlevel.checkpoint_if_cancelled()
                self._submit_native(native, active, in_flight)
                continue
            with self._queue_lock:
                buffers, batch = self._queued_buffers, self._queued
                self._queued_buffers, self._queued = [], []
            start = self.durable_size
            # The thread goes on with what is queued after each group it reports (a new
            # file among them): nothing may be sent natively meanwhile (`_may_send_now`).
            self._thread_writing = True
            try:
                last = await FLUSH_THREADS.run_sync(
                    self._write_groups,
                    buffers,
                    batch,
                    start,
                    active,
                    on_progress=self._earlier_group_durable,
                )
            except _GroupFailed as failed:
                self._group_failed(failed.start, failed.batch, failed.error)
            else:
                self._group_durable(*last)
                del last
            finally:
                self._thread_writing = False
            # Drop the flushed group before waiting for the next: held here, an idle segment
            # would keep its last group's batches and appends alive until its next write
            # (~95,000 of each over 100 topics written once each, ~150 MiB).
            del buffers, batch

    def _wake_flusher(self) -> None:
        """Signal the flusher (new work, a roll, a close) wherever it waits."""
        if self._flusher_on_wake:
            self._flusher_on_wake = False
            assert self._wake is not None
            os.eventfd_write(self._wake.fd, 1)
        else:
            self._work.set()

    def _room_in_open_file(self) -> bool:
        """Room for another native write in flight, into the open file, no roll due."""
        in_flight = self._in_flight
        active = self._active
        return (
            len(in_flight) < _NATIVE_IN_FLIGHT
            and active is not None
            and (not in_flight or (in_flight[0].file is active and not in_flight[-1].padded))
            and not self._roll_due()
        )

    def _may_send_now(self) -> bool:
        """Whether what is queued may go to a native thread from here, without the flusher
        (which must be running, with no flush thread writing for it)."""
        return (
            durable_writer.NATIVE is not None
            and self._wake is not None
            and self._flusher_running
            and not self._thread_writing
            and not self.closed
            and self._room_in_open_file()
        )

    def _send_now(self) -> None:
        """At the end of a request's appends: send them, or leave them to the flusher."""
        self._send_at_end = False
        native = durable_writer.NATIVE
        if self._queued and native is not None and self._may_send_now():
            assert self._active is not None
            self._submit_native(native, self._active, self._in_flight)
            if not self._flusher_on_wake:  # else the write's end wakes it: no signal
                self._work.set()
            return
        self._wake_flusher()

    def _submit_native(
        self, native: ModuleType, active: LogFile, in_flight: deque[_InFlight]
    ) -> None:
        """Hand what is queued to a native thread, behind the writes in flight."""
        with self._queue_lock:
            buffers, batch = self._queued_buffers, self._queued
            self._queued_buffers, self._queued = [], []
        start = in_flight[-1].batch[-1].end if in_flight else self.durable_size
        if self._wake is None:
            self._wake = durable_writer.WakeFd()
        offset = start - active.base
        end = batch[-1].end - active.base
        pieces = buffers
        padded = self._padding and end > active.zeroed and end - offset <= _PAD_GROUPS_UP_TO
        if padded:  # (the writes in flight end below `offset`: none overlaps the zeros)
            pieces = [*buffers, _ZERO_PAD]
            active.zeroed = end + len(_ZERO_PAD)
        write = native.submit(active.fd, pieces, offset, self._wake.fd)
        in_flight.append(_InFlight(write, buffers, batch, start, active, padded))

    async def _next_native_step(self, in_flight: deque[_InFlight]) -> None:
        """Finish the oldest write if it is done, else send what was queued meanwhile (at
        most `_NATIVE_IN_FLIGHT` writes at once, none across a roll or once cancelled),
        else wait for a write or an append. The threads hold the buffers: every wait here
        is shielded, and a cancellation takes effect once the writes are all done."""
        head = in_flight[0]
        if head.write.done:
            in_flight.popleft()
            try:
                seconds = head.write.result()
            except OSError as exc:
                with trio.CancelScope(shield=True):  # (they may end in any order)
                    while not all(later.write.done for later in in_flight):
                        await self._wait_for_wake()
                failed = head.batch + [pending for w in in_flight for pending in w.batch]
                for later in in_flight:
                    with contextlib.suppress(OSError):
                        later.write.result()
                in_flight.clear()
                self._group_failed(head.start, failed, exc)
                return
            COMMIT_TIMES.observe(seconds)
            self._group_durable(head.buffers, head.batch, head.file, False)
            return
        native = durable_writer.NATIVE
        room = len(in_flight) < _NATIVE_IN_FLIGHT
        if (
            self._queued
            and native is not None
            and self._room_in_open_file()
            and trio.current_effective_deadline() != -math.inf  # (-inf: cancelled)
        ):
            self._submit_native(native, head.file, in_flight)
            return
        self._flusher_on_wake = room  # with room, a signal (an append) may send another
        try:
            with trio.CancelScope(shield=True):
                await self._wait_for_wake()
        finally:
            self._flusher_on_wake = False

    async def _wait_for_wake(self) -> None:
        assert self._wake is not None
        await trio.lowlevel.wait_readable(self._wake.fd)
        # A bump for a write already seen done only costs a pass.
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._wake.fd)

    def _group_failed(self, start: int, batch: list[PendingAppend], exc: OSError) -> None:
        """On the loop: a group's write failed; fail it and everything queued after it."""
        self.drain_failed = self.drain_failed or self.closed
        self._fail_from(start, batch, exc)
        flushed, self._flushed = self._flushed, trio.Event()
        flushed.set()

    def _write_groups(
        self,
        report: Callable[[_Group], None],
        buffers: list[bytes | bytearray | memoryview],
        batch: list[PendingAppend],
        start: int,
        target: LogFile | None,
    ) -> _Group:
        """Runs in a worker thread: write and fsync one group, then (pipelining) whatever was
        queued meanwhile, into the same file, without a round trip through the event loop.

        Each group but the last is reported durable through `report` as soon as its fsync
        returns; the last is returned. The flush threads hand reports to the loop in order,
        all before this call's result (or its _GroupFailed).
        """
        created = target is None
        deadline = time.monotonic() + _PIPELINE_S
        for extra in range(_PIPELINE_GROUPS + 1):
            try:
                written = self._write_and_sync(buffers, start, target)
            except OSError as exc:
                raise _GroupFailed(start, batch, exc) from exc
            done = (buffers, batch, written, created)
            end = batch[-1].end
            # Roll decisions (size, age, requests, seals) stay with the loop: go back when
            # one may be due, and after a few groups so the age check runs too.
            if (
                extra == _PIPELINE_GROUPS
                or self.closed
                or self._roll_requested
                or end - written.base >= self.roll_bytes
                or time.monotonic() >= deadline
            ):
                return done
            with self._queue_lock:
                if not self._queued:
                    return done
                buffers, batch = self._queued_buffers, self._queued
                self._queued_buffers, self._queued = [], []
            report(done)
            start, target, created = end, written, False
        raise AssertionError("unreachable")

    def _earlier_group_durable(self, group: _Group) -> None:
        # A progress callback must not raise (it would end the flusher with its group unsaid).
        try:
            self._group_durable(*group)
        except Exception:
            log.exception("%s: durability callback failed", self.directory)

    def _group_durable(
        self,
        buffers: list[bytes | bytearray | memoryview],
        batch: list[PendingAppend],
        written: LogFile,
        created: bool,
    ) -> None:
        """On the loop: a group is fsync'd; make it visible and wake its producers."""
        if created:
            written.opened_at = trio.current_time()
            self.files.append(written)
            self._bases.append(written.base)
        written.size = batch[-1].end - written.base
        self.durable_size = batch[-1].end
        for i, pending in enumerate(batch):  # buffers are (header, batch) pairs
            _recent.add(self, pending.position, buffers[2 * i + 1])
        try:
            if self._wal is not None:
                self._wal.submit(self, buffers, batch)
            else:
                self.committed_end = self.durable_size
                self._on_durable(batch)
        finally:
            flushed, self._flushed = self._flushed, trio.Event()
            flushed.set()

    def wal_committed(self, batch: list[PendingAppend]) -> None:
        """The write-ahead log holds `batch` (submitted in order): it is durable."""
        end = self.committed_end = batch[-1].end
        try:
            self._on_durable(batch)
        finally:
            if self._on_rolled is not None and any(
                f.closed and not f.uploaded and f.end <= end for f in self.files
            ):
                self._on_rolled(self)  # a rolled file waited for this to become a chunk

    def _fail_from(self, start: int, batch: list[PendingAppend], exc: OSError) -> None:
        """Undo a failed write: cut the file back and fail this batch and everything queued."""
        log.error("%s: write failed at %d: %s", self.directory, start, exc)
        failed = batch + self._queued
        self._queued_buffers, self._queued = [], []
        self._padding = False  # (so `zeroed` no longer matters)
        active = self._active
        if active is not None:
            try:
                os.ftruncate(active.fd, start - active.base)
            except OSError as trunc_exc:  # the cut is redone by replay on the next start
                log.error("%s: could not truncate after failed write: %s", active.path, trunc_exc)
        self.usage.pending -= self.logical_size - start
        self.logical_size = self.durable_size = start
        self._on_failed(failed, LogWriteError(str(exc)))

    async def wait_idle(self) -> None:
        """Wait until everything queued so far has been flushed (or failed)."""
        while self._queued or self.logical_size != self.durable_size:
            await self._flushed.wait()

    # --- tier 2 ------------------------------------------------------------------------

    def files_to_upload(self) -> list[LogFile]:
        """Rolled files whose chunk is not confirmed yet and whose entries are all
        committed, oldest first."""
        return [
            f for f in self.files if f.closed and not f.uploaded and f.end <= self.committed_end
        ]

    def mark_uploaded(self, f: LogFile) -> None:
        f.uploaded = True
        self.uploaded_end = max(self.uploaded_end, f.end)
        self.usage.pending -= f.size

    @property
    def unuploaded_bytes(self) -> int:
        """What this log counts against the tier-1 budget: files and queued entries that
        are not confirmed in tier 2."""
        files = sum(f.size for f in self.files if not f.uploaded)
        return files + self.logical_size - self.durable_size

    @property
    def complete(self) -> bool:
        """Sealed, drained, and every file confirmed in tier 2."""
        return (
            self.sealed
            and not self._queued
            and self._active is None
            and all(f.uploaded for f in self.files if f.closed)
        )

    @property
    def local_start(self) -> int:
        """Positions below this are no longer in tier 1 (trimmed after upload)."""
        return self.files[0].base if self.files else self.logical_size

    def trim_oldest(self, unlink: bool = True) -> LogFile | None:
        """Delete the oldest file if its chunk is confirmed in tier 2; returns it.
        `unlink=False`: the caller removes the returned file's path (off the event loop:
        unlinking a large file can block)."""
        if not self.files or not self.files[0].uploaded:
            return None
        f = self.files[0]
        self._remove_file(f, unlink)
        return f

    # --- reads -------------------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        """Bytes at a log position; LogTrimmed if that file was trimmed. Blocking: on the
        event loop use `read_many`."""
        f = self._file_at(position)
        return os.pread(f.fd, length, position - f.base)

    def _file_at(self, position: int) -> LogFile:
        i = bisect.bisect_right(self._bases, position) - 1
        if i < 0:
            raise LogTrimmed(f"segment {self.segment_id} position {position}")
        return self.files[i]

    def read_file(self, f: LogFile) -> bytes:
        """A whole file's durable bytes (runs in a worker thread while building a chunk)."""
        return os.pread(f.fd, f.size, 0)

    def seal(self) -> None:
        """Refuse further appends; the flusher drains the queue, rolls and returns."""
        self.closed = self.sealed = True
        self._wake_flusher()

    def close(self) -> None:
        """Refuse appends and stop the flusher (after it drains). A sealed log whose flusher
        has already returned (or never ran) releases its files at once."""
        self.closed = True
        self.sealed = False
        self._wake_flusher()
        if not self._flusher_running:
            self.release()

    def release(self) -> None:
        """Close the file descriptors (after the flusher has returned)."""
        self._recent.clear()
        AHEAD.forget(self)
        for f in self.files:
            if f.fd >= 0:
                os.close(f.fd)
                f.fd = -1


# Tier-1 reads run in worker threads, at most this many at once (they are page-cache hits
# mostly; the bound keeps a burst of cold reads from taking every thread).
_READ_THREADS = 8
_read_limiter: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("tier1_reads")


def read_recent(
    reads: Sequence[tuple[SegmentLog, int, int]],
) -> list[bytes | memoryview] | None:
    """The bytes at (log, position, length) each when every one is in memory (among the
    recently durable batches, or read ahead); None when any is not (then `read_many`)."""
    out: list[bytes | memoryview] = []
    for segment, position, length in reads:
        hit = segment._recent.get(position)
        if hit is not None and len(hit) == length:
            out.append(bytes(hit))
            continue
        ahead = AHEAD.get(segment, position, length)  # a sequential reader's next range
        if ahead is None:
            return None
        out.append(ahead)
    return out


async def read_many(reads: Sequence[tuple[SegmentLog, int, int]]) -> list[bytes | memoryview]:
    """The bytes at (log, position, length) each, read off the event loop in one thread
    hop. LogTrimmed (raised before any read) if a position's file was trimmed.

    Each file descriptor is duplicated first, on the loop: a trim or close meanwhile closes
    only the original, so the thread never reads a closed (or reused) descriptor.
    """
    out: list[bytes | memoryview | None] = []
    missed: list[int] = []
    for i, (segment, position, length) in enumerate(reads):
        hit = segment._recent.get(position)
        if hit is not None and len(hit) == length:
            out.append(bytes(hit))
        elif (ahead := AHEAD.get(segment, position, length)) is not None:
            out.append(ahead)
        else:
            out.append(None)
            missed.append(i)
    if not missed:  # the tail of the log: no thread hop
        return out  # type: ignore[return-value]
    jobs: list[tuple[int, int, int]] = []
    try:
        for i in missed:
            segment, position, length = reads[i]
            f = segment._file_at(position)
            jobs.append((os.dup(f.fd), length, position - f.base))
    except BaseException:
        for fd, _length, _offset in jobs:
            os.close(fd)
        raise
    try:
        limiter = _read_limiter.get()
    except LookupError:
        limiter = trio.CapacityLimiter(_READ_THREADS)
        _read_limiter.set(limiter)
    for i, data in zip(
        missed, await trio.to_thread.run_sync(_pread_all, jobs, limiter=limiter), strict=True
    ):
        out[i] = data
    return out  # type: ignore[return-value]


def _pread_all(jobs: list[tuple[int, int, int]]) -> list[bytes]:
    out = []
    try:
        for fd, length, offset in jobs:
            out.append(os.pread(fd, length, offset))
    finally:
        for fd, _length, _offset in jobs:
            os.close(fd)
    return out
