"""Planning a read on the driver: offset ranges per partition, cut into read tasks that
follow the chunks.

A task is either a run of consecutive tier-2 slices of one partition (read straight from
the object store, grouped up to `minPartitionBytes` so tiny chunks do not make tiny tasks)
or the tail of a partition not yet in tier 2 (read through the Kafka protocol). Each task
covers offsets [start, end) of one partition and returns them in offset order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from .chunkmap import PartitionMap, SliceRef, TopicMap, fetch_chunk_map, list_topics
from .errors import StreamgateSourceError
from .kafka import offsets_for_timestamp
from .metadata import chunk_map_from, list_topics_from
from .options import EARLIEST, LATEST, OffsetSpec, ReadOptions


@dataclass(frozen=True, slots=True)
class ReadTask:
    topic: str
    partition: int
    start: int
    end: int
    slices: tuple[SliceRef, ...]  # empty: the tail, through the Kafka protocol
    tier2: dict[str, Any]
    aborted: tuple[tuple[int, int, int], ...]  # read_committed: ranges to hide

    @property
    def from_tier2(self) -> bool:
        return bool(self.slices)


def resolve_topics(opts: ReadOptions) -> list[str]:
    if opts.pattern is None:
        return list(opts.topics)
    pattern = re.compile(opts.pattern)
    if opts.metadata:
        names = list_topics_from(opts.metadata)
    else:
        names = list_topics(opts.admin, opts.timeout_s, opts.access)
    return sorted(t for t in names if pattern.fullmatch(t))


def load_map(opts: ReadOptions, topic: str) -> TopicMap:
    """The chunk map from the gateway, or with `metadata` from the metadata store. With
    several nodes, the watermarks of partitions the admin node does not lead come from
    their leaders (ListOffsets), so that their tails are read too."""
    if opts.metadata:
        return chunk_map_from(opts.metadata, topic)
    m = fetch_chunk_map(opts.admin, topic, opts.timeout_s, opts.access)
    elsewhere = [p.partition for p in m.partitions if not p.led_here]
    if not elsewhere:
        return m
    args = (opts.gateway, topic, elsewhere, -1, opts.timeout_s, opts.access)
    tops = offsets_for_timestamp(*args)
    stable = offsets_for_timestamp(*args, read_committed=True)
    partitions = tuple(
        p
        if p.led_here
        else replace(
            p,
            high_watermark=max(p.high_watermark, tops.get(p.partition, -1)),
            last_stable_offset=max(p.last_stable_offset, stable.get(p.partition, -1)),
        )
        for p in m.partitions
    )
    return replace(m, partitions=partitions)


def latest(p: PartitionMap, opts: ReadOptions) -> int:
    return p.last_stable_offset if opts.read_committed else p.high_watermark


def _wanted(spec: OffsetSpec, topic: str, partition: int, default: int) -> int | None:
    """The spec's offset for a partition; None: not to be read (the JSON names the topic
    but not this partition)."""
    if isinstance(spec, int):
        return spec
    if topic not in spec:
        return default
    return spec[topic].get(partition)


def _by_time(m: TopicMap, opts: ReadOptions, timestamp: int | None) -> dict[int, int] | None:
    if timestamp is None:
        return None
    indexes = [p.partition for p in m.partitions]
    return offsets_for_timestamp(
        opts.gateway, m.topic, indexes, timestamp, opts.timeout_s, opts.access
    )


def start_offsets(m: TopicMap, opts: ReadOptions, default: int = EARLIEST) -> dict[int, int]:
    """partition -> first offset to read, from startingOffsets / startingTimestamp
    (`default` where neither says)."""
    by_time = _by_time(m, opts, opts.starting_timestamp)
    spec = opts.starting if opts.starting_given else default
    out = {}
    for p in m.partitions:
        top = latest(p, opts)
        if by_time is not None:
            found = by_time.get(p.partition, -1)
            start: int | None = top if found < 0 else found
        else:
            start = _wanted(spec, m.topic, p.partition, default)
        if start is None:
            continue
        start = p.log_start if start == EARLIEST else top if start == LATEST else start
        check_data_loss(m.topic, p, start, opts)
        out[p.partition] = min(max(start, p.log_start), top)
    return out


def check_data_loss(topic: str, p: PartitionMap, start: int, opts: ReadOptions) -> None:
    """With failOnDataLoss (the default), offsets asked for that are below the log start
    (deleted by retention or DeleteRecords) raise; without it they are skipped."""
    if opts.fail_on_data_loss and start < p.log_start:
        raise StreamgateSourceError(
            f"{topic} partition {p.partition}: offsets {start} to {p.log_start - 1} are no "
            f"longer there (log start {p.log_start}: deleted by retention or DeleteRecords); "
            "option 'failOnDataLoss' false skips them"
        )


def offset_ranges(m: TopicMap, opts: ReadOptions) -> dict[int, tuple[int, int]]:
    """partition -> [start, end) to read, from the options and the chunk map."""
    starts = start_offsets(m, opts)
    by_time = _by_time(m, opts, opts.ending_timestamp)
    out = {}
    for p in m.partitions:
        top = latest(p, opts)
        if by_time is not None:
            found = by_time.get(p.partition, -1)
            end: int | None = top if found < 0 else found
        else:
            end = _wanted(opts.ending, m.topic, p.partition, LATEST)
        if end is None or p.partition not in starts:
            continue
        end = top if end == LATEST else min(end, top)
        if starts[p.partition] < end:
            out[p.partition] = (starts[p.partition], end)
    return out


def plan_topic(m: TopicMap, opts: ReadOptions) -> list[ReadTask]:
    return plan_ranges(m, offset_ranges(m, opts), opts)


def plan_ranges(
    m: TopicMap, ranges: dict[int, tuple[int, int]], opts: ReadOptions
) -> list[ReadTask]:
    """Read tasks for offsets [start, end) of each partition in `ranges`."""
    tasks: list[ReadTask] = []
    for p in m.partitions:
        if p.partition not in ranges:
            continue
        start, end = ranges[p.partition]
        check_data_loss(m.topic, p, start, opts)
        start = max(start, p.log_start)
        if start >= end:
            continue
        aborted = tuple(a for a in p.aborted if a[2] >= start and a[1] < end)
        aborted = aborted if opts.read_committed else ()
        group: list[SliceRef] = []
        size = 0
        for s in p.slices:
            if s.last < start or s.first >= end:
                continue
            group.append(s)
            size += s.byte_length
            if size >= opts.min_partition_bytes:
                tasks.append(_slice_task(m, p, group, start, end, aborted))
                group, size = [], 0
        if group:
            tasks.append(_slice_task(m, p, group, start, end, aborted))
        tail_start = max(start, p.tier2_end)
        if tail_start < end:
            tasks.append(ReadTask(m.topic, p.partition, tail_start, end, (), m.tier2, aborted))
    return tasks


def _slice_task(
    m: TopicMap,
    p: PartitionMap,
    group: list[SliceRef],
    start: int,
    end: int,
    aborted: tuple[tuple[int, int, int], ...],
) -> ReadTask:
    first, last = max(start, group[0].first), min(end, group[-1].last + 1)
    return ReadTask(m.topic, p.partition, first, last, tuple(group), m.tier2, aborted)


def plan(opts: ReadOptions) -> list[ReadTask]:
    """Every read task of a batch read, topics in name order, each partition's tasks in
    offset order."""
    topics = resolve_topics(opts)
    if opts.pattern is None and not topics:
        raise StreamgateSourceError("option 'topic': no topic named")
    tasks: list[ReadTask] = []
    for topic in topics:
        tasks.extend(plan_topic(load_map(opts, topic), opts))
    return tasks
