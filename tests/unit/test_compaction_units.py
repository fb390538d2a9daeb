"""Compaction's pure parts: the record filter keeps offsets, headers and CRCs valid, and
the planner applies the lag / dirty-ratio / tombstone rules."""

from __future__ import annotations

import crc32c
import pytest

from core.compaction.plan import CompactionConfig, plan_partition
from core.compaction.records import filter_batch, iter_keys
from core.metadata import ChunkRecord, ChunkSlice
from core.partition import Partition
from core.recordbatch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    build_batch,
    decode_records,
    read_batch_header,
)


def _batch(codec: int, base_offset: int = 100) -> bytes:
    records = [(b"k%d" % (i % 3), None if i == 4 else b"v%d" % i, []) for i in range(6)]
    return build_batch(
        records,
        compression=codec,
        base_offset=base_offset,
        producer_id=7,
        producer_epoch=1,
        base_sequence=40,
        timestamps=[1000 + i for i in range(6)],
    )


@pytest.mark.parametrize(
    "codec",
    [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD],
)
def test_filter_keeps_offsets_header_fields_and_crc(codec: int) -> None:
    batch = _batch(codec)
    keys = list(iter_keys(batch))
    assert [(o, k, t) for o, k, t in keys] == [
        (100 + i, b"k%d" % (i % 3), i == 4) for i in range(6)
    ]
    out, removed = filter_batch(batch, lambda r: r.offset in (101, 103, 104))
    assert removed == 3 and out is not None
    before, after = read_batch_header(batch), read_batch_header(out)
    assert after.base_offset == 100 and after.last_offset_delta == 5  # offsets kept
    assert after.record_count == 3
    for name in ("base_timestamp", "max_timestamp", "producer_id", "producer_epoch"):
        assert getattr(after, name) == getattr(before, name), name
    assert after.base_sequence == 40 and after.compression == codec
    assert after.crc == crc32c.crc32c(out[21:])
    assert after.total_size == len(out)
    records = decode_records(out)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (101, b"k1", b"v1", 1001),
        (103, b"k0", b"v3", 1003),
        (104, b"k1", None, 1004),
    ]


def test_filter_all_or_nothing() -> None:
    batch = _batch(COMPRESSION_NONE)
    assert filter_batch(batch, lambda r: True) == (batch, 0)
    assert filter_batch(batch, lambda r: False) == (None, 6)


def test_transactional_batches_are_untouched() -> None:
    batch = build_batch([(b"k", b"v", [])], is_transactional=True, producer_id=3)
    assert list(iter_keys(batch)) == []
    assert filter_batch(batch, lambda r: False) == (batch, 0)


def _partition(slices: list[tuple[int, int, int, int]]) -> tuple[Partition, dict]:
    """(first, last, bytes, max ts) per slice, one chunk each, created at ms 1000 * id."""
    partition = Partition(0)
    chunks = {}
    for i, (first, last, size, max_ts) in enumerate(slices, start=1):
        s = ChunkSlice(0, first, last, 0, size, max_ts, chunk_id=i)
        chunks[i] = ChunkRecord(1, i, i + 1, f"k{i}", size, [s], chunk_id=i, created_ms=1000 * i)
        partition.add_slice(s)
    return partition, chunks


def test_plan_dirty_ratio_and_lags() -> None:
    partition, chunks = _partition([(0, 9, 100, 10), (10, 19, 100, 20), (20, 29, 100, 30)])
    config = CompactionConfig.of({"cleanup.policy": "compact"})
    plan = plan_partition(0, partition, chunks, config, now_ms=10_000)
    assert plan is not None and plan.due and plan.range_end == 29
    partition.compacted_end = 20  # two thirds clean: ratio 1/3 < 0.5
    plan = plan_partition(0, partition, chunks, config, now_ms=10_000)
    assert plan is not None and not plan.due and plan.dirty_bytes == 100
    low = CompactionConfig.of({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.3"})
    assert plan_partition(0, partition, chunks, low, now_ms=10_000).due  # type: ignore[union-attr]
    max_lag = CompactionConfig.of({"cleanup.policy": "compact", "max.compaction.lag.ms": "5000"})
    assert not plan_partition(0, partition, chunks, max_lag, now_ms=7_999).due  # type: ignore[union-attr]
    assert plan_partition(0, partition, chunks, max_lag, now_ms=8_000).due  # type: ignore[union-attr]
    # min.compaction.lag.ms: slices with a record younger than the lag are not cleanable
    min_lag = CompactionConfig.of({"cleanup.policy": "compact", "min.compaction.lag.ms": "75"})
    partition.compacted_end = 0
    plan = plan_partition(0, partition, chunks, min_lag, now_ms=100)
    assert plan is not None and plan.range_end == 19
    # below the log start offset nothing is cleanable
    partition.log_start_offset = 30
    assert plan_partition(0, partition, chunks, config, now_ms=10_000) is None


def test_plan_tombstones_due_only_for_cleaned_data() -> None:
    partition, chunks = _partition([(0, 9, 100, 10)])
    config = CompactionConfig.of({"cleanup.policy": "compact"})
    partition.compacted_end = 10
    assert not plan_partition(0, partition, chunks, config, 10_000).due  # type: ignore[union-attr]
    assert plan_partition(0, partition, chunks, config, 10_000, tombstones_due=True).due  # type: ignore[union-attr]


def test_config_policy_parsing() -> None:
    assert CompactionConfig.of({}).compact is False
    both = CompactionConfig.of({"cleanup.policy": "compact,delete"})
    assert both.compact and both.delete
