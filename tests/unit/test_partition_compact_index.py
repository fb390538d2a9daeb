"""A partition's compact indexes: tier-1 rows in one flat array, and a tier-2 index that
holds a lone slice without a list, through every change that can leave one slice."""

from __future__ import annotations

import pytest

from cli.serve import _node_count, usable_cores
from core.metadata import ChunkSlice
from core.partition import Partition


def _slice(first: int, last: int, chunk_id: int) -> ChunkSlice:
    return ChunkSlice(0, first, last, 0, 10, 100 + last, chunk_id)


def test_tier2_index_from_none_to_one_to_many_and_back() -> None:
    p = Partition(0)
    assert p.slices() == [] and p.slice_for(0) is None
    a, b, c = _slice(0, 9, 1), _slice(10, 19, 2), _slice(20, 29, 3)
    p.add_slice(b)
    assert p.slices() == [b] and p.slice_for(5) is b and p.slice_for(30) is None
    p.add_slice(a)  # out of order: kept sorted
    p.add_slice(c)
    assert p.slices() == [a, b, c]
    assert p.slice_for(15) is b and p.slice_for_timestamp(125) is c
    p.drop_slices_below(20)  # one left
    assert p.slices() == [c] and p.slice_for(0) is c
    p.add_slice(_slice(30, 39, 4))
    p.remove_chunk_slices({3, 4})
    assert p.slices() == [] and p.slice_for(0) is None


def test_tier1_rows_locate_truncate_and_drop() -> None:
    p = Partition(0)
    for i in range(5):  # batches of 2 records at offsets 0, 2, 4, 6, 8
        p.add_batch(2 * i, 2, 1000 + i, 7, 100 * i, 50 + i)
    p.high_watermark = p.next_offset
    assert [b.base_offset for b in p.locate(3, 10_000)] == [2, 4, 6, 8]
    assert p.locate(4, 0)[0].size == 52  # the first batch even past max_bytes
    assert p.local_bytes_after(4) == 53 + 54 and p.local_location(1) == (7, 100)
    assert p.batch_with_max_timestamp().base_offset == 8  # type: ignore[union-attr]
    assert [b.base_offset for b in p.batches_from_timestamp(1003)] == [6, 8]
    p.truncate_to(6)
    assert p.next_offset == 6 and p.local_batch_count == 3
    p.drop_local_prefix(2)
    assert p.local_start_offset == 4 and p.local_batch_count == 1


def test_nodes_auto_is_the_usable_cores() -> None:
    assert _node_count("auto") == usable_cores() >= 1
    assert _node_count("3") == 3
    with pytest.raises(Exception, match="a count or auto"):
        _node_count("many")
