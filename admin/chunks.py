"""The chunk map of a topic for readers that go straight to tier 2: `GET /streams/TOPIC/chunks`.

A reader such as the Spark source (spark_source/) reads a topic's history from the object
store itself and only the tail not yet in tier 2 through the Kafka protocol. This route tells
it where everything is, as one JSON document taken from the node's in-memory index:

    {"topic": ..., "tier2": {"kind": "folder", "root": ...}
                         | {"kind": "s3", "bucket", "prefix", "endpoint", "region"},
     "partitions": [{"partition", "log_start", "high_watermark", "last_stable_offset",
                     "tier2_end",     # first offset not in a tier-2 slice
                     "slices": [[object key, first offset, last offset,
                                 byte start, byte length, max timestamp], ...],
                     "aborted": [[producer id, first offset, last offset], ...]}]}

With several nodes a node knows only the partitions it leads in memory; for the others
(`"leader": false`) the route reads the shared metadata store: their tier-2 slices, log
start and aborted ranges, with `high_watermark` and `last_stable_offset` at their tier-2
end (the tail is at their leader, which a reader asks through the Kafka protocol).

Slices are in offset order; a slice may start below `log_start` (retention and
DeleteRecords raise it inside a chunk): readers skip those offsets. Aborted ranges cover
the whole partition (they are small: one entry per aborted transaction).
"""

from __future__ import annotations

from typing import Any

from core.api import TopicError
from core.cluster.view import CLUSTER
from core.segments.objectstore import LocalFolderStore, ObjectStore, S3Store
from core.store import StreamStore


def describe_tier2(store: ObjectStore | None) -> dict[str, Any]:
    """Where tier 2 is, enough for a reader to open it (credentials are never included)."""
    if isinstance(store, LocalFolderStore):
        return {"kind": "folder", "root": store.root}
    if isinstance(store, S3Store):
        return {
            "kind": "s3",
            "bucket": store.bucket,
            "prefix": store.prefix,
            "endpoint": store.endpoint_url,
            "region": store.region,
        }
    return {"kind": "none"}


def describe_chunks(store: StreamStore, name: str) -> dict[str, Any]:
    """The chunk map of topic `name`; TopicError if the topic is unknown."""
    stream = store.streams.get(name)
    if stream is None or stream.deleted:
        raise TopicError(3, f"no topic {name!r}")
    partitions = []
    for index in range(stream.partition_count):
        if not stream.has_partition(index):
            continue
        partition = stream.partition(index)
        slices: list[list[Any]] = []
        tier2_end = partition.log_start_offset
        for s in partition.slices():
            chunk = stream.chunks.get(s.chunk_id)
            if chunk is None:  # being swapped by compaction right now: the rest goes
                break  # through the Kafka protocol, never a gap
            slices.append(
                [
                    chunk.object_key,
                    s.first_offset,
                    s.last_offset,
                    s.byte_start,
                    s.byte_length,
                    s.max_timestamp,
                ]
            )
            tier2_end = max(tier2_end, s.last_offset + 1)
        txns = partition.txns
        aborted = (
            []
            if txns is None
            else [[a.producer_id, a.first_offset, a.last_offset] for a in txns.aborted]
        )
        partitions.append(
            {
                "partition": index,
                "log_start": partition.log_start_offset,
                "high_watermark": partition.high_watermark,
                "last_stable_offset": partition.last_stable_offset,
                "tier2_end": tier2_end,
                "slices": slices,
                "aborted": aborted,
            }
        )
    return {
        "topic": name,
        "tier2": describe_tier2(store.object_store),
        "partitions": partitions,
    }


async def describe_chunks_everywhere(store: StreamStore, name: str) -> dict[str, Any]:
    """describe_chunks, every partition covered on any node of several: each partition says
    whether this node leads it, and those led elsewhere come from the metadata store."""
    doc = describe_chunks(store, name)
    elsewhere = {
        p["partition"]: p for p in doc["partitions"] if not CLUSTER.is_local(name, p["partition"])
    }
    for p in doc["partitions"]:
        p["leader"] = p["partition"] not in elsewhere
    if not elsewhere:
        return doc
    chunks = await store.worker.call(store.metadata.load_chunks, name)
    starts = await store.worker.call(store.metadata.load_log_starts, name)
    aborted = await store.worker.call(store.metadata.load_aborted_txns, name)
    found: dict[int, list[list[Any]]] = {index: [] for index in elsewhere}
    for chunk in chunks:
        for s in chunk.slices:
            if s.partition in found:
                found[s.partition].append(
                    [
                        chunk.object_key,
                        s.first_offset,
                        s.last_offset,
                        s.byte_start,
                        s.byte_length,
                        s.max_timestamp,
                    ]
                )
    for index, p in elsewhere.items():
        slices = sorted(found[index], key=lambda s: int(s[1]))
        log_start = int(starts.get(index, 0))
        end = max([log_start, *(int(s[2]) + 1 for s in slices)])
        p.update(
            log_start=log_start,
            high_watermark=end,
            last_stable_offset=end,
            tier2_end=end,
            slices=slices,
            aborted=[
                [a.producer_id, a.first_offset, a.last_offset]
                for a in aborted
                if a.partition == index
            ],
        )
    return doc
