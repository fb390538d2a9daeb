"""Compaction figures for the admin HTTP server: `GET /compaction` and `/metrics`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from core.store import StreamStore

_COUNTERS = {
    "runs": "Compaction runs over a topic that cleaned something",
    "chunks_rewritten": "Tier-2 chunks replaced by compacted ones",
    "bytes_read": "Tier-2 bytes read by compaction",
    "bytes_written": "Bytes of compacted chunks written",
    "bytes_reclaimed": "Tier-2 bytes freed by compaction",
    "records_removed": "Records removed by compaction (tombstones included)",
    "tombstones_removed": "Tombstones removed after delete.retention.ms",
    "aborted": "Chunk swaps abandoned because the chunk went away meanwhile",
    "garbage_objects_deleted": "Unreferenced objects deleted at start (left by a crash)",
}
_GAUGES = {
    "last_run_lag_seconds": "How long the oldest dirty data had waited when the last run began",
    "last_run_seconds": "Duration of the last compaction run",
}


def describe_compaction(store: StreamStore) -> dict[str, Any]:
    compactor = store.compactor
    return {} if compactor is None else compactor.describe()


def compaction_metrics(store: StreamStore) -> Iterator[Metric]:
    described = describe_compaction(store)
    if not described:
        return
    for key, help_text in _COUNTERS.items():
        yield CounterMetricFamily(f"streamgate_compaction_{key}", help_text, value=described[key])
    for key, help_text in _GAUGES.items():
        yield GaugeMetricFamily(f"streamgate_compaction_{key}", help_text, value=described[key])
    dirty = GaugeMetricFamily(
        "streamgate_compaction_dirty_ratio",
        "Dirty bytes / cleanable bytes of a compacted partition",
        labels=["topic", "partition"],
    )
    for topic, partitions in described["topics"].items():
        for index, state in partitions.items():
            dirty.add_metric([topic, index], state["dirty_ratio"])
    yield dirty
