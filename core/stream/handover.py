"""Moving segments between nodes (docs/several-nodes.md "Placement and moving segments").

A move is a scale event whose successors are owned by other nodes. The giving node:

1. stops serving the sealed segments' partitions (`CLUSTER.moving`: NOT_LEADER_OR_FOLLOWER,
   retriable), lets their queued appends become durable and rolls their last file;
2. waits until tier 2 has every byte of them (the uploader commits each chunk with the
   producer states of its partitions), then saves the producer states of the moved
   partitions once more, so the database has them as of the seal;
3. commits the event (`PostgresMetadataStore.hand_over`: a compare-and-set on the sealed
   segments' owner, successors with their new owners) and switches in memory, as any
   scale event. From then on it refuses those partitions for good.

The taking node's sync (`apply_cluster_segments`) sees open segments it owns that it has
not opened: it reloads those partitions from the database (tier-2 chunks, log starts,
producer states), so offsets continue densely after the predecessors' and idempotent
producers keep their sequences, opens the successors' logs and only then starts leading
the partitions. History before the move is read from tier 2.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from ..api import ScaleResult
from ..cluster.events import EVENTS, ClusterEvent
from ..cluster.view import CLUSTER
from ..metadata import SegmentRecord
from ..partition import Partition
from ..scaling.plan import ScaleError
from .ownership import Ownership, scale

if TYPE_CHECKING:
    from ..metadata.postgres import PostgresMetadataStore
    from .stream import Stream

log = logging.getLogger(__name__)

Call = Callable[..., Awaitable[Any]]


@dataclass(slots=True)
class MoveTimings:
    """Seconds from the move request: sealed data durable and in tier 2, committed."""

    uploaded_s: float = 0.0
    committed_s: float = 0.0


async def hand_over(
    stream: Stream,
    db: PostgresMetadataStore,
    call: Call,
    seal: Sequence[int],
    new_ranges: Sequence[tuple[int, int]],
    owners: Sequence[int],
    timeout_s: float = 60.0,
    cause: str = "requested",
) -> tuple[ScaleResult, MoveTimings]:
    """Seal this node's open segments `seal` and open successors owning `new_ranges`,
    the i-th owned by node `owners[i]` (this node included). `call` runs a blocking
    metadata call off the event loop. ScaleError when refused (nothing changed). `cause`
    is what the console's list of recent moves says."""
    started = time.monotonic()
    name, me = stream.name, CLUSTER.node_id
    if not CLUSTER.enabled:
        raise ScaleError("moving segments needs several active nodes (--multi-node true)")
    if len(owners) != len(new_ranges):
        raise ScaleError("one owner node per successor range")
    live = {node for node, _h, _p in CLUSTER.brokers}
    for node in owners:
        if node not in live:
            raise ScaleError(f"node {node} is not a live node (live: {sorted(live)})")
    ranges = {sid: (first, last) for first, last, sid in stream.owners()}
    partitions: set[int] = set()
    for sid in seal:
        if sid not in ranges:
            raise ScaleError(f"segment {sid} is not an open segment of {name!r}")
        owner = CLUSTER.segment_nodes.get(name, {}).get(sid, me)
        if owner != me:
            raise ScaleError(f"segment {sid} of {name!r} is owned by node {owner}, not {me}")
        partitions.update(range(ranges[sid][0], ranges[sid][1] + 1))
    if partitions & CLUSTER.moving.get(name, set()):
        raise ScaleError(f"a move of {name!r} is already under way")
    moving = CLUSTER.moving.setdefault(name, set())
    moving |= partitions
    CLUSTER.touch(name)
    timings = MoveTimings()
    try:
        with trio.fail_after(timeout_s):
            for sid in seal:  # queued appends become durable; the last file is rolled
                segment = stream.segments[sid]
                await segment.wait_idle()
                segment.request_roll()
            while any(stream.segments[sid].unuploaded_bytes for sid in seal):
                await trio.sleep(0.01)  # the tier manager uploads the rolled files
        timings.uploaded_s = time.monotonic() - started
        await call(db.save_producer_states, name, stream.producer_snapshots(partitions))
        if stream.deleted:
            raise ScaleError(f"topic {name!r} was deleted")
        nodes = list(owners)

        def commit(successors: list[SegmentRecord]) -> None:
            db.hand_over(name, list(seal), successors, nodes, me)

        try:
            result = scale(stream, seal, new_ranges, commit)
        except ValueError as exc:  # refused: the transaction rolled back
            raise ScaleError(str(exc)) from None
        except Exception as exc:  # outcome unknown (e.g. the connection dropped)
            await _settle(stream, db, call, seal)
            raise ScaleError(f"hand-over of {name!r} failed: {exc}") from None
        timings.committed_s = time.monotonic() - started
    except trio.TooSlowError:
        raise ScaleError(f"sealed data of {name!r} not in tier 2 after {timeout_s} s") from None
    finally:
        moving -= partitions
        if not moving:
            CLUSTER.moving.pop(name, None)
    # From here on other nodes own the successors: this node's view says so at once.
    owner_of = dict(CLUSTER.segment_nodes.get(name, {}))
    for record, node in zip(result.successors, owners, strict=True):
        owner_of[record.segment_id] = node
    CLUSTER.set_segments(
        name, [(sid, f, last, owner_of.get(sid, me)) for f, last, sid in stream.owners()]
    )
    CLUSTER.touch(name)
    EVENTS.record(
        ClusterEvent(
            "move",
            name,
            tuple(seal),
            me,
            tuple(owners),
            cause,
            tuple(s.segment_id for s in result.successors),
            round(timings.committed_s, 4),
        )
    )
    log.info(
        "topic %s: segments %s handed over to %s as %s (tier 2 after %.3f s, commit %.3f s)",
        name,
        list(seal),
        list(owners),
        [s.segment_id for s in result.successors],
        timings.uploaded_s,
        timings.committed_s,
    )
    return result, timings


