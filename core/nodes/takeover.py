"""Several nodes with `--wal object` (core/wal): a live node takes over the open segments of a node
whose lease expired, so its partitions are served again without it or its disk.

Each sync round, every live node reads the open segments whose owner's lease has expired
and takes those that fall to it (by a hash of topic and segment over the live node ids, so
two nodes rarely race; the database's compare-and-set settles it when they do). Taking one:

1. `take_over_segment`: the owner becomes this node, under the dead node's row lock and
   only once its lease is over, so none of its write-ahead commits can land afterwards
   (the sync round has ended the transactions the dead node left open: membership.py);
2. the segment's tail beyond tier 2 is restored from the write-ahead objects into local
   files (restore.py);
3. its partitions are reloaded from the database (chunks, log starts, producer states,
   aborted transactions) and the restored tail is replayed on top: offsets go on densely
   and idempotent producers keep their sequences; then its flusher starts.

The sync that follows publishes the new owner, and clients move their produce there. A
segment taken whose opening fails (the object store down while its tail is restored) stays
this node's and is opened again each round until it works (`Unadopted`).
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..cluster.events import EVENTS, ClusterEvent
from ..cluster.view import CLUSTER
from ..failure_log import FailureLog
from ..segments.log import parse_log_file_name
from ..stream.handover import load_partition
from ..stream.recovery import replay_segment
from ..wal.restore import restore_segment

if TYPE_CHECKING:
    from ..metadata import OpenSegment
    from ..metadata.postgres import PostgresMetadataStore
    from ..store import StreamStore
    from ..stream import Stream

log = logging.getLogger(__name__)

Call = Callable[..., Awaitable[Any]]


def taker(topic: str, segment_id: int, live: list[int]) -> int:
    """The live node a dead node's segment falls to."""
    nodes = sorted(live)
    return nodes[zlib.crc32(f"{topic}/{segment_id}".encode()) % len(nodes)]


class Unadopted:
    """Segments this node took over (the database names it the owner) but could not open
    yet, e.g. the object store was down while it restored their tails: tried again each
    round, since no other node will take them while this one's lease is live."""

    def __init__(self) -> None:
        self.segments: dict[tuple[str, int], tuple[OpenSegment, float]] = {}
        # the first failure with its traceback, then a line now and then with the count
        self.failures = FailureLog("", log, every_s=10.0)


async def take_over_orphans(
    store: StreamStore,
    db: PostgresMetadataStore,
    call: Call,
    me: int,
    live: list[int],
    unadopted: Unadopted,
) -> None:
    """Take the expired nodes' open segments that fall to this node, and open those taken
    earlier whose opening failed."""
    if store.wal is None or me not in live:
        return
    for key, (row, started) in list(unadopted.segments.items()):
        stream = store.streams.get(row.topic)
        opened = (
            False if stream is None else await _opened(store, stream, row, db, call, me, unadopted)
        )
        if opened is not None:  # (None: try again next round)
            del unadopted.segments[key]
            _serve(row, True)
        if opened:
            _said(row, me, started)
    for row in await call(db.orphaned_segments):
        if taker(row.topic, row.segment_id, live) != me:
            continue
        stream = store.streams.get(row.topic)
        if stream is None or stream.deleted:
            continue
        started = time.monotonic()
        if not await call(db.take_over_segment, row.topic, row.segment_id, row.owner_node, me):
            continue
        opened = await _opened(store, stream, row, db, call, me, None)
        if opened is None:
            # the next sync names this node the leader: refuse its partitions until open
            _serve(row, False)
            unadopted.segments[(row.topic, row.segment_id)] = (row, started)
        elif opened:
            _said(row, me, started)


async def _opened(
    store: StreamStore,
    stream: Stream,
    row: OpenSegment,
    db: PostgresMetadataStore,
    call: Call,
    me: int,
    retry: Unadopted | None,
) -> bool | None:
    """Open a segment taken over: True when opened, False when there is nothing to open
    (the topic or the segment gone, or no longer this node's), None when it failed (said:
    the first time with its traceback, then through `retry`'s failure log) and must be
    tried again."""
    if stream.deleted:
        return False
    what = f"topic {row.topic}: opening segment {row.segment_id}, taken over,"
    try:
        opened = await _adopt(store, stream, row.segment_id, db, call, me)
    except Exception as exc:
        if retry is None:
            log.exception("%s failed (tried again next round)", what)
        else:
            retry.failures.failed(what, exc, "trying again each round")
        return None
    if retry is not None:
        retry.failures.succeeded(what)
    return opened


