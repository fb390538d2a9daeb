"""Read-ahead of tier-1 files for sequential consumers.

A consumer reading data older than the recent-batch memory asks for a partition's next
range only once it has used up the last one, so the file read would sit between its
request and our answer. Once such a range is served, `schedule` reads the range that
follows (the batches the partition's index lists next, up to about the size just served)
in a worker thread in the background and keeps the bytes here, keyed by (log, position);
the next Fetch then finds them in memory and is answered with no thread hop.

Correctness: below a log's durable end the bytes at a position never change while its file
exists (files are append-only, and only never-durable positions are ever cut and reused).
An entry is served only while its position is still in one of the log's files and below
its durable end; a trim drops the removed file's entries, a release all of the log's.

Memory: all logs together hold at most `budget` bytes, oldest dropped first; reads in
flight count against it too.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    import outcome

    from .log import LogFile, SegmentLog

log = logging.getLogger(__name__)

READ_AHEAD_BUDGET_BYTES = 32 << 20

_Key = tuple["SegmentLog", int]
_Job = tuple[_Key, int, int, int]  # key, duplicated descriptor, length, offset in the file


class ReadAhead:
    """The process's read-ahead bytes, by (log, position), oldest first out."""

    def __init__(self, budget: int = READ_AHEAD_BUDGET_BYTES) -> None:
        self.budget = budget
        self.size = 0  # bytes held
        self.in_flight = 0  # bytes being read
        self._held: dict[_Key, bytes] = {}  # insertion order: oldest first
        self._reading: set[_Key] = set()
        self.hits = 0  # batches served from here (for tests and measurements)
        self.started = 0  # batches whose read was started

    def get(self, segment: SegmentLog, position: int, length: int) -> bytes | None:
        """The bytes at `position` if read ahead, still in a file of `segment` and of
        exactly `length` bytes; None otherwise."""
        hit = self._held.get((segment, position))
        if (
            hit is None
            or len(hit) != length
            or position < segment.local_start
            or position + length > segment.durable_size
        ):
            return None
        self.hits += 1
        return hit

    def has(self, segment: SegmentLog, position: int) -> bool:
        key = (segment, position)
        return key in self._held or key in self._reading

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
        """Start reading (log, position, length) each in the background, on the loop,
        skipping those held or in flight; nothing when the budget is taken. Never raises
        on an I/O problem: read-ahead is only a hint (the Fetch then reads the file)."""
        jobs: list[_Job] = []
        fds: list[int] = []  # one duplicate per file read
        total = 0
        f: LogFile | None = None
        owner: SegmentLog | None = None
        fd = -1
        try:
            for segment, position, length in wanted:
                key = (segment, position)
                if key in self._held or key in self._reading:
                    continue
                if self.in_flight + total + length > self.budget // 2:
                    break  # reads in flight may take half the budget; the rest is for held
                # (one file per run of positions; nothing trims it during this loop)
                if f is None or owner is not segment or not f.base <= position < f.end:
                    owner = segment
                    try:
                        f = segment._file_at(position)
                    except Exception:  # trimmed meanwhile
                        break
                    if f.fd < 0:
                        break
                    # duplicated on the loop: a trim or close meanwhile closes only the
                    # original, never what the thread reads
                    fd = os.dup(f.fd)
                    fds.append(fd)
                if position + length > f.end:
                    break
                jobs.append((key, fd, length, position - f.base))
                total += length
        except OSError as exc:  # out of descriptors: read-ahead is only a hint
            log.debug("read-ahead not started: %s", exc)
        if not jobs:
            _close_all(fds)
            return
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            _close_all(fds)
            return
        for job in jobs:
            self._reading.add(job[0])
        self.in_flight += total
        self.started += len(jobs)

        def deliver(result: outcome.Outcome[list[bytes]]) -> None:  # in the worker thread
            with contextlib.suppress(trio.RunFinishedError):  # the gateway is stopping
                token.run_sync_soon(self._done, jobs, total, result)

        trio.lowlevel.start_thread_soon(lambda: _pread_all(jobs, fds), deliver, name="read-ahead")

    def _done(self, jobs: list[_Job], total: int, result: outcome.Outcome[list[bytes]]) -> None:
        """On the loop: keep what was read (if its file is still there). Must not raise:
        an exception in a `run_sync_soon` callback ends the whole run."""
        self.in_flight -= total
        for job in jobs:
            self._reading.discard(job[0])
        try:
            read = result.unwrap()
        except Exception as exc:
            log.debug("read-ahead failed: %s", exc)
            return
        f: LogFile | None = None
        owner: SegmentLog | None = None
        for (key, _fd, length, _offset), data in zip(jobs, read, strict=True):
            segment, position = key
            if len(data) != length:
                continue  # a short read
            if f is None or owner is not segment or not f.base <= position < f.end:
                owner, f = segment, _open_file_at(segment, position)
            if f is not None:  # not trimmed or released meanwhile
                self._add(key, data)

    def _add(self, key: _Key, data: bytes) -> None:
        old = self._held.pop(key, None)
        if old is not None:
            self.size -= len(old)
        self._held[key] = data
        self.size += len(data)
        while self.size > self.budget and self._held:
            oldest = next(iter(self._held))
            self.size -= len(self._held.pop(oldest))

    def forget(self, segment: SegmentLog, start: int = 0, end: int | None = None) -> None:
        """Drop `segment`'s entries at positions in [start, end) (all of them by default)."""
        gone = [
            key
            for key in self._held
            if key[0] is segment and start <= key[1] and (end is None or key[1] < end)
        ]
        for key in gone:
            self.size -= len(self._held.pop(key))

    def clear(self) -> None:
        """Drop every entry and zero the counters (reads in flight still land)."""
        self._held.clear()
        self.size = self.hits = self.started = 0


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


def _open_file_at(segment: SegmentLog, position: int) -> LogFile | None:
    """The file of `segment` holding `position`, if not trimmed nor released."""
    if position < segment.local_start:
        return None
    f = segment._file_at(position)
    return f if f.fd >= 0 and position < f.end else None


def _pread_all(jobs: list[_Job], fds: list[int]) -> list[bytes]:
    """In a worker thread: the jobs' bytes; every descriptor closed, whatever happens."""
    try:
        return [os.pread(fd, length, offset) for _key, fd, length, offset in jobs]
    finally:
        _close_all(fds)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


AHEAD = ReadAhead()
