"""Fetch: whole batches from tier 1, or for older offsets from a tier-2 slice.

A Fetch of many partitions plans its tier-1 reads synchronously (`plan`: the sizes are in
the index) and reads them all in one worker-thread hop (`finish`), instead of one hop per
partition in turn.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..api import ReadResult, StoreUnavailable
from ..errors import ErrorCode
from ..metadata import ChunkSlice
from ..partition import BatchLocation, Partition
from ..recordbatch import batch_last_offset
from ..segments.chunks import iter_batches
from ..segments.log import LogTrimmed, SegmentLog, read_many, read_recent
from ..segments.readahead import AHEAD

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger(__name__)

READ_AHEAD_SLICES = 2  # per partition, after the slice a Fetch needed


async def read(
    stream: Stream,
    index: int,
    offset: int,
    max_bytes: int,
    first_may_exceed: bool = True,
    read_committed: bool = False,
) -> ReadResult:
    """Whole batches from `offset`, from tier 1 or (for older offsets) a tier-2 chunk.

    `read_committed` stops at the last stable offset and lists the aborted transactions
    overlapping what was read."""
    if stream.deleted or not stream.has_partition(index):
        return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    partition = stream.partition(index)
    hw, start = partition.high_watermark, partition.log_start_offset
    lso = partition.last_stable_offset
    if offset < start or offset > hw:
        return ReadResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, last_stable_offset=lso)
    limit = lso if read_committed else hw
    result = ReadResult(ErrorCode.NONE, hw, start, last_stable_offset=lso)
    batches: Sequence[bytes | memoryview] | None = None
    # Offsets below the compacted end come from tier 2 (the compacted chunks), so the
    # tier-1 read cache never brings back records compaction removed.
    if offset >= partition.local_start_offset and (
        offset >= partition.compacted_end or partition.slice_for(offset) is None
    ):
        with contextlib.suppress(LogTrimmed):  # trimmed while indexed: the chunk has it
            batches = await _read_local(
                stream, partition, offset, max_bytes, first_may_exceed, limit
            )
    if batches is None:
        try:
            batches = await _read_tier2(
                stream, partition, offset, max_bytes, first_may_exceed, limit
            )
        except StoreUnavailable as exc:
            log.warning(
                "topic %s partition %d: tier-2 read at %d failed: %s",
                stream.name,
                index,
                offset,
                exc,
            )
            return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR, hw, start)
    result.batches = batches
    if read_committed and batches:
        end = batch_last_offset(batches[-1]) + 1
        result.aborted = partition.aborted_between(offset, end)
    return result


async def _read_local(
    stream: Stream,
    partition: Partition,
    offset: int,
    max_bytes: int,
    first_may_exceed: bool,
    limit: int,
) -> list[bytes | memoryview]:
    locations = partition.locate(offset, max_bytes, first_may_exceed, limit)
    batches = await read_many(
        [(stream.segments[loc.segment_id], loc.position, loc.size) for loc in locations]
    )
    for loc in locations:
        stream.stats[loc.segment_id].bytes_out += loc.size
    return batches


async def _read_tier2(
    stream: Stream,
    partition: Partition,
    offset: int,
    max_bytes: int,
    first_may_exceed: bool,
    limit: int,
) -> list[bytes]:
    """Batches from the tier-2 slice holding `offset` and, while `max_bytes` allows, the
    slices after it (a slice is one partition's part of a chunk, so a Fetch of 1 MiB would
    otherwise stop at each chunk's end): each from the cache, which the prefetch of the
    slices ahead keeps filled, or one ranged GET."""
    location = partition.slice_for(offset)
    tier = stream.tier
    if location is None or tier is None:
        return []
    batches: list[bytes] = []
    total = 0
    while True:
        try:
            data = await tier.read_slice(stream, location)
        except StoreUnavailable:
            if not batches:
                raise
            break  # the next Fetch meets the error
        view = memoryview(data)
        for info in iter_batches(view):
            if info.last_offset < offset:
                continue
            if info.last_offset >= limit or (
                total + info.size > max_bytes and (batches or not first_may_exceed)
            ):
                _prefetch_after(stream, partition, location)
                return batches
            batches.append(bytes(view[info.start : info.start + info.size]))
            total += info.size
        following = partition.slice_for(location.last_offset + 1)
        if following is None or total >= max_bytes or following.first_offset >= limit:
            break
        if following.first_offset >= partition.local_start_offset:
            break  # the rest is in tier 1: the next Fetch reads it there
        location = following
    _prefetch_after(stream, partition, location)
    return batches


def _prefetch_after(stream: Stream, partition: Partition, location: ChunkSlice) -> None:
    """Start reading the slices after `location` that are only in tier 2: a catch-up
    reader wants them next."""
    tier = stream.tier
    following: ChunkSlice | None = location
    for _ in range(READ_AHEAD_SLICES):
        assert following is not None and tier is not None
        following = partition.slice_for(following.last_offset + 1)
        if following is None or following.first_offset >= partition.local_start_offset:
            break
        tier.prefetch(stream, following)


@dataclass(slots=True)
class LocalRead:
    """A tier-1 read planned on the loop; `finish` reads its bytes (core.api.PendingRead)."""

    stream: Stream
    partition: Partition
    index: int
    offset: int
    max_bytes: int
    first_may_exceed: bool
    read_committed: bool
    result: ReadResult  # everything but the batches (and aborted ranges)
    locations: list[BatchLocation]
    size: int


def plan(
    stream: Stream,
    index: int,
    offset: int,
    max_bytes: int,
    first_may_exceed: bool = True,
    read_committed: bool = False,
) -> ReadResult | LocalRead | None:
    """`read` without reading: the final result when nothing is to be read (an error, or
    no new batch), a LocalRead when the batches are in tier 1, None when they must come
    from tier 2 (then `read` it)."""
    if stream.deleted or not stream.has_partition(index):
        return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    partition = stream.partition(index)
    hw, start = partition.high_watermark, partition.log_start_offset
    lso = partition.last_stable_offset
    if offset < start or offset > hw:
        return ReadResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, last_stable_offset=lso)
    limit = lso if read_committed else hw
    if offset >= limit:  # caught up (most partitions of a consumer at the tail): nothing new
        return ReadResult(ErrorCode.NONE, hw, start, [], last_stable_offset=lso)
    if offset < partition.local_start_offset or (
        offset < partition.compacted_end and partition.slice_for(offset) is not None
    ):
        return None
    locations = partition.locate(offset, max_bytes, first_may_exceed, limit)
    for loc in locations:  # trimmed meanwhile: the tier-2 path has it
        if loc.position < stream.segments[loc.segment_id].local_start:
            return None
    result = ReadResult(ErrorCode.NONE, hw, start, [], last_stable_offset=lso)
    if not locations:
        return result
    size = sum(loc.size for loc in locations)
    return LocalRead(
        stream,
        partition,
        index,
        offset,
        max_bytes,
        first_may_exceed,
        read_committed,
        result,
        locations,
        size,
    )


def finish_now(reads: Sequence[LocalRead]) -> list[ReadResult] | None:
    """`finish` without a wait: the results when every batch is in memory (recently
    durable), None when one must be read from a file."""
    try:
        data = read_recent(_wanted(reads))
    except KeyError:  # a segment gone meanwhile: `finish` knows what to do
        return None
    return None if data is None else _results(reads, data)


def _wanted(reads: Sequence[LocalRead]) -> list[tuple[SegmentLog, int, int]]:
    return [
        (r.stream.segments[loc.segment_id], loc.position, loc.size)
        for r in reads
        for loc in r.locations
    ]


async def finish(reads: Sequence[LocalRead]) -> list[ReadResult]:
    """The results of planned reads, their bytes read in one worker-thread hop (none when
    they are all recent). If a file was trimmed or closed since the plan, each is read
    again on its own (tier 2 then)."""
    try:
        data = await read_many(_wanted(reads))
    except (LogTrimmed, OSError, KeyError):  # a trim, topic delete or scale meanwhile
        return [
            await read(
                r.stream, r.index, r.offset, r.max_bytes, r.first_may_exceed, r.read_committed
            )
            for r in reads
        ]
    return _results(reads, data)


def _results(reads: Sequence[LocalRead], data: Sequence[bytes | memoryview]) -> list[ReadResult]:
    """The planned reads' results, given their batches' bytes in plan order."""
    out = []
    at = 0
    for r in reads:
        count = len(r.locations)
        batches = data[at : at + count]
        at += count
        for loc in r.locations:
            r.stream.stats[loc.segment_id].bytes_out += loc.size
        result = r.result
        result.batches = batches
        if r.read_committed and batches:
            end = batch_last_offset(batches[-1]) + 1
            result.aborted = r.partition.aborted_between(r.offset, end)
        out.append(result)
    behind = [r for r in reads if _behind_recent(r)]
    if behind:  # a sequential reader behind the tail will want what follows
        AHEAD.after_answer(lambda: _read_next(behind))
    return out


def _behind_recent(r: LocalRead) -> bool:
    """Whether the read's last batch was older than the recent batches in memory."""
    last = r.locations[-1]
    segment = r.stream.segments.get(last.segment_id)
    return segment is not None and last.position not in segment._recent


def _read_next(reads: list[LocalRead]) -> None:
    """After serving ranges older than the recent batches, start reading each partition's
    next range in the background, about as large, so that its next Fetch is answered from
    memory (core/segments/readahead.py)."""
    wanted: list[tuple[SegmentLog, int, int]] = []
    for r in reads:
        partition = r.partition
        offset = r.locations[-1].last_offset + 1
        limit = partition.last_stable_offset if r.read_committed else partition.high_watermark
        if offset >= limit or offset < partition.compacted_end:  # nothing, or from tier 2
            continue
        for loc in partition.locate(offset, max(r.max_bytes, r.size), True, limit):
            following = r.stream.segments.get(loc.segment_id)
            if following is None or loc.position in following._recent:
                break  # the rest is in memory already
            wanted.append((following, loc.position, loc.size))
    if wanted:
        AHEAD.schedule(wanted)