def _serve(row: OpenSegment, serve: bool) -> None:
    """Serve the segment's partitions here again, or not (taken over, not yet open)."""
    partitions = range(row.first_partition, row.last_partition + 1)
    unopened = CLUSTER.unopened.setdefault(row.topic, set())
    if serve:
        unopened.difference_update(partitions)
        if not unopened:
            del CLUSTER.unopened[row.topic]
    else:
        unopened.update(partitions)


def _said(row: OpenSegment, me: int, started: float) -> None:
    EVENTS.record(
        ClusterEvent(
            "takeover",
            row.topic,
            (row.segment_id,),
            row.owner_node,
            (me,),
            f"the lease of node {row.owner_node} expired"
            f" (partitions {row.first_partition}-{row.last_partition})",
            seconds=round(time.monotonic() - started, 4),
        )
    )
    log.warning(
        "topic %s: took over segment %d (partitions %d-%d) of node %d, whose lease "
        "expired, in %.3f s",
        row.topic,
        row.segment_id,
        row.first_partition,
        row.last_partition,
        row.owner_node,
        time.monotonic() - started,
    )


def _bases(directory: str, segment_id: int) -> list[int]:
    if not os.path.isdir(directory):
        return []
    found = (parse_log_file_name(name) for name in os.listdir(directory))
    return sorted(p[1] for p in found if p is not None and p[0] == segment_id)


async def _adopt(
    store: StreamStore,
    stream: Stream,
    segment_id: int,
    db: PostgresMetadataStore,
    call: Call,
    me: int,
) -> bool:
    name = stream.name
    rows = await call(db.load_segments, name)
    found = next((r for r in rows if r.segment.segment_id == segment_id), None)
    if found is None or found.owner_node != me or store.object_store is None:
        return False  # gone, or no longer this node's (moved on since an earlier try)
    record = found.segment
    await restore_segment(
        db,
        store.object_store,
        stream.directory,
        stream.record,
        segment_id,
        record.uploaded_end,
        call,
    )
    reserved = await call(db.load_reservations, name)
    chunks = await call(db.load_chunks, name)
    producers = await call(db.load_producer_states, name)
    log_starts = await call(db.load_log_starts, name)
    aborted = await call(db.load_aborted_txns, name)
    compacted = await call(db.load_compacted_ends, name)
    open_txns = await call(db.load_open_txns, name)
    bases = await trio.to_thread.run_sync(_bases, stream.directory, segment_id)
    if stream.deleted or stream.spawn_flusher is None:
        return False
    # Synchronous from here: no append or read of these partitions runs in between.
    old = stream.segments.get(segment_id)
    if old is not None:
        old.close()  # the placeholder this node kept for another node's segment
    segment = stream.new_log(segment_id, uploaded_end=record.uploaded_end, existing_bases=bases)
    stream.add_segment(segment_id, segment, time.monotonic())
    indexes = range(record.first_partition, record.last_partition + 1)
    for index in indexes:  # the dead owner raised them: go on from its marks
        if index in reserved:
            stream.reserved_marks[index] = max(stream.reserved_marks.get(index, 0), reserved[index])
    for index in indexes:
        partition = load_partition(stream, index, chunks, producers, log_starts.get(index, 0))
        partition.compacted_end = max(partition.compacted_end, compacted.get(index, 0))
        for a in aborted:
            if a.partition == index:
                partition.restore_aborted(a.producer_id, a.first_offset, a.last_offset)
    replay_segment(stream, segment_id, segment)
    for index in indexes:
        partition = stream.partition(index)
        slices = partition.slices()
        tier2_end = slices[-1].last_offset + 1 if slices else 0
        partition.next_offset = max(partition.next_offset, tier2_end, partition.log_start_offset)
        partition.high_watermark = partition.next_offset
    for t in open_txns:  # open transactions whose first batches are in tier 2 only
        if t.partition in indexes:
            stream.partition(t.partition).restore_open_txn(t.producer_id, t.first_offset)
    # recorded in the objects but not yet acknowledged past the mark: raise it first
    above = {
        i: stream.partition(i).next_offset
        for i in indexes
        if stream.partition(i).next_offset > stream.reserved_marks.get(i, 0)
    }
    if above:
        await call(db.raise_reservations, name, above)
        stream.reserved_marks.update(above)
    for index in indexes:
        partition = stream.partition(index)
        partition.reserved = max(partition.reserved, stream.reserved_marks.get(index, 0))
        if partition.next_offset > partition.reserve_at:
            stream.request_reservation(partition)
    stream.spawn_flusher(segment)
    CLUSTER.set_segment_owner(name, segment_id, CLUSTER.node_id)
    return True
