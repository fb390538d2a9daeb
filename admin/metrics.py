"""Prometheus metrics of the admin endpoint (`GET /metrics`): read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from admin.compaction import compaction_metrics
from admin.describe import describe_tier, segment_state
from admin.groups import describe_group, group_ids
from core.groups import GroupCoordinator
from core.segments.commit_times import COMMIT_TIMES
from core.segments.readahead import AHEAD
from core.store import StreamStore


def store_registry(store: StreamStore, groups: GroupCoordinator | None = None) -> CollectorRegistry:
    """A registry of its own (not the process-wide default) holding the store's collector
    and, with a group coordinator, the consumer groups' lag."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store))
    if groups is not None:
        registry.register(GroupLagCollector(store, groups))
    return registry


class GroupLagCollector(Collector):
    """Per group and partition: committed offset and lag behind the high watermark (only
    partitions with a committed offset; the console shows the others)."""

    def __init__(self, store: StreamStore, groups: GroupCoordinator) -> None:
        self.store = store
        self.groups = groups

    def collect(self) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        lag = GaugeMetricFamily(
            "streamgate_group_lag",
            "Records from the committed offset to the end",
            labels=labels,
        )
        committed = GaugeMetricFamily(
            "streamgate_group_committed_offset", "The group's committed offset", labels=labels
        )
        members = GaugeMetricFamily(
            "streamgate_group_members", "Members of the group", labels=["group"]
        )
        for group_id in group_ids(self.groups):
            described = describe_group(self.store, self.groups, group_id)
            members.add_metric([group_id], len(described["members"]))
            for row in described["offsets"]:
                if row["committed"] is None:
                    continue
                row_labels = [group_id, row["topic"], str(row["partition"])]
                committed.add_metric(row_labels, row["committed"])
                if row["lag"] is not None:
                    lag.add_metric(row_labels, row["lag"])
        yield from (lag, committed, members)


class StoreCollector(Collector):
    """Reads the store's counters at scrape time: nothing is updated on the data path."""

    def __init__(self, store: StreamStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        open_segments = GaugeMetricFamily(
            "streamgate_stream_open_segments",
            "Open segments of the stream (its current epoch): the scaling signal",
            labels=["topic"],
        )
        epoch = GaugeMetricFamily("streamgate_stream_epoch", "Current epoch", labels=["topic"])
        scale_events = CounterMetricFamily(
            "streamgate_scale_events",
            "Scale events applied since start",
            labels=["topic", "kind"],
        )
        labels = ["topic", "segment", "state"]
        bytes_in = CounterMetricFamily(
            "streamgate_segment_bytes_in", "Batch bytes appended since start", labels=labels
        )
        records_in = CounterMetricFamily(
            "streamgate_segment_records_in", "Records appended since start", labels=labels
        )
        bytes_out = CounterMetricFamily(
            "streamgate_segment_bytes_out", "Batch bytes fetched since start", labels=labels
        )
        for name, stream in list(self.store.streams.items()):
            open_segments.add_metric([name], len(stream.owners()))
            epoch.add_metric([name], stream.epoch)
            for kind, count in stream.scale_events.items():
                scale_events.add_metric([name, kind], count)
            for record in list(stream.record.segments):
                stats = stream.stats.get(record.segment_id)
                if stats is None:
                    continue
                seg_labels = [name, str(record.segment_id), segment_state(record.sealed)]
                bytes_in.add_metric(seg_labels, stats.bytes_in)
                records_in.add_metric(seg_labels, stats.records_in)
                bytes_out.add_metric(seg_labels, stats.bytes_out)
        yield from (open_segments, epoch, scale_events, bytes_in, records_in, bytes_out)
        yield from _tier_metrics(describe_tier(self.store))
        yield from compaction_metrics(self.store)
        buckets, total_s = COMMIT_TIMES.cumulative()
        yield HistogramMetricFamily(
            "streamgate_wal_commit_seconds",
            "Tier-1 group commits (write + fsync of the batches an acknowledgement waits for)",
            buckets=buckets,
            sum_value=total_s,
        )
        yield from _read_ahead_metrics()


def _read_ahead_metrics() -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "streamgate_tier1_read_ahead_bytes",
        "Tier-1 bytes read ahead for consumers behind the tail, held in memory",
        value=AHEAD.size,
    )
    yield CounterMetricFamily(
        "streamgate_tier1_read_ahead_blocks",
        "Read-ahead blocks (1 MiB of a tier-1 log) whose read was started since start",
        value=AHEAD.started,
    )
    yield CounterMetricFamily(
        "streamgate_tier1_read_ahead_hits",
        "Batches a Fetch got from read-ahead memory since start",
        value=AHEAD.hits,
    )


def _tier_metrics(tier: dict[str, Any]) -> Iterator[Metric]:
    gauges = {
        "tier1_pending_bytes": "Tier-1 bytes not yet confirmed in tier 2",
        "tier1_budget_bytes": "Pending bytes at which producers get a retriable error",
        "tier1_retained_bytes": "Uploaded bytes still kept in tier 1 for fast reads",
        "tier2_cache_bytes": "Bytes of tier-2 slices in the read cache",
        "tier2_upload_lag_p50_seconds": "Median time from a file's first entry to its chunk",
        "tier2_upload_lag_p99_seconds": "p99 time from a file's first entry to its chunk",
    }
    for key, help_text in gauges.items():
        yield GaugeMetricFamily(f"streamgate_{key}", help_text, value=tier[key] or 0)
    counters = {
        "chunks_uploaded": "Chunks confirmed in tier 2 since start",
        "bytes_uploaded": "Chunk bytes confirmed in tier 2 since start",
        "upload_errors": "Failed chunk uploads (retried with backoff)",
        "chunks_deleted": "Chunks deleted by retention or DeleteRecords",
        "cache_hits": "Tier-2 slice reads served from the cache",
        "cache_misses": "Tier-2 slice reads that needed a ranged GET",
        "bytes_fetched": "Bytes fetched from tier 2 with ranged GETs",
        "read_errors": "Tier-2 reads that failed",
    }
    for key, help_text in counters.items():
        yield CounterMetricFamily(f"streamgate_tier2_{key}", help_text, value=tier[key])
