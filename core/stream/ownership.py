"""Which open segment owns each partition, and scale events that change it.

The open segments (the current epoch) own contiguous ranges of the partitions. A scale
event seals segments and opens successors: committed in metadata first, then switched in
memory synchronously, i.e. between two appends. Sealed segments stay readable; offsets and
producer state are per partition and simply continue.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..api import ScaleResult
from ..metadata import SegmentRecord
from ..scaling.crash import crash_point
from ..scaling.plan import ScaleError, check_scale

if TYPE_CHECKING:
    from .stream import Stream


class Ownership:
    """(first partition, last partition, segment id) of the open segments, sorted."""

    def __init__(self) -> None:
        self._owners: list[tuple[int, int, int]] = []

    def add(self, first: int, last: int, segment_id: int) -> None:
        bisect.insort(self._owners, (first, last, segment_id))

    def owner_of(self, index: int) -> int:
        i = bisect.bisect_right(self._owners, (index, 2**31, 2**63)) - 1
        first, last, segment_id = self._owners[i]
        assert first <= index <= last, "open segments must cover every partition"
        return segment_id

    def ranges(self) -> list[tuple[int, int, int]]:
        return list(self._owners)

    def tail(self) -> int:
        return self._owners[-1][2]

    def replace(self, sealed: set[int], successors: Sequence[SegmentRecord]) -> None:
        self._owners = sorted(
            [o for o in self._owners if o[2] not in sealed]
            + [(s.first_partition, s.last_partition, s.segment_id) for s in successors]
        )

    def extend_tail(self, last: int) -> None:
        first, _last, segment_id = self._owners[-1]
        self._owners[-1] = (first, last, segment_id)


def scale(
    stream: Stream,
    seal: Sequence[int],
    new_ranges: Sequence[tuple[int, int]],
    commit: Callable[[list[SegmentRecord]], None] | None = None,
) -> ScaleResult:
    """Seal open segments `seal` and open successors owning `new_ranges` (epoch + 1).

    Validated first (ScaleError: not open, not adjacent, ranges not tiling the sealed
    partitions, not a split or merge). The successors' files are created, then one
    metadata transaction commits the event; only then the switch happens in memory,
    synchronously, so every append queued before it went to the old segments and every
    later one goes to the successors. The sealed logs drain their queues and stay open
    for reads; successors flush only after their predecessors drained. A crash before
    the commit leaves orphan files that `recovery.open_segments` removes.

    `commit` replaces the metadata transaction (core/stream/handover.py: successors owned
    by other nodes, a compare-and-set on the sealed segments' owner); it also allows a
    "move" (one successor with the sealed segment's range).
    """
    if stream.metadata is None or stream.spawn_flusher is None:
        raise ScaleError("stream is not attached to a store")
    if stream.deleted:
        raise ScaleError("stream is deleted")
    kind, ranges = check_scale(
        stream.ownership.ranges(), seal, new_ranges, allow_move=commit is not None
    )
    next_id = max(stream.segments) + 1
    epoch = stream.epoch + 1
    successors = [
        SegmentRecord(next_id + i, epoch, first, last) for i, (first, last) in enumerate(ranges)
    ]
    predecessors = [stream.segments[segment_id] for segment_id in seal]
    logs = [stream.new_log(s.segment_id, predecessors) for s in successors]
    crash_point("scale-before-commit")
    try:
        if commit is None:
            stream.metadata.scale_segments(stream.name, list(seal), successors)
        else:
            commit(successors)
    except BaseException:
        for segment_log in logs:
            segment_log.close()  # no file exists before the first write
        raise
    crash_point("scale-after-commit")
    # From here on synchronous: no append can run between the seal and the switch.
    now = time.monotonic()
    for segment_log in predecessors:
        segment_log.seal()
    sealed = set(seal)
    for seg in stream.record.segments:
        if seg.segment_id in sealed:
            seg.sealed = True
    stream.record.segments.extend(successors)
    for record, segment_log in zip(successors, logs, strict=True):
        stream.add_segment(record.segment_id, segment_log, now)
        stream.spawn_flusher(segment_log)
    stream.ownership.replace(sealed, successors)
    stream.scale_events[kind] = stream.scale_events.get(kind, 0) + 1
    return ScaleResult(kind, epoch, list(seal), successors)


def grow_partitions(stream: Stream, count: int) -> None:
    """Extend the tail segment to own partitions up to `count` - 1 (in memory only: the
    metadata store must have recorded the same change first)."""
    assert count > stream.record.partitions, "partition counts only grow"
    segment_id = stream.ownership.tail()
    stream.ownership.extend_tail(count - 1)
    for seg in stream.record.segments:
        if seg.segment_id == segment_id:
            seg.last_partition = count - 1
    stream.record.partitions = count
