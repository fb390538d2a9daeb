"""What a written partition keeps alive: shared int objects for the values many partitions
repeat, one shared empty tier-1 index, and nothing of a flushed group once it is durable.
The counters read back right through one batch, a second one, and a restart."""

from __future__ import annotations

import gc
import weakref

import trio
from support.client import Rec, build_record_batch

from core import shared_ints
from core.partition import Partition
from core.segments.log import SegmentLog
from core.shared_ints import shared
from core.store import StoreSettings, StreamStore


def test_shared_gives_one_object_per_value_and_stays_bounded(monkeypatch) -> None:
    shared_ints.reset()
    a, b = int("100000"), int("100000")
    assert a is not b and shared(a) is a and shared(b) is a
    monkeypatch.setattr(shared_ints, "CAPACITY", 4)
    for value in range(1000, 1010):
        assert shared(value) == value
    assert len(shared_ints._table) <= 4
    assert shared(b) == 100000  # emptied meanwhile: equal, if no longer the same object
    shared_ints.reset()


def test_partition_index_after_one_batch_a_second_and_none() -> None:
    p, q = Partition(0), Partition(1)
    assert p._rows is q._rows and p.local_batch_count == 0  # one shared empty index
    p.add_batch(0, 1, 1000, 3, 40, 1095)
    assert p._rows is not q._rows and len(q._rows) == 0
    p.high_watermark = p.next_offset
    assert (p.next_offset, p.local_start_offset, p.local_location(0)) == (1, 0, (3, 40))
    assert [(b.base_offset, b.size) for b in p.locate(0, 1 << 20)] == [(0, 1095)]
    p.add_batch(1, 2, 2000, 3, 1200, 500)
    p.high_watermark = p.next_offset
    assert p.next_offset == 3 and p.local_bytes_after(-1) == 1595
    assert [b.base_offset for b in p.locate(1, 1 << 20)] == [1]
    p.drop_local_prefix(2)  # all of it went to tier 2: back to the shared empty index
    assert p._rows is q._rows and p.local_start_offset == 3
    p.add_batch(3, 1, 3000, 4, 0, 10)
    p.truncate_to(3)
    assert p._rows is q._rows and p.next_offset == 3
    p.truncate_to(0)  # nothing to cut: the shared index is never written to
    assert len(q._rows) == 0


def test_flushed_group_is_not_kept_by_an_idle_log(tmp_path) -> None:
    class Token:
        pass

    tokens = [Token() for _ in range(3)]
    alive = [weakref.ref(t) for t in tokens]

    async def main() -> None:
        log = SegmentLog(str(tmp_path), 0, lambda a: None, lambda f, e: None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            for i in range(3):
                log.append(i, bytearray(b"x" * 100), tokens.pop())
            await log.wait_idle()
            await trio.sleep(0.05)  # the flusher is back waiting for work
            gc.collect()
            assert [ref() for ref in alive] == [None, None, None]
            log.close()
        log.release()

    trio.run(main)


def _batch(value: bytes) -> bytes:
    return build_record_batch([Rec(b"k", value + b"." * 300)])  # over 256 bytes


def test_many_partitions_share_ints_and_read_back_after_a_restart(tmp_path) -> None:
    async def write() -> None:
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            a, b = store.create_topic("a", 400), store.create_topic("b", 400)
            for stream in (a, b):
                for index in (300, 301):
                    result = await stream.append(int(str(index)), _batch(b"one"), -1)
                    assert result.error == 0 and result.base_offset == 0
            pa, pb = a.partition(300), b.partition(300)
            assert pa.index is pb.index and pa.index is a.partition(int("300")).index
            assert all(key is a.partition(key).index for key, _p in a.iter_partitions())
            assert pa.bytes_in is pb.bytes_in and pa.bytes_in > 256
            assert pa.reserved is pb.reserved and pa.reserve_at is pb.reserve_at
            assert (await a.append(300, _batch(b"two"), -1)).base_offset == 1
            assert pa.bytes_in == 2 * pb.bytes_in and pa.records_in == 2
            assert (pa.next_offset, pa.high_watermark, pb.next_offset) == (2, 2, 1)
            store.stop()

    async def reopen() -> None:
        store = StreamStore(StoreSettings(str(tmp_path)))
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            a, b = store.streams["a"], store.streams["b"]
            assert a.partition(300).index is b.partition(300).index
            assert (a.partition(300).next_offset, b.partition(301).next_offset) == (2, 1)
            assert b.partition(300).reserved is b.partition(301).reserved
            read = await a.read(300, 0, 1 << 20)
            data = [bytes(batch) for batch in read.batches or []]
            assert read.error == 0 and len(data) == 2
            assert b"one" in data[0] and b"two" in data[1]
            assert (await b.append(301, _batch(b"again"), -1)).base_offset == 1
            store.stop()

    trio.run(write)
    trio.run(reopen)