async def _settle(
    stream: Stream, db: PostgresMetadataStore, call: Call, seal: Sequence[int]
) -> None:
    """After a commit whose outcome is unknown, keep the partitions fenced until the
    database says: if it committed, bring this node's view up to it (the sealed data is
    all in tier 2, so successors kept here are reloaded from the database)."""
    while True:
        try:
            rows = await call(db.load_segments, stream.name)
            break
        except Exception as exc:  # still unreachable: the lease decides this node's fate
            log.warning("topic %s: hand-over outcome unknown yet: %s", stream.name, exc)
            await trio.sleep(0.5)
    if any(r.segment.sealed for r in rows if r.segment.segment_id in set(seal)):
        await _refresh(stream, db, call)  # also records the successors' owners
        CLUSTER.touch(stream.name)  # leaders: from the next sync


async def apply_cluster_segments(
    streams: dict[str, Stream], db: PostgresMetadataStore, call: Call
) -> None:
    """The sync loop: read every open segment (topic, id, first, last, owner), open the
    segments other nodes handed to this one, then publish the owners in CLUSTER (unless
    this node changed a topic's owners itself since the read)."""
    versions = {name: CLUSTER.version(name) for name in streams}
    rows = await call(db.open_segments)
    by_topic: dict[str, list[tuple[int, int, int, int]]] = {}
    for s in rows:
        by_topic.setdefault(s.topic, []).append(
            (s.segment_id, s.first_partition, s.last_partition, s.owner_node)
        )
    for name, segments in by_topic.items():
        stream = streams.get(name)
        if stream is None or stream.deleted or name in CLUSTER.moving:
            continue
        if {sid for _f, _l, sid in stream.owners()} != {sid for sid, *_ in segments}:
            try:
                await _refresh(stream, db, call)
            except Exception as exc:  # database unreachable: try again on the next sync
                log.warning("topic %s: taking over segments failed: %s", name, exc)
                continue
        if name in versions and CLUSTER.version(name) == versions[name]:  # no local change
            CLUSTER.set_segments(name, segments)


