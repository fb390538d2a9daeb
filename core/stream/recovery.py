"""Opening a stream on start: legacy file names, orphan files, replaying every log."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from ..recordbatch import control_type, read_batch_header
from ..segments.log import SegmentLog, log_file_name, parse_log_file_name
from ..shared_ints import shared
from .reservations import initial_reserve_at

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger(__name__)

# In a stream's folder, empty: the stream's local log exists on this disk
# (core/stream/reservations.py). Named like the log files (but not parsed as one), so
# that removing them (segment-*, *.log, the folder) removes it too.
WAL_MARKER = "segment-wal-id.log"


def _legacy_segment_of_file(name: str) -> int | None:
    """The segment id of a pre-rolling `segment-<id>.log` file name."""
    middle = name[len("segment-") : -len(".log")]
    if name.startswith("segment-") and name.endswith(".log") and middle.isdigit():
        return int(middle)
    return None


def _scan_log_files(stream: Stream) -> dict[int, list[int]]:
    """Base positions of each known segment's files; renames pre-rolling files, removes
    files of segments without a metadata row (a scale event that crashed before its
    commit)."""
    known = {seg.segment_id for seg in stream.record.segments}
    bases: dict[int, list[int]] = {}
    for entry in os.listdir(stream.directory):
        parsed = parse_log_file_name(entry)
        if parsed is None and (legacy := _legacy_segment_of_file(entry)) is not None:
            # A data folder from before rolling files: its one file starts at 0.
            parsed = (legacy, 0)
            os.rename(
                os.path.join(stream.directory, entry),
                os.path.join(stream.directory, log_file_name(legacy, 0)),
            )
            entry = log_file_name(legacy, 0)
        if parsed is None:
            continue
        if parsed[0] not in known:
            log.warning("stream %s: removing uncommitted segment file %s", stream.name, entry)
            os.remove(os.path.join(stream.directory, entry))
        else:
            bases.setdefault(parsed[0], []).append(parsed[1])
    return bases


def open_segments(stream: Stream) -> list[SegmentLog]:
    """Open and replay every segment's log; returns the open ones for their flushers.

    Logs are replayed in segment id order: a successor always has a larger id than the
    segments it replaced, so each partition's batches are indexed in offset order.
    """
    os.makedirs(stream.directory, exist_ok=True)
    bases = _scan_log_files(stream)
    if stream.metadata is not None:
        # first: partition objects created from here on start from their marks
        marks = stream.metadata.load_reservations(stream.name)
        # shared ints: a million partitions repeat a few indexes and marks
        stream.reserved_marks = {shared(i): shared(mark) for i, mark in marks.items()}
        for partition_index, offset in stream.metadata.load_log_starts(stream.name).items():
            stream.partition(partition_index).log_start_offset = offset
        for chunk in stream.metadata.load_chunks(stream.name):
            stream.add_chunk(chunk)
        for saved in stream.metadata.load_producer_states(stream.name):
            stream.partition(saved.partition).restore_producer(
                saved.producer_id, saved.epoch, saved.batches
            )
        # aborted transactions whose data may be in tier 2 only
        for a in stream.metadata.load_aborted_txns(stream.name):
            stream.partition(a.partition).restore_aborted(
                a.producer_id, a.first_offset, a.last_offset
            )
    now = time.monotonic()
    for seg in sorted(stream.record.segments, key=lambda s: s.segment_id):
        segment = stream.new_log(
            seg.segment_id,
            uploaded_end=seg.uploaded_end,
            existing_bases=bases.get(seg.segment_id, ()),
        )
        stream.add_segment(seg.segment_id, segment, now)
        replay_segment(stream, seg.segment_id, segment)
        if seg.sealed:
            segment.seal()
        else:
            stream.ownership.add(seg.first_partition, seg.last_partition, seg.segment_id)
    for _index, partition in stream.iter_partitions():
        slices = partition.slices()
        tier2_end = slices[-1].last_offset + 1 if slices else 0
        partition.next_offset = max(partition.next_offset, tier2_end, partition.log_start_offset)
        partition.high_watermark = partition.next_offset
    if stream.metadata is not None:
        # open transactions whose first batches may have been trimmed from tier 1
        for txn in stream.metadata.load_open_txns(stream.name):
            if stream.has_partition(txn.partition):
                stream.partition(txn.partition).restore_open_txn(txn.producer_id, txn.first_offset)
        _check_reservations(stream)
    for _index, partition in stream.iter_partitions():
        partition.forget_producers_below(partition.log_start_offset)
    return [stream.segments[segment_id] for _f, _l, segment_id in stream.owners()]


def _marker_path(stream: Stream) -> str:
    return os.path.join(stream.directory, WAL_MARKER)


def _write_marker(stream: Stream) -> None:
    """The local log of this stream exists on this disk from now on (an empty file: its
    name is what counts, made durable with the folder)."""
    fd = os.open(_marker_path(stream), os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    dir_fd = os.open(stream.directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _check_reservations(stream: Stream) -> None:
    """Compare each partition's recovered end with its offset reservation.

    If this node's local log of the stream is gone (the marker file is missing: a lost or
    replaced disk, removed files) while the metadata store knows the stream, a partition of
    an open segment owned here whose recovered end (tier 1 + tier 2) is below its mark may
    have lost acknowledged records in between: the range is logged, and the partition
    starts after it (log start and next offset = the mark), so no offset is ever handed out
    twice and consumers positioned in the range get OFFSET_OUT_OF_RANGE. With the log
    intact, the mark is only raised to the recovered end where that is above it.
    """
    metadata = stream.metadata
    assert metadata is not None
    marks = stream.reserved_marks
    # with the write-ahead log in object storage the tail was restored from it before the
    # stream opened (core/wal/restore.py): nothing acknowledged can be missing
    if stream.wal is None and not os.path.exists(_marker_path(stream)) and marks:
        node = metadata.node_id
        local = {
            r.segment.segment_id
            for r in metadata.load_segments(stream.name)
            if not r.segment.sealed and (r.owner_node is None or r.owner_node == node)
        }
        lost: dict[int, int] = {}
        for index, mark in sorted(marks.items()):
            if not stream.has_partition(index) or stream.ownership.owner_of(index) not in local:
                continue
            partition = stream.partition(index)
            if partition.next_offset < mark:
                log.error(
                    "topic %s partition %d: lost offsets [%d, %d): the local write-ahead log "
                    "is missing (lost disk or removed files) and these offsets may have been "
                    "acknowledged; the log now starts at %d",
                    stream.name,
                    index,
                    partition.next_offset,
                    mark,
                    mark,
                )
                partition.skip_lost(mark)
                lost[index] = mark
        if lost:
            metadata.set_log_starts(stream.name, lost)
    above = {
        index: partition.next_offset
        for index, partition in stream.iter_partitions()
        if partition.next_offset > marks.get(index, 0)
    }
    if above:  # durable appends not acknowledged before a crash are visible now
        metadata.raise_reservations(stream.name, above)
        marks.update(above)
    for index, mark in marks.items() if stream.reservations is not None else ():
        if (loaded := stream.loaded_partition(index)) is not None:
            loaded.reserved = mark
            loaded.reserve_at = shared(initial_reserve_at(mark))
    if not os.path.exists(_marker_path(stream)):
        _write_marker(stream)


def replay_segment(stream: Stream, segment_id: int, segment: SegmentLog) -> None:
    """Index every valid entry of the segment's local log in its partitions."""
    for entry in segment.replay():
        header = read_batch_header(entry.batch)
        partition = stream.partition(entry.partition)
        if partition.local_batch_count and header.base_offset != partition.next_offset:
            # Successor flushers wait for their predecessors, so this is not expected.
            log.warning(
                "stream %s partition %d: segment %d batch at offset %d, expected %d",
                stream.name,
                entry.partition,
                segment_id,
                header.base_offset,
                partition.next_offset,
            )
            if header.base_offset < partition.next_offset:
                continue  # already indexed: never index an offset twice
        partition.index_batch(
            header,
            header.base_offset,
            segment_id,
            entry.position,
            len(entry.batch),
            replay=True,
            control=control_type(entry.batch) if header.is_control else None,
        )
