"""Offset reservations (core/stream/reservations.py): acknowledgements stay below the mark
the metadata store holds, and a stream whose local log is gone starts after that mark."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3

import trio
from support.client import Rec, build_record_batch

from core.partition import UNRESERVED, Partition
from core.store import StoreSettings, StreamStore
from core.stream import append
from core.stream.recovery import WAL_MARKER
from core.stream.reservations import (
    MAX_BLOCK,
    MIN_BLOCK,
    Reservations,
    block_for,
    initial_reserve_at,
)
from core.tiering import TierSettings


def _batch(value: bytes = b"v", count: int = 1) -> bytes:
    return build_record_batch([Rec(b"k", value)] * count)


def _db_marks(tmp_path) -> dict[int, int]:
    with sqlite3.connect(os.path.join(tmp_path, "metadata.db")) as db:
        return {p: r for p, r in db.execute("SELECT partition, reserved FROM offset_reservations")}


def test_block_sizes() -> None:
    assert block_for(0) == MIN_BLOCK
    assert block_for(1_000_000) == 2_000_000  # about two seconds of the rate
    assert block_for(1e12) == MAX_BLOCK
    assert initial_reserve_at(MIN_BLOCK) == MIN_BLOCK // 2


def test_blocks_follow_the_partition_rate() -> None:
    class FakeStream:
        name = "t"

    reservations = Reservations(call=None)
    partition = Partition(0)
    partition.reserved = 0
    assert reservations.plan(FakeStream, partition, 0.0) == (MIN_BLOCK, MIN_BLOCK)
    partition.reserved, partition.next_offset = MIN_BLOCK, 1_000_000  # a burst
    mark, block = reservations.plan(FakeStream, partition, 1.0)
    assert block == block_for(1_000_000) and mark == 1_000_000 + block
    partition.reserved, partition.next_offset = mark, 1_000_100  # then nearly idle
    assert reservations.plan(FakeStream, partition, 11.0) == (mark + MIN_BLOCK, MIN_BLOCK)


def test_durable_appends_above_the_mark_wait_for_it() -> None:
    partition = Partition(0)
    assert partition.reserved == UNRESERVED  # no metadata store: nothing is deferred
    partition.reserved = 5
    tickets = [append.Ticket(partition, base, end) for base, end in [(0, 4), (4, 8), (8, 9)]]
    appended = [append.LogAppend(0, 0, 0, ticket) for ticket in tickets]
    append.on_durable(appended)
    assert partition.high_watermark == 4 and tickets[0].done
    assert not tickets[1].done and partition.deferred == tickets[1:]
    partition.reserved = 8
    append.release_deferred(partition)
    assert partition.high_watermark == 8 and tickets[1].done
    assert partition.deferred == tickets[2:] and not tickets[2].done
    append.fail_deferred(partition)
    assert tickets[2].done and tickets[2].error and partition.deferred is None


def test_acknowledged_offsets_stay_below_the_reservation(tmp_path) -> None:
    async def main() -> None:
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            stream = store.create_topic("t", 2)
            for _ in range(30):
                result = await stream.append(0, _batch(count=100), -1)
                assert result.error == 0
                partition = stream.partition(0)
                assert partition.high_watermark <= partition.reserved
                assert _db_marks(tmp_path)[0] >= partition.high_watermark
            assert store.reservations is not None and store.reservations.raises >= 1
            assert 1 not in _db_marks(tmp_path)  # an idle partition has no row
            store.stop()

    trio.run(main)


def _fill_and_stop(tmp_path, records: int) -> None:
    async def main() -> None:
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            stream = store.create_topic("t", 2)
            for _ in range(records // 100):
                assert (await stream.append(0, _batch(count=100), -1)).error == 0
            store.stop()

    trio.run(main)


def _reopen(tmp_path, check) -> None:
    async def main() -> None:
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            await check(store.streams["t"])
            store.stop()

    trio.run(main)


def test_intact_log_restarts_where_it_was(tmp_path, caplog) -> None:
    _fill_and_stop(tmp_path, 500)
    assert _db_marks(tmp_path) == {0: 500}  # a clean stop leaves the exact end

    async def check(stream) -> None:
        partition = stream.partition(0)
        assert (partition.log_start_offset, partition.next_offset) == (0, 500)
        assert (await stream.append(0, _batch(), -1)).base_offset == 500

    with caplog.at_level(logging.ERROR):
        _reopen(tmp_path, check)
    assert "lost offsets" not in caplog.text


def test_missing_log_starts_after_the_reservation(tmp_path, caplog) -> None:
    _fill_and_stop(tmp_path, 500)
    mark = _db_marks(tmp_path)[0]
    assert mark >= 500
    streams = os.path.join(tmp_path, "streams")
    for folder in os.listdir(streams):
        shutil.rmtree(os.path.join(streams, folder))

    async def check(stream) -> None:
        partition = stream.partition(0)
        assert (partition.log_start_offset, partition.next_offset) == (mark, mark)
        assert partition.high_watermark == mark
        read = await stream.read(0, 10, 1 << 20)
        assert read.error != 0  # OFFSET_OUT_OF_RANGE: below the log start
        assert (await stream.append(0, _batch(), -1)).base_offset == mark
        assert stream.partition(1).next_offset == 0  # never used: nothing lost
        assert os.path.exists(os.path.join(stream.directory, WAL_MARKER))

    with caplog.at_level(logging.ERROR):
        _reopen(tmp_path, check)
    assert f"topic t partition 0: lost offsets [0, {mark})" in caplog.text
    assert "partition 1" not in caplog.text

    async def again(stream) -> None:  # the log start was persisted; nothing more is lost
        partition = stream.partition(0)
        assert (partition.log_start_offset, partition.next_offset) == (mark, mark + 1)

    caplog.clear()
    with caplog.at_level(logging.ERROR):
        _reopen(tmp_path, again)
    assert "lost offsets" not in caplog.text


def test_log_without_reservations_raises_them_on_open(tmp_path, caplog) -> None:
    """A data folder from before reservations (no rows, no marker) loses nothing; the
    recovered ends become the marks."""
    _fill_and_stop(tmp_path, 300)
    with sqlite3.connect(os.path.join(tmp_path, "metadata.db")) as db:
        db.execute("DELETE FROM offset_reservations")
    streams = os.path.join(tmp_path, "streams")
    for folder in os.listdir(streams):
        os.remove(os.path.join(streams, folder, WAL_MARKER))

    async def check(stream) -> None:
        assert stream.partition(0).next_offset == 300
        assert _db_marks(tmp_path)[0] >= 300

    with caplog.at_level(logging.ERROR):
        _reopen(tmp_path, check)
    assert "lost offsets" not in caplog.text


def test_records_in_tier2_stay_and_the_lost_range_starts_after_them(tmp_path, caplog) -> None:
    """Crash-like: the marks stay a block ahead (no clean stop settles them), the first
    records are in tier 2, the last ones only in the removed local log."""
    settings = StoreSettings(str(tmp_path), tier=TierSettings(chunk_bytes=1, chunk_age_s=0.05))
    in_tier2 = 0

    async def fill() -> None:
        nonlocal in_tier2
        store = StreamStore(settings)
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            stream = store.create_topic("t", 1)
            for _ in range(3):
                assert (await stream.append(0, _batch(count=100), -1)).error == 0
            with trio.fail_after(10):
                while stream.partition(0).slices()[-1:] == [] or any(
                    s.unuploaded_bytes for s in stream.segments.values()
                ):
                    await trio.sleep(0.01)
            in_tier2 = stream.partition(0).slices()[-1].last_offset + 1
            store.tier.settings.chunk_age_s = 3600  # the next records stay in tier 1
            for segment in stream.segments.values():
                segment.roll_age_s = 3600
            assert (await stream.append(0, _batch(count=100), -1)).error == 0
            store._settle_reservations = _no_settle  # as if killed: marks stay ahead
            store.stop()

    async def _no_settle() -> None:
        return None

    trio.run(fill)
    assert in_tier2 == 300
    mark = _db_marks(tmp_path)[0]
    assert mark > 400
    streams = os.path.join(tmp_path, "streams")
    for folder in os.listdir(streams):
        shutil.rmtree(os.path.join(streams, folder))

    async def check(stream) -> None:
        partition = stream.partition(0)
        assert (partition.log_start_offset, partition.next_offset) == (mark, mark)

    with caplog.at_level(logging.ERROR):
        _reopen(tmp_path, check)
    assert f"topic t partition 0: lost offsets [300, {mark})" in caplog.text
