"""The chunk format and rolling tier-1 files, in process (no gateway subprocess).

- `build_chunk` regroups a log file's interleaved entries partition by partition: every
  slice holds exactly its partition's batches, in offset order, byte for byte; the footer
  index matches the slices; a corrupt index is refused.
- `SegmentLog` rolls by size, by age (trio's autojump clock), and when sealed; a torn tail
  is cut on replay; trimmed positions raise LogTrimmed; positions continue after a full trim.
"""

from __future__ import annotations

import os
import struct

import crc32c
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from support.client import Rec, build_record_batch

from core.segments.chunks import ChunkFormatError, build_chunk, iter_batches, read_chunk_index
from core.segments.log import ENTRY_HEADER, LogTrimmed, SegmentLog, parse_log_file_name


def _entry(partition: int, batch: bytes) -> bytes:
    prefix = struct.pack(">i", partition)
    header = ENTRY_HEADER.pack(len(batch), crc32c.crc32c(batch, crc32c.crc32c(prefix)), partition)
    return header + batch


def _log_bytes(plan: list[tuple[int, int]]) -> tuple[bytes, dict[int, list[bytes]]]:
    """Entries for (partition, record count) pairs with dense per-partition offsets."""
    next_offset: dict[int, int] = {}
    expected: dict[int, list[bytes]] = {}
    out = []
    for i, (partition, count) in enumerate(plan):
        base = next_offset.get(partition, 0)
        batch = build_record_batch(
            [Rec(f"v{i}-{n}".encode(), b"k") for n in range(count)],
            base_timestamp=1_000 + i,
            base_offset=base,
        )
        next_offset[partition] = base + count
        expected.setdefault(partition, []).append(batch)
        out.append(_entry(partition, batch))
    return b"".join(out), expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 4)), min_size=1, max_size=40))
def test_chunk_slices_hold_each_partitions_batches_in_order(plan) -> None:
    log_bytes, expected = _log_bytes(plan)
    built = build_chunk(log_bytes)
    assert [s.partition for s in built.slices] == sorted(expected)
    assert read_chunk_index(built.data) == built.slices
    for s in built.slices:
        data = built.data[s.byte_start : s.byte_start + s.byte_length]
        batches = [data[b.start : b.start + b.size] for b in iter_batches(data)]
        assert batches == expected[s.partition]
        assert s.first_offset == 0
        assert s.last_offset == sum(c for p, c in plan if p == s.partition) - 1


def test_chunk_stops_at_a_torn_entry_and_refuses_a_bad_index() -> None:
    log_bytes, _ = _log_bytes([(0, 2), (1, 1), (0, 1)])
    torn = log_bytes[:-5]
    built = build_chunk(torn)
    assert [(s.partition, s.last_offset) for s in built.slices] == [(0, 1), (1, 0)]
    corrupt = bytearray(built.data)
    corrupt[-20] ^= 0xFF  # inside the index
    with pytest.raises(ChunkFormatError):
        read_chunk_index(bytes(corrupt))
    with pytest.raises(ChunkFormatError):
        read_chunk_index(b"short")


def _batch(offset: int) -> bytes:
    return build_record_batch([Rec(b"x" * 100, b"k")], base_offset=offset)


def test_log_rolls_by_size_age_and_seal_and_trims(tmp_path) -> None:
    durable: list[int] = []
    rolled: list[int] = []

    async def main() -> None:
        log = SegmentLog(
            str(tmp_path),
            7,
            lambda appended: durable.extend(a.end for a in appended),
            lambda failed, exc: None,
            roll_bytes=1000,
            roll_age_s=30.0,
            on_rolled=lambda segment: rolled.append(len(segment.files)),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            for offset in range(12):  # ~1.7 KB each flush of 1 entry: rolls by size
                log.append(0, _batch(offset), None)
                await log.wait_idle()
            assert len(log.files) >= 2 and rolled
            sizes_before_age = len(rolled)
            log.append(1, _batch(0), None)
            await log.wait_idle()
            await trio.sleep(31)  # the autojump clock: the age roll fires
            assert len(rolled) == sizes_before_age + 1
            assert all(f.closed for f in log.files)
            first = log.files[0]
            assert log.read(first.base + ENTRY_HEADER.size, 10)  # readable
            log.mark_uploaded(first)
            assert log.trim_oldest() is first
            with pytest.raises(LogTrimmed):
                log.read(first.base + ENTRY_HEADER.size, 10)
            log.append(2, _batch(0), None)
            log.seal()
        assert all(f.closed for f in log.files), "sealing rolls the last file"
        names = sorted(os.listdir(tmp_path))
        assert all(parse_log_file_name(n)[0] == 7 for n in names)
        bases = [parse_log_file_name(n)[1] for n in names]
        assert bases == [f.base for f in log.files]
        log.release()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert durable == sorted(durable)


def test_replay_cuts_a_torn_tail_and_positions_continue_after_full_trim(tmp_path) -> None:
    async def main() -> None:
        log = SegmentLog(str(tmp_path), 0, lambda a: None, lambda f, e: None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run_flusher)
            for offset in range(3):
                log.append(0, _batch(offset), None)
            await log.wait_idle()
            log.close()
        end = log.durable_size
        log.release()
        path = os.path.join(tmp_path, os.listdir(tmp_path)[0])
        with open(path, "ab") as f:
            f.write(b"\x00\x00\x01\x00torn")
        bases = [parse_log_file_name(n)[1] for n in os.listdir(tmp_path)]
        reopened = SegmentLog(
            str(tmp_path), 0, lambda a: None, lambda f, e: None, existing_bases=bases
        )
        assert len(list(reopened.replay())) == 3
        assert reopened.durable_size == end and os.path.getsize(path) == end
        reopened.mark_uploaded(reopened.files[0])
        reopened.trim_oldest()
        reopened.release()
        # Everything trimmed: positions go on from the uploaded end, never reusing a key.
        fresh = SegmentLog(str(tmp_path), 0, lambda a: None, lambda f, e: None, uploaded_end=end)
        list(fresh.replay())
        assert fresh.logical_size == end and fresh.local_start == end
        fresh.release()

    trio.run(main)
