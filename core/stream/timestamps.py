"""ListOffsets by timestamp: tier-2 slices older than tier 1 first, then tier 1."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..metadata import ChunkSlice
from ..partition import BatchLocation, Partition
from ..recordbatch import Record, decode_records
from ..segments.chunks import iter_batches
from ..segments.log import LogTrimmed, read_many

if TYPE_CHECKING:
    from .stream import Stream

MAX_TIMESTAMP = -3  # ListOffsets v7: the record with the largest timestamp


async def offset_for_timestamp(stream: Stream, index: int, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after `timestamp` and at or after
    the log start; (-1, -1) if none. timestamp -3 asks for the record with the largest
    timestamp (ListOffsets v7). Tier-2 slices older than tier 1 are searched first, in
    offset order, then tier 1. StoreUnavailable while tier 2 is down."""
    partition = stream.partition(index)
    if timestamp == MAX_TIMESTAMP:
        return await _max_timestamp_record(stream, partition)
    for location in _tier2_only_slices(partition):
        if location.max_timestamp < timestamp:
            continue
        for record in await _slice_records(stream, partition, location):
            if record.timestamp >= timestamp:
                return record.offset, record.timestamp
    for batch_location in partition.batches_from_timestamp(timestamp):
        if batch_location.last_offset < partition.log_start_offset:
            continue
        for record in await _local_records(stream, partition, batch_location):
            if record.timestamp >= timestamp:
                return record.offset, record.timestamp
    return -1, -1


async def _max_timestamp_record(stream: Stream, partition: Partition) -> tuple[int, int]:
    candidates: list[Record] = []
    location = partition.batch_with_max_timestamp(partition.log_start_offset)
    if location is not None:
        candidates.extend(await _local_records(stream, partition, location))
    slices = _tier2_only_slices(partition)
    if slices:
        best_slice = max(slices, key=lambda s: s.max_timestamp)
        best_local = max((r.timestamp for r in candidates), default=-1)
        if best_slice.max_timestamp >= best_local:
            candidates.extend(await _slice_records(stream, partition, best_slice))
    if not candidates:
        return -1, -1
    best = max(candidates, key=lambda r: (r.timestamp, -r.offset))
    return best.offset, best.timestamp


def _tier2_only_slices(partition: Partition) -> list[ChunkSlice]:
    """Slices holding offsets at or after the log start that tier 1 no longer has."""
    start, local = partition.log_start_offset, partition.local_start_offset
    return [s for s in partition.slices() if s.last_offset >= start and s.first_offset < local]


async def _local_records(
    stream: Stream, partition: Partition, location: BatchLocation
) -> list[Record]:
    try:
        segment = stream.segments[location.segment_id]
        (batch,) = await read_many([(segment, location.position, location.size)])
    except LogTrimmed:  # trimmed after indexing: its slice was searched already
        return []
    return [r for r in decode_records(batch) if r.offset >= partition.log_start_offset]


async def _slice_records(
    stream: Stream, partition: Partition, location: ChunkSlice
) -> list[Record]:
    assert stream.tier is not None
    data = await stream.tier.read_slice(stream, location)
    start = partition.log_start_offset
    records: list[Record] = []
    for info in iter_batches(data):
        if info.last_offset >= start:
            batch = data[info.start : info.start + info.size]
            records.extend(r for r in decode_records(batch) if r.offset >= start)
    return records
