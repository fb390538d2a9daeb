"""Read-ahead of tier-1 files for sequential consumers.

A consumer reading data older than the recent-batch memory asks for a partition's next
range only once it has used up the last one, so the file read would sit between its
request and our answer. Once such a range is served, `schedule` reads the range that
follows (the batches the partition's index lists next, up to about the size just served)
in a worker thread in the background and keeps the bytes here; the next Fetch then finds
them in memory and is answered with no thread hop.

The bytes are kept in *blocks*: `block` bytes of a log at a multiple of `block`, read with
one `pread` per file they overlap. A segment's partitions are interleaved in its log, so
consumers of all of them (or one consumer of all, as the perf tools) read the same blocks
in turn, and a block is read once for all of them, with a handful of system calls and
passes of the GIL instead of one per batch.

Correctness: below a log's durable end the bytes at a position never change while its file
exists (files are append-only, and only never-durable positions are ever cut and reused).
A block holds only durable bytes of files open when it was read; a batch is served only
while its position is still in one of the log's files and below its durable end; a trim
drops the blocks over the removed file, a release all of the log's.

A reader of one partition of many, alone, would use a small part of each block: when a log's
dropped blocks had little of their bytes served, its read-ahead pauses (one read in
SPARSE_RETRY still goes ahead, to notice when that changes), and such readers are served as
without read-ahead, one file read per Fetch.

Memory: all logs together hold at most `budget` bytes, oldest block dropped first; reads in
flight may take half of it more.
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    import outcome

    from .log import SegmentLog

log = logging.getLogger(__name__)

READ_AHEAD_BUDGET_BYTES = 32 << 20
BLOCK_BYTES = 1 << 20
USEFUL_FLOOR = 0.3
SPARSE_RETRY = 16

_Key = tuple["SegmentLog", int]  # (log, block number)
# A block's read: its key, its first log position, and (duplicated descriptor, length,
# offset in the file) for each file it overlaps.
_Job = tuple[_Key, int, list[tuple[int, int, int]]]


class _Block:
    """Bytes of a log from `start` (inside or at the start of its block), and how many of
    them were served so far."""

    __slots__ = ("start", "data", "served")

    def __init__(self, start: int, data: bytes) -> None:
        self.start = start
        self.data = data
        self.served = 0


class ReadAhead:
    """The process's read-ahead blocks, by (log, block number), oldest first out."""

    def __init__(self, budget: int = READ_AHEAD_BUDGET_BYTES, block: int = BLOCK_BYTES) -> None:
        self.budget = budget
        self.block = block
        self.size = 0  # bytes held
        self.in_flight = 0  # bytes being read
        self._held: OrderedDict[_Key, _Block] = OrderedDict()
        self._reading: set[_Key] = set()
        # Per log, the share of the bytes of its dropped blocks that were served (a moving
        # average): low when its readers want a small part of each block (one partition of
        # many read alone). Below USEFUL_FLOOR only every SPARSE_RETRY-th read is started.
        self._useful: weakref.WeakKeyDictionary[SegmentLog, float] = weakref.WeakKeyDictionary()
        self._skipped: weakref.WeakKeyDictionary[SegmentLog, int] = weakref.WeakKeyDictionary()
        self.hits = 0  # batches served from here (for tests and measurements)
        self.started = 0  # blocks whose read was started

    def configure(self, budget: int) -> None:
        """Set the budget (0: off), with blocks of about a 32nd of it (16 KiB to 1 MiB),
        dropping what is held."""
        self.budget = max(0, budget)
        self.block = min(BLOCK_BYTES, max(16 << 10, self.budget // 32))
        self.clear()

    def get(self, segment: SegmentLog, position: int, length: int) -> bytes | memoryview | None:
        """The `length` bytes at `position` if read ahead and still in a file of `segment`
        below its durable end (a view into a block, not a copy); None otherwise."""
        if not self._held:
            return None
        end = position + length
        if position < segment.local_start or end > segment.durable_size:
            return None
        number = position // self.block
        held = self._held.get((segment, number))
        if held is None:
            return None
        at = position - held.start
        if at < 0:
            return None
        hit: bytes | memoryview
        if at + length <= len(held.data):
            hit = memoryview(held.data)[at : at + length]
            held.served += length
        else:  # the batch goes on in the next blocks
            blocks = [held]
            reached = held.start + len(held.data)
            while reached < end:
                number += 1
                following = self._held.get((segment, number))
                if following is None or following.start != reached:
                    return None
                blocks.append(following)
                reached += len(following.data)
            hit = b"".join([held.data[at:]] + [b.data[: end - b.start] for b in blocks[1:]])
            for b in blocks:
                b.served += min(end, b.start + len(b.data)) - max(position, b.start)
        self.hits += 1
        return hit

    def after_answer(self, work: Callable[[], None]) -> None:
        """Run `work` on the loop a little later, once the connection that is answering a
        Fetch now has sent it (finding the next range and starting its read would delay
        the answer's first byte). A failure of `work` is logged, never raised."""
        try:
            later = _later.get()
        except LookupError:
            later = _Later()
            _later.set(later)
            trio.lowlevel.spawn_system_task(later.run, name="read-ahead")
        later.work.append(work)
        later.wake.set()

    def schedule(self, wanted: Sequence[tuple[SegmentLog, int, int]]) -> None:
        """Start reading the blocks under (log, position, length) each in the background,
        skipping those held (far enough) or in flight; nothing when the budget is taken.
        On the loop. Never raises on an I/O problem: read-ahead is only a hint (the
        Fetch then reads the file)."""
        sparse = {segment for segment in {w[0] for w in wanted} if self._sparse(segment)}
        if sparse:
            wanted = [w for w in wanted if w[0] not in sparse]
        needed: dict[_Key, int] = {}  # block -> the end position a batch needs in it
        for segment, position, length in wanted:
            end = position + length
            for number in range(position // self.block, (end - 1) // self.block + 1):
                key = (segment, number)
                needed[key] = max(needed.get(key, 0), min(end, (number + 1) * self.block))
        jobs: list[_Job] = []
        fds: dict[int, int] = {}  # id of a LogFile -> its duplicate for this read
        total = 0
        try:
            for key, need_end in needed.items():
                if key in self._reading:
                    continue
                held = self._held.get(key)
                if held is not None and held.start + len(held.data) >= need_end:
                    continue
                segment, number = key
                job = self._block_job(segment, number, fds)
                if job is None:
                    continue
                length = sum(part[1] for part in job[2])
                if self.in_flight + total + length > self.budget // 2:
                    break  # reads in flight may take half the budget more than held
                jobs.append(job)
                total += length
        except OSError as exc:  # out of descriptors: read-ahead is only a hint
            log.debug("read-ahead not started: %s", exc)
        if not jobs:
            _close_all(list(fds.values()))
            return
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            _close_all(list(fds.values()))
            return
        for job in jobs:
            self._reading.add(job[0])
        self.in_flight += total
        self.started += len(jobs)
        opened = list(fds.values())

        def deliver(result: outcome.Outcome[list[bytes]]) -> None:  # in the worker thread
            with contextlib.suppress(trio.RunFinishedError):  # the gateway is stopping
                token.run_sync_soon(self._done, jobs, total, result)

        trio.lowlevel.start_thread_soon(
            lambda: _read_blocks(jobs, opened), deliver, name="read-ahead"
        )

    def _block_job(self, segment: SegmentLog, number: int, fds: dict[int, int]) -> _Job | None:
        """How to read block `number` of `segment`: its durable bytes in open files."""
        start = max(number * self.block, segment.local_start)
        end = min((number + 1) * self.block, segment.durable_size)
        parts: list[tuple[int, int, int]] = []
        at = start
        while at < end:
            f = segment._file_at(at)
            if f.fd < 0 or at >= f.end:
                break  # released, or a gap: read what is before it
            fd = fds.get(id(f))
            if fd is None:
                # duplicated on the loop: a trim or close meanwhile closes only the
                # original, never what the thread reads
                fd = fds[id(f)] = os.dup(f.fd)
            length = min(end, f.end) - at
            parts.append((fd, length, at - f.base))
            at += length
        return ((segment, number), start, parts) if parts else None

    def _done(self, jobs: list[_Job], total: int, result: outcome.Outcome[list[bytes]]) -> None:
        """On the loop: keep what was read (if its files are still there). Must not raise:
        an exception in a `run_sync_soon` callback ends the whole run."""
        self.in_flight = max(0, self.in_flight - total)
        for job in jobs:
            self._reading.discard(job[0])
        try:
            read = result.unwrap()
        except Exception as exc:
            log.debug("read-ahead failed: %s", exc)
            return
        for (key, start, parts), data in zip(jobs, read, strict=True):
            segment = key[0]
            if len(data) != sum(part[1] for part in parts):
                continue  # a short read
            if start < segment.local_start or not segment.files or segment.files[0].fd < 0:
                continue  # trimmed or released meanwhile
            self._add(key, start, data)

    def _sparse(self, segment: SegmentLog) -> bool:
        """Whether to skip reading ahead in `segment` now: its readers used little of its
        last blocks (reading blocks would cost many times the bytes served). One read in
        SPARSE_RETRY goes ahead all the same, to notice when that changes."""
        if self._useful.get(segment, 1.0) >= USEFUL_FLOOR:
            return False
        skipped = self._skipped.get(segment, 0) + 1
        self._skipped[segment] = skipped % SPARSE_RETRY
        return skipped % SPARSE_RETRY != 0

    def _add(self, key: _Key, start: int, data: bytes) -> None:
        old = self._held.pop(key, None)
        if old is not None:
            self.size -= len(old.data)
        self._held[key] = _Block(start, data)
        self.size += len(data)
        while self.size > self.budget and self._held:
            (segment, _), dropped = self._held.popitem(last=False)
            self._dropped(segment, dropped)

    def _dropped(self, segment: SegmentLog, block: _Block) -> None:
        self.size -= len(block.data)
        share = min(1.0, block.served / max(1, len(block.data)))
        self._useful[segment] = 0.75 * self._useful.get(segment, 1.0) + 0.25 * share

    def forget(self, segment: SegmentLog, start: int = 0, end: int | None = None) -> None:
        """Drop `segment`'s blocks over positions in [start, end) (all by default)."""
        first = start // self.block
        last = None if end is None else (end - 1) // self.block
        gone = [
            key
            for key in self._held
            if key[0] is segment and first <= key[1] and (last is None or key[1] <= last)
        ]
        for key in gone:
            self.size -= len(self._held.pop(key).data)

    def clear(self) -> None:
        """Drop every block and zero the counters; forget reads in flight (those of an
        event loop that is gone never land; one that does is kept as usual)."""
        self._held.clear()
        self._useful.clear()
        self._reading.clear()
        self.size = self.hits = self.started = self.in_flight = 0


class _Later:
    """`ReadAhead.after_answer`'s work and the task that runs it (one per trio run)."""

    def __init__(self) -> None:
        self.work: list[Callable[[], None]] = []
        self.wake = trio.Event()

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            # The writer that sends the answer was woken in the same pass as this task:
            # one more pass lets it go first.
            await trio.lowlevel.cancel_shielded_checkpoint()
            self.wake = trio.Event()
            work, self.work = self.work, []
            for job in work:
                try:
                    job()
                except Exception:  # only a hint: the next Fetch then reads the file
                    log.exception("read-ahead failed")


_later: trio.lowlevel.RunVar[_Later] = trio.lowlevel.RunVar("read_ahead_later")


def _read_blocks(jobs: list[_Job], fds: list[int]) -> list[bytes]:
    """In a worker thread: each block's bytes; every descriptor closed, whatever happens."""
    try:
        out = []
        for _key, _start, parts in jobs:
            pieces = [os.pread(fd, length, offset) for fd, length, offset in parts]
            out.append(pieces[0] if len(pieces) == 1 else b"".join(pieces))
        return out
    finally:
        _close_all(fds)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


AHEAD = ReadAhead()
