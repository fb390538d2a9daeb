"""Unit tests of the tier-1 timestamp index of a partition (no server): lookups stay right
after the oldest entries are dropped, though the running maximum is not rebuilt."""

from __future__ import annotations

from core.partition import Partition


def _partition(max_timestamps: list[int]) -> Partition:
    """A partition of one-record batches with these max timestamps, all durable."""
    partition = Partition(0)
    for offset, ts in enumerate(max_timestamps):
        partition.add_batch(offset, 1, ts, segment_id=0, position=offset * 100, size=100)
    partition.high_watermark = partition.next_offset
    return partition


def _first_offset_from(partition: Partition, timestamp: int) -> int | None:
    location = next(partition.batches_from_timestamp(timestamp), None)
    return None if location is None else location.base_offset


def test_lookup_after_the_largest_timestamp_was_dropped() -> None:
    partition = _partition([100, 500, 200, 300, 250])
    assert _first_offset_from(partition, 250) == 1
    partition.drop_local_prefix(2)  # 100 and 500 leave tier 1
    assert partition.local_batch_count == 3
    # The first batch still indexed with a timestamp >= 250 is offset 3 (300), not 2 (200).
    assert _first_offset_from(partition, 250) == 3
    assert _first_offset_from(partition, 301) is None
    assert [loc.base_offset for loc in partition.batches_from_timestamp(0)] == [2, 3, 4]


def test_lookup_after_dropping_a_prefix_of_ordered_timestamps() -> None:
    partition = _partition([10 * i for i in range(100)])
    partition.drop_local_prefix(40)
    assert _first_offset_from(partition, 0) == 40  # older ones are tier 2's to find
    assert _first_offset_from(partition, 555) == 56
    assert _first_offset_from(partition, 990) == 99
    assert _first_offset_from(partition, 991) is None
