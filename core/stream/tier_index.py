"""Tier-2 bookkeeping on a stream: which chunks its partitions index, what expired."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from ..metadata import ChunkRecord, ProducerSnapshot
from ..shared_ints import shared

if TYPE_CHECKING:
    from .stream import Stream


def add_chunk(stream: Stream, chunk: ChunkRecord) -> None:
    """Index a confirmed chunk's slices in their partitions."""
    stream.chunks[chunk.chunk_id] = chunk
    for s in chunk.slices:
        s.chunk_id = chunk.chunk_id
        partition = stream.partition(s.partition)
        # the partition's own index object, not the one parsed from the log: one int
        # fewer per partition (32 bytes, a million partitions)
        s.partition = partition.index
        # sizes and timestamps repeat across the slices of partitions written alike
        s.byte_length = shared(s.byte_length)
        s.max_timestamp = shared(s.max_timestamp)
        partition.add_slice(s)


def producer_snapshots(stream: Stream, partitions: set[int]) -> list[ProducerSnapshot]:
    """The durable producer states of `partitions`, saved with a chunk."""
    return [
        ProducerSnapshot(index, producer_id, epoch, batches)
        for index in sorted(partitions)
        for producer_id, epoch, batches in stream.partition(index).producer_snapshot()
    ]


def forget_trimmed(stream: Stream, indexes: Collection[int] | None = None) -> None:
    """Drop tier-1 index entries whose files were trimmed (reads go to tier 2). `indexes`:
    the partitions with entries in the trimmed files (None: not known, look at all)."""
    if indexes is None:
        partitions = [partition for _index, partition in stream.iter_partitions()]
    else:
        loaded = (stream.loaded_partition(index) for index in indexes)
        partitions = [partition for partition in loaded if partition is not None]
    for partition in partitions:
        count = 0
        while count < partition.local_batch_count:
            segment_id, position = partition.local_location(count)
            if position >= stream.segments[segment_id].local_start:
                break
            count += 1
        partition.drop_local_prefix(count)


def expired_chunks(stream: Stream) -> list[ChunkRecord]:
    """Chunks every slice of which lies below its partition's log start offset."""
    return [
        chunk
        for chunk in stream.chunks.values()
        if all(s.last_offset < stream.partition(s.partition).log_start_offset for s in chunk.slices)
    ]


def forget_chunks(stream: Stream, chunks: list[ChunkRecord]) -> None:
    for chunk in chunks:
        stream.chunks.pop(chunk.chunk_id, None)
    touched = {s.partition for chunk in chunks for s in chunk.slices}
    for index in touched:
        partition = stream.partition(index)
        partition.drop_slices_below(partition.log_start_offset)
