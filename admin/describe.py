"""The JSON the admin API answers with: a stream's epochs and segments, tier figures,
and scale requests applied to the store."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from core.api import ScaleResult, TopicError
from core.cluster.view import CLUSTER
from core.scaling.plan import ScaleError
from core.scaling.policy import ScalingPolicy
from core.store import StreamStore
from core.wal.writer import WalStats


def describe_tier(store: StreamStore) -> dict[str, Any]:
    """Tier-1 budget use and tier-2 counters, as JSON-ready values."""
    tier = store.tier
    p50, p99 = tier.upload_lag_quantiles()
    return {
        "tier2": tier.object_store.description,
        "tier1_pending_bytes": tier.usage.pending,
        "tier1_budget_bytes": tier.usage.budget,
        "tier1_retained_bytes": tier.retained_bytes,
        "tier2_cache_bytes": tier.cache.size,
        "tier2_upload_lag_p50_seconds": None if math.isnan(p50) else round(p50, 4),
        "tier2_upload_lag_p99_seconds": None if math.isnan(p99) else round(p99, 4),
        "outage": tier.outage_since is not None,
        **asdict(tier.stats),
        "wal": "local" if store.wal is None else "object",
        **({} if store.wal is None else _wal_stats(store.wal.stats)),
    }


def _wal_stats(stats: WalStats) -> dict[str, Any]:
    """--wal object: objects written and folded, time in PUTs and in metadata commits."""
    return {
        "wal_objects": stats.objects,
        "wal_bytes": stats.bytes,
        "wal_put_seconds": round(stats.put_seconds, 4),
        "wal_commit_seconds": round(stats.commit_seconds, 4),
        "wal_objects_folded": stats.folded,
    }


def segment_state(sealed: bool) -> str:
    return "sealed" if sealed else "open"


def describe_stream(store: StreamStore, name: str) -> dict[str, Any]:
    """The JSON description of a topic's stream; TopicError if unknown."""
    stream = store.streams.get(name)
    if stream is None:
        raise TopicError(3, f"no topic {name!r}")
    meter = store.meters.get(name)
    kib = {load.segment_id: load.rate for load in meter.loads(False)} if meter else {}
    events = {load.segment_id: load.rate for load in meter.loads(True)} if meter else {}
    segments = []
    for record in sorted(stream.record.segments, key=lambda s: s.segment_id):
        segment_log = stream.segments.get(record.segment_id)
        stats = stream.stats.get(record.segment_id)
        segments.append(
            {
                "segment_id": record.segment_id,
                "epoch": record.epoch,
                "first_partition": record.first_partition,
                "last_partition": record.last_partition,
                "state": segment_state(record.sealed),
                "node": CLUSTER.segment_nodes.get(name, {}).get(record.segment_id)
                if CLUSTER.enabled
                else None,
                "size_bytes": segment_log.durable_size if segment_log else 0,
                "bytes_in": stats.bytes_in if stats else 0,
                "records_in": stats.records_in if stats else 0,
                "bytes_out": stats.bytes_out if stats else 0,
                "rate_kib_per_s": round(kib.get(record.segment_id, 0.0), 3),
                "rate_events_per_s": round(events.get(record.segment_id, 0.0), 3),
            }
        )
    policy = ScalingPolicy.from_configs(stream.record.configs)
    return {
        "topic": name,
        "partitions": stream.partition_count,
        "epoch": stream.epoch,
        "open_segments": len(stream.owners()),
        "policy": {
            "policy": policy.kind,
            "target_rate": policy.target,
            "scale_factor": policy.factor,
            "min_segments": policy.min_segments,
        },
        "scale_events": dict(stream.scale_events),
        "segments": segments,
    }


def scale_stream(store: StreamStore, name: str, body: Any) -> ScaleResult:
    """Apply a scale request body; ScaleError / TopicError when refused."""
    if not isinstance(body, dict):
        raise ScaleError('expected {"split": id, "parts": n} or {"merge": [ids]}')
    if "split" in body:
        parts = body.get("parts", 2)
        if not isinstance(body["split"], int) or not isinstance(parts, int):
            raise ScaleError("split and parts must be integers")
        return store.split(name, body["split"], parts)
    if "merge" in body:
        ids = body["merge"]
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ScaleError("merge must be a list of segment ids")
        return store.merge(name, ids)
    raise ScaleError('expected {"split": id, "parts": n} or {"merge": [ids]}')


def scale_answer(result: ScaleResult) -> dict[str, Any]:
    """The JSON answer to an applied split or merge."""
    return {
        "kind": result.kind,
        "epoch": result.epoch,
        "sealed": result.sealed,
        "successors": [
            {
                "segment_id": s.segment_id,
                "first_partition": s.first_partition,
                "last_partition": s.last_partition,
            }
            for s in result.successors
        ],
    }
