"""Tier-1 reads of recently durable batches come from memory (no worker-thread hop), are
byte-identical to what the file holds, and fall back to the file once evicted."""

from __future__ import annotations

import os

import trio

from core.segments import log as seglog
from core.segments.log import SegmentLog, read_many


def test_recent_batches_match_the_file_and_evict_oldest_first(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(seglog, "_recent", seglog._RecentBatches(3 * 1000))
    batches = [os.urandom(1000) for _ in range(5)]

    async def main() -> None:
        log = SegmentLog(str(tmp_path), 0, lambda a: None, lambda f, e: None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            pending = [log.append(p % 2, bytearray(b), None) for p, b in enumerate(batches)]
            await log.wait_idle()
            reads = [(log, p.position, len(b)) for p, b in zip(pending, batches, strict=True)]
            # only the last three fit the budget
            assert sorted(log._recent) == [p.position for p in pending[2:]]
            assert await read_many(reads) == batches
            assert [log.read(p.position, 1000) for p in pending] == batches
            for p, b in zip(pending[2:], batches[2:], strict=True):
                assert log._recent[p.position] == b
            # a length that does not match a cached batch is read from the file
            part = await read_many([(log, pending[4].position, 10)])
            assert part == [batches[4][:10]]
            log.close()
        log.release()  # the store's part once the flusher has returned
        assert log._recent == {}

    trio.run(main)
