"""Before a node opens its segments: put back, as local log files, the tails that the
write-ahead objects hold and the local disk lacks (a lost or replaced disk, a node that
took a segment over). The ordinary replay then indexes them, and since they are rolled
files the ordinary uploader turns them into tier-2 chunks, after which the objects go.

For each segment this node owns: the local log ends at its last valid entry (a torn or
corrupt tail is cut here, as replay would), or, without files, at the segment's uploaded
end. Ranges of the write-ahead objects beyond that are fetched (one ranged GET each) and
written, fsync'd, as one new file starting there. A hole between ranges (never expected:
objects are deleted only below the uploaded end) ends the restore of that segment with an
ERROR naming the positions.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import trio

from ..metadata import MetadataStore, TopicRecord, WalRange
from ..segments.log import iter_entries, log_file_name, parse_log_file_name
from ..segments.objectstore import ObjectStore

log = logging.getLogger(__name__)


async def restore_tails(
    metadata: MetadataStore,
    object_store: ObjectStore,
    streams_dir: str,
    topics: list[TopicRecord],
    node_id: int | None,
    call: Callable[..., Awaitable[object]],
) -> int:
    """Restore every owned segment's missing tail; returns the bytes written back."""
    restored = 0
    for topic in topics:
        owned = await call(metadata.load_segments, topic.name)
        assert isinstance(owned, list)
        directory = os.path.join(streams_dir, topic.topic_id.hex)
        for segment, owner in owned:
            if owner is not None and node_id is not None and owner != node_id:
                # taken over while this node was away: what its disk holds of it is stale
                # (everything acknowledged is in the objects the new owner restored)
                await trio.to_thread.run_sync(_discard, directory, segment.segment_id)
                continue
            restored += await restore_segment(
                metadata,
                object_store,
                directory,
                topic,
                segment.segment_id,
                segment.uploaded_end,
                call,
            )
    return restored


def _discard(directory: str, segment_id: int) -> None:
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        parsed = parse_log_file_name(name)
        if parsed is not None and parsed[0] == segment_id:
            log.warning("%s: removing a segment another node took over", name)
            os.remove(os.path.join(directory, name))


def _local_end(directory: str, segment_id: int, uploaded_end: int) -> int:
    """Where the segment's local log validly ends (a torn tail is cut off)."""
    bases = []
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            parsed = parse_log_file_name(name)
            if parsed is not None and parsed[0] == segment_id:
                bases.append(parsed[1])
    if not bases:
        return uploaded_end
    base = max(bases)
    path = os.path.join(directory, log_file_name(segment_id, base))
    with open(path, "rb") as f:
        data = f.read()
    valid = 0
    for entry in iter_entries(data, base):
        valid = entry.position - base + len(entry.batch)
    if valid < len(data):
        with open(path, "r+b") as f:
            f.truncate(valid)
            os.fsync(f.fileno())
    return max(base + valid, uploaded_end)


async def restore_segment(
    metadata: MetadataStore,
    object_store: ObjectStore,
    directory: str,
    topic: TopicRecord,
    segment_id: int,
    uploaded_end: int,
    call: Callable[..., Awaitable[object]],
) -> int:
    """Write back the segment's tail beyond its local log; returns the bytes written."""
    end = await trio.to_thread.run_sync(_local_end, directory, segment_id, uploaded_end)
    ranges = await call(metadata.wal_ranges, topic.name, segment_id, end)
    assert isinstance(ranges, list)
    pieces: list[bytes] = []
    at = end
    for r in ranges:
        if not isinstance(r, WalRange) or r.topic_id != topic.topic_id:
            continue
        if r.start_position > at:
            log.error(
                "topic %s segment %d: write-ahead objects miss log positions [%d, %d)",
                topic.name,
                segment_id,
                at,
                r.start_position,
            )
            break
        skip = at - r.start_position
        length = r.end_position - at
        pieces.append(await object_store.get_range(r.object_key, r.object_offset + skip, length))
        at = r.end_position
    if not pieces:
        return 0
    await trio.to_thread.run_sync(_write_file, directory, segment_id, end, pieces)
    log.warning(
        "topic %s segment %d: restored log positions [%d, %d) from write-ahead objects",
        topic.name,
        segment_id,
        end,
        at,
    )
    return at - end


def _write_file(directory: str, segment_id: int, base: int, pieces: list[bytes]) -> None:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, log_file_name(segment_id, base))
    tmp = path + ".restoring"
    with open(tmp, "wb") as f:
        for piece in pieces:
            f.write(piece)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
