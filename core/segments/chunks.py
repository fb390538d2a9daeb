"""Chunks: the immutable tier-2 objects cut from a segment's rolled log files.

A log file interleaves the batches of every partition its segment owns. A chunk lays them
out partition by partition, so a consumer of one partition reads only its bytes with one
ranged GET:

    slice of partition a | slice of partition b | ... | index | footer

A slice is the partition's batches in offset order, exactly as stored (baseOffset patched
in, producer CRC intact), so they go into Fetch responses untouched. The index repeats what
the metadata store records per slice, `(partition, first offset, last offset, byte start,
byte length, max timestamp)`, and the footer `u32 index entries | u32 crc32c(index) |
magic` makes an object self-describing (a metadata store could be rebuilt from a listing).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from ..metadata import ChunkSlice
from ..recordbatch import (
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    batch_base_and_length,
    batch_last_offset,
    batch_max_timestamp,
)
from .log import ENTRY_HEADER, MAX_ENTRY_BYTES

CHUNK_MAGIC = b"SGCHUNK1"
_INDEX_ENTRY = struct.Struct(">iqqqqq")
_FOOTER = struct.Struct(">II8s")


class ChunkFormatError(ValueError):
    """An object is not a well-formed chunk."""


@dataclass(slots=True)
class BuiltChunk:
    # The object in pieces (views of the batches, the index, the footer): a store writes
    # them gathered, where joining 8 MiB would hold the GIL (and stall the event loop) for
    # the whole copy.
    parts: list[bytes | memoryview]
    size: int
    slices: list[ChunkSlice]

    @property
    def data(self) -> bytes:
        """The object as one buffer (a copy)."""
        return b"".join(self.parts)


@dataclass(slots=True)
class BatchInfo:
    base_offset: int
    last_offset: int
    start: int  # byte offset in the buffer
    size: int


def chunk_key(topic_id_hex: str, segment_id: int, start_position: int, writer: str = "") -> str:
    """`writer` tells apart the chunks two nodes may cut at one position of a segment that
    was taken over (the loser's is never recorded, and must not replace the winner's)."""
    return f"{topic_id_hex}/{segment_id}/{start_position:020d}{writer}.chunk"


def build_chunk(log_bytes: bytes, base_position: int = 0) -> BuiltChunk:
    """Regroup a rolled log file's entries partition by partition and add the index.

    The batches are views into `log_bytes`, copied once, into the chunk (this runs for
    every byte produced: a copy per batch and a second one of the whole chunk showed up
    in profiles of many-partition runs).
    """
    view = memoryview(log_bytes)
    by_partition: dict[int, list[memoryview]] = {}
    pos, size = 0, len(view)
    unpack, header_size, crc = ENTRY_HEADER.unpack_from, ENTRY_HEADER.size, crc32c.crc32c
    while pos + header_size <= size:  # like iter_entries: stop at a torn or corrupt entry
        length, expected, partition = unpack(view, pos)
        start = pos + header_size
        if length > MAX_ENTRY_BYTES or start + length > size:
            break
        batch = view[start : start + length]
        if crc(batch, crc(view[pos + 8 : start])) != expected:
            break
        found = by_partition.get(partition)
        if found is None:
            by_partition[partition] = [batch]
        else:
            found.append(batch)
        pos = start + length
    return pack_chunk(sorted(by_partition.items()))


def pack_chunk(partitions: Sequence[tuple[int, Sequence[bytes | memoryview]]]) -> BuiltChunk:
    """A chunk of these partitions' batches (each list non-empty, in offset order)."""
    parts: list[bytes | memoryview] = []
    slices: list[ChunkSlice] = []
    index: list[bytes] = []
    position = 0
    for partition, batches in partitions:
        first = batch_base_and_length(batches[0])[0]
        last = batch_last_offset(batches[-1])
        max_ts = max(batch_max_timestamp(b) for b in batches)
        length = sum(len(b) for b in batches)
        slices.append(ChunkSlice(partition, first, last, position, length, max_ts))
        index.append(_INDEX_ENTRY.pack(partition, first, last, position, length, max_ts))
        parts.extend(batches)
        position += length
    index_bytes = b"".join(index)
    parts.append(index_bytes)
    parts.append(_FOOTER.pack(len(slices), crc32c.crc32c(index_bytes), CHUNK_MAGIC))
    return BuiltChunk(parts, position + len(index_bytes) + _FOOTER.size, slices)


def read_chunk_index(data: bytes) -> list[ChunkSlice]:
    """The slices of a whole chunk object, from its index (ChunkFormatError if malformed)."""
    if len(data) < _FOOTER.size:
        raise ChunkFormatError("too short for a chunk footer")
    count, crc, magic = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
    index_start = len(data) - _FOOTER.size - count * _INDEX_ENTRY.size
    if magic != CHUNK_MAGIC or index_start < 0:
        raise ChunkFormatError("not a streamgate chunk")
    index = data[index_start : len(data) - _FOOTER.size]
    if crc32c.crc32c(index) != crc:
        raise ChunkFormatError("chunk index CRC mismatch")
    return [
        ChunkSlice(*_INDEX_ENTRY.unpack_from(index, i * _INDEX_ENTRY.size)) for i in range(count)
    ]


def iter_batches(data: bytes | memoryview) -> Iterator[BatchInfo]:
    """The record batches laid end to end in a slice (stops at a truncated one)."""
    pos = 0
    size = len(data)
    while pos + LAST_OFFSET_DELTA_OFFSET + 4 <= size:
        base, length = batch_base_and_length(data, pos)
        total = LOG_OVERHEAD + length
        if length <= 0 or pos + total > size:
            return
        yield BatchInfo(base, batch_last_offset(data, pos), pos, total)
        pos += total
