"""Fetch: whole batches from tier 1, or for older offsets from a tier-2 slice."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..api import ReadResult, StoreUnavailable
from ..errors import ErrorCode
from ..metadata import ChunkSlice
from ..partition import Partition
from ..segments.chunks import iter_batches
from ..segments.log import LogTrimmed, read_many

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger(__name__)

READ_AHEAD_SLICES = 2  # per partition, after the slice a Fetch needed


async def read(
    stream: Stream, index: int, offset: int, max_bytes: int, first_may_exceed: bool = True
) -> ReadResult:
    """Whole batches from `offset`, from tier 1 or (for older offsets) a tier-2 chunk."""
    if stream.deleted or not stream.has_partition(index):
        return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    partition = stream.partition(index)
    hw, start = partition.high_watermark, partition.log_start_offset
    if offset < start or offset > hw:
        return ReadResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start)
    if offset >= partition.local_start_offset and (
        offset >= partition.compacted_end or partition.slice_for(offset) is None
    ):
        try:
            batches = await _read_local(stream, partition, offset, max_bytes, first_may_exceed)
            return ReadResult(ErrorCode.NONE, hw, start, batches)
        except LogTrimmed:
            pass  # trimmed while indexed: the chunk has it
    try:
        batches = await _read_tier2(stream, partition, offset, max_bytes, first_may_exceed)
    except StoreUnavailable as exc:
        log.warning(
            "topic %s partition %d: tier-2 read at %d failed: %s", stream.name, index, offset, exc
        )
        return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR, hw, start)
    return ReadResult(ErrorCode.NONE, hw, start, batches)


async def _read_local(
    stream: Stream, partition: Partition, offset: int, max_bytes: int, first_may_exceed: bool
) -> list[bytes]:
    locations = partition.locate(offset, max_bytes, first_may_exceed)
    batches = await read_many(
        [(stream.segments[loc.segment_id], loc.position, loc.size) for loc in locations]
    )
    for loc in locations:
        stream.stats[loc.segment_id].bytes_out += loc.size
    return batches


async def _read_tier2(
    stream: Stream, partition: Partition, offset: int, max_bytes: int, first_may_exceed: bool
) -> list[bytes]:
    """Batches from the tier-2 slice holding `offset` (one ranged GET, then the cache)."""
    location = partition.slice_for(offset)
    tier = stream.tier
    if location is None or tier is None:
        return []
    data = await tier.read_slice(stream, location)
    following: ChunkSlice | None = location
    for _ in range(READ_AHEAD_SLICES):  # a catch-up reader will want these next
        assert following is not None
        following = partition.slice_for(following.last_offset + 1)
        if following is None or following.first_offset >= partition.local_start_offset:
            break
        tier.prefetch(stream, following)
    batches: list[bytes] = []
    total = 0
    view = memoryview(data)
    for info in iter_batches(view):
        if info.last_offset < offset:
            continue
        if info.last_offset >= partition.high_watermark:
            break
        if total + info.size > max_bytes and (batches or not first_may_exceed):
            break
        batches.append(bytes(view[info.start : info.start + info.size]))
        total += info.size
    return batches
