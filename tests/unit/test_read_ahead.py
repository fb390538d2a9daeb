"""Read-ahead of tier-1 files: what it holds is exactly the files' bytes (batches inside a
block, across two blocks, blocks across two files), in-memory reads use it, it stays within
its budget, and nothing of a trimmed or released file is served."""

from __future__ import annotations

import os

import pytest
import trio

from core.segments import log as seglog
from core.segments.log import SegmentLog, read_many, read_recent
from core.segments.readahead import AHEAD

BATCH = 1000  # each entry takes 1012 bytes of the log (a 12-byte header)
BLOCK = 2048  # small blocks: batches straddle them, and they straddle files


@pytest.fixture(autouse=True)
def _no_recent_memory(monkeypatch):
    """Every read misses the recent batches: only files and read-ahead are left."""
    monkeypatch.setattr(seglog, "_recent", seglog._RecentBatches(0))
    monkeypatch.setattr(AHEAD, "budget", 1 << 20)
    monkeypatch.setattr(AHEAD, "block", BLOCK)
    AHEAD.clear()
    yield
    AHEAD.clear()


def _log(tmp_path, count: int, roll_bytes: int = 1 << 20):
    """A new log, and `count` random batches to append to it."""
    log = SegmentLog(str(tmp_path), 0, lambda a: None, lambda f, e: None, roll_bytes=roll_bytes)
    batches = [os.urandom(BATCH) for _ in range(count)]
    return log, batches


async def _until_read() -> None:
    while AHEAD.in_flight:
        await trio.sleep(0.005)


def test_read_ahead_serves_the_files_bytes_within_budget(tmp_path, monkeypatch) -> None:
    async def main() -> None:
        log, batches = _log(tmp_path, 6)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            pending = [log.append(i % 2, bytearray(b), None) for i, b in enumerate(batches)]
            await log.wait_idle()
            wanted = [(log, p.position, BATCH) for p in pending]
            assert read_recent(wanted) is None  # in the file only
            AHEAD.schedule(wanted[:3])  # blocks 0 and 1 (the third batch straddles them)
            AHEAD.schedule(wanted[:3])  # in flight: not started twice
            assert AHEAD.started == 2
            await _until_read()
            assert read_recent(wanted[:3]) == batches[:3]  # from memory, byte for byte
            assert await read_many(wanted) == batches  # the rest from the file
            assert read_recent([(log, pending[1].position + 5, 10)]) == [batches[1][5:15]]
            # over budget: the oldest block goes first
            monkeypatch.setattr(AHEAD, "budget", 2 * BLOCK)
            AHEAD.schedule(wanted[3:])  # block 1 is held: only block 2, up to the durable end
            await _until_read()
            assert AHEAD.started == 3
            assert AHEAD.size <= 2 * BLOCK
            assert read_recent(wanted[3:]) == batches[3:]
            assert read_recent(wanted[:1]) is None
            log.close()
        log.release()
        assert AHEAD.size == 0  # a released log's blocks are dropped

    trio.run(main)


def test_nothing_of_a_trimmed_file_is_served(tmp_path) -> None:
    """Entries held, and reads in flight when the trim comes, are both dropped."""

    async def main() -> None:
        log, batches = _log(tmp_path, 8, roll_bytes=3 * BATCH)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            pending = []
            for b in batches:  # one group each, so files roll by size
                pending.append(log.append(0, bytearray(b), None))
                await log.wait_idle()
            wanted = [(log, p.position, BATCH) for p in pending]
            assert len(log.files) >= 3
            first, second = log.files[0], log.files[1]
            in_first = [w for w in wanted if first.base <= w[1] < first.end]
            in_second = [w for w in wanted if second.base <= w[1] < second.end]
            AHEAD.schedule(in_first)
            await _until_read()
            assert read_recent(in_first) is not None
            log.mark_uploaded(first)
            assert log.trim_oldest() is first
            assert read_recent(in_first) is None
            assert AHEAD.size == 0
            # a read started before the trim and finished after it is not kept
            AHEAD.schedule(in_second)
            log.mark_uploaded(second)
            assert log.trim_oldest() is second  # no checkpoint since schedule
            await _until_read()
            assert read_recent(in_second) is None
            assert AHEAD.size == 0
            with pytest.raises(seglog.LogTrimmed):
                await read_many(in_first)
            # the files left are still read ahead
            rest = [w for w in wanted if w[1] >= log.local_start]
            AHEAD.schedule(rest)
            await _until_read()
            expected = [
                b for p, b in zip(pending, batches, strict=True) if p.position >= log.local_start
            ]
            assert read_recent(rest) == expected
            log.close()
        log.release()

    trio.run(main)


def test_read_ahead_off_with_a_zero_budget(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(AHEAD, "budget", 0)

    async def main() -> None:
        log, batches = _log(tmp_path, 2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            pending = [log.append(0, bytearray(b), None) for b in batches]
            await log.wait_idle()
            AHEAD.schedule([(log, p.position, BATCH) for p in pending])
            assert AHEAD.in_flight == 0 and AHEAD.started == 0
            log.close()
        log.release()

    trio.run(main)


def test_a_batch_over_several_blocks(tmp_path) -> None:
    async def main() -> None:
        log = SegmentLog(str(tmp_path), 0, lambda a: None, lambda f, e: None)
        batch = os.urandom(3 * BLOCK + 100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            pending = log.append(0, bytearray(batch), None)
            await log.wait_idle()
            wanted = [(log, pending.position, len(batch))]
            AHEAD.schedule(wanted)
            await _until_read()
            assert AHEAD.started == 4
            assert read_recent(wanted) == [batch]
            log.close()
        log.release()

    trio.run(main)


def test_read_ahead_pauses_for_a_reader_of_one_partition_of_many(tmp_path, monkeypatch) -> None:
    """A reader of one partition of four uses a quarter of each block: once the dropped
    blocks say so, most of its reads are no longer read ahead (its data stays correct)."""
    monkeypatch.setattr(AHEAD, "block", 8 * 1012)  # eight entries: two of partition 0
    monkeypatch.setattr(AHEAD, "budget", 2 * 8 * 1012)

    async def main() -> None:
        log, batches = _log(tmp_path, 256)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            pending = [log.append(i % 4, bytearray(b), None) for i, b in enumerate(batches)]
            await log.wait_idle()
            mine = [(log, p.position, BATCH) for p in pending[::4]]
            for i, w in enumerate(mine[:-1]):
                AHEAD.schedule([mine[i + 1]])  # what the read-ahead after serving `w` asks
                await _until_read()
                assert await read_many([w]) == [batches[4 * i]]
            # 32 blocks under the 64 batches; with read-ahead paused, far fewer were read
            assert AHEAD.started < 20
            log.close()
        log.release()

    trio.run(main)