async def _refresh(stream: Stream, db: PostgresMetadataStore, call: Call) -> None:
    """Bring the stream's segments up to the database's; take over the partitions of the
    open segments this node owns but has not opened (handed over by another node)."""
    name, me = stream.name, CLUSTER.node_id
    rows = await call(db.load_segments, name)
    open_here = {sid for _f, _l, sid in stream.owners()}
    taken = [
        r.segment
        for r in rows
        if not r.segment.sealed and r.owner_node == me and r.segment.segment_id not in open_here
    ]
    partitions = {p for r in taken for p in range(r.first_partition, r.last_partition + 1)}
    chunks, producers, log_starts, aborted, compacted, open_txns = [], [], {}, [], {}, []
    reserved: dict[int, int] = {}
    if partitions:
        reserved = await call(db.load_reservations, name)
        chunks = await call(db.load_chunks, name)
        producers = await call(db.load_producer_states, name)
        log_starts = await call(db.load_log_starts, name)
        aborted = await call(db.load_aborted_txns, name)
        compacted = await call(db.load_compacted_ends, name)
        open_txns = await call(db.load_open_txns, name)
    if stream.deleted or stream.spawn_flusher is None:
        return
    # Synchronous from here: no append or read runs in between.
    known = {r.segment_id: r for r in stream.record.segments}
    now = time.monotonic()
    for record, _owner in rows:
        mine = known.get(record.segment_id)
        if mine is None:
            stream.record.segments.append(record)
            segment = stream.new_log(record.segment_id)
            stream.add_segment(record.segment_id, segment, now)
            stream.spawn_flusher(segment)
            if record.sealed:
                segment.seal()
        elif record.sealed and not mine.sealed:
            mine.sealed = True
            stream.segments[record.segment_id].seal()
    for record, owner in rows:
        if owner is not None:
            CLUSTER.set_segment_owner(name, record.segment_id, owner)
    ownership = Ownership()
    for record in stream.record.segments:
        if not record.sealed:
            ownership.add(record.first_partition, record.last_partition, record.segment_id)
    stream.ownership = ownership
    for index in partitions:  # the previous owner raised them: start from its marks
        if index in reserved:
            stream.reserved_marks[index] = max(stream.reserved_marks.get(index, 0), reserved[index])
    for index in sorted(partitions):
        partition = load_partition(stream, index, chunks, producers, log_starts.get(index, 0))
        partition.compacted_end = max(partition.compacted_end, compacted.get(index, 0))
        if partition.next_offset > partition.reserve_at:
            stream.request_reservation(partition)
        for a in aborted:
            if a.partition == index:
                partition.restore_aborted(a.producer_id, a.first_offset, a.last_offset)
        for t in open_txns:  # a transaction open across the move keeps its records hidden
            if t.partition == index:
                partition.restore_open_txn(t.producer_id, t.first_offset)
    if taken:
        EVENTS.record(
            ClusterEvent(
                "received",
                name,
                tuple(r.segment_id for r in taken),
                None,
                (me,),
                f"handed over by another node (partitions {min(partitions)}-{max(partitions)})",
            )
        )
        log.info(
            "topic %s: took over segments %s (partitions %d-%d)",
            name,
            [r.segment_id for r in taken],
            min(partitions),
            max(partitions),
        )


def load_partition(
    stream: Stream,
    index: int,
    chunks: list[Any],
    producers: list[Any],
    log_start: int,
) -> Partition:
    """A fresh partition from the database: its tier-2 slices, log start and producers."""
    partition = stream.reset_partition(index)
    for chunk in chunks:
        stream.chunks.setdefault(chunk.chunk_id, chunk)
        for s in chunk.slices:
            if s.partition == index:
                partition.add_slice(s)
    partition.log_start_offset = log_start
    for saved in producers:
        if saved.partition == index:
            partition.restore_producer(saved.producer_id, saved.epoch, saved.batches)
    partition.next_offset = max(partition.next_offset, log_start)
    partition.high_watermark = partition.next_offset
    partition.forget_producers_below(log_start)
    return partition
