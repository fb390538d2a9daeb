"""The admin/metrics HTTP endpoint (`--metrics-listen`): a tiny HTTP/1.1 server on trio.

Routes (one request per connection, `Connection: close`):
    GET  /metrics              Prometheus text format (a registry owned by this module)
    GET  /tier                 JSON: tier-1 budget use, tier-2 upload/read counters
    GET  /compaction           JSON: compaction counters, per-partition progress
    GET  /streams              JSON: the topic names
    GET  /streams/TOPIC        JSON: epochs and segments (range, state, rates, sizes)
    GET  /streams/TOPIC/chunks JSON: the tier-2 chunk map (admin/chunks.py)
    POST /streams/TOPIC/scale  JSON body {"split": id, "parts": n} or {"merge": [ids]}
Errors are JSON {"error": message} with 400 (bad request / refused scale), 404 or 405.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any
from urllib.parse import unquote

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from admin.chunks import describe_chunks
from admin.compaction import compaction_metrics, describe_compaction
from admin.moves import MOVE_TIMEOUT_S, is_move, move_segment
from core.api import ScaleResult, TopicError
from core.cluster.view import CLUSTER
from core.scaling.plan import ScaleError
from core.scaling.policy import ScalingPolicy
from core.segments.commit_times import COMMIT_TIMES
from core.store import StreamStore
from core.wal.writer import WalStats

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024
REQUEST_TIMEOUT_S = 10.0


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
                seg_labels = [name, str(record.segment_id), _state(record.sealed)]
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


def _state(sealed: bool) -> str:
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
                "state": _state(record.sealed),
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


class AdminServer:
    def __init__(self, store: StreamStore) -> None:
        self.store = store
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StoreCollector(store))

    async def serve(
        self,
        host: str,
        port: int,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, conn: trio.SocketStream) -> None:
        try:
            with trio.fail_after(REQUEST_TIMEOUT_S) as deadline:
                request = await _read_request(conn)
                if request is None:
                    return
                method, path, body = request
                parts = [unquote(p) for p in path.split("?", 1)[0].strip("/").split("/")]
                if is_move(method, parts):  # waits for tier 2: a longer deadline
                    deadline.deadline = trio.current_time() + MOVE_TIMEOUT_S
                    status, answer = await move_segment(self.store, parts[1], body)
                    status, content_type, payload = _json(status, answer)
                else:
                    status, content_type, payload = self.route(*request)
                head = (
                    f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
                )
                await conn.send_all(head.encode() + payload)
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:
            log.exception("admin request failed")
        finally:
            await conn.aclose()

    def route(self, method: str, path: str, body: bytes) -> tuple[str, str, bytes]:
        """(status line, content type, payload) for one request."""
        parts = [unquote(p) for p in path.split("?", 1)[0].strip("/").split("/")]
        if parts == ["metrics"]:
            if method != "GET":
                return _json("405 Method Not Allowed", {"error": "GET only"})
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if parts == ["tier"] and method == "GET":
            return _json("200 OK", describe_tier(self.store))
        if parts == ["compaction"] and method == "GET":
            return _json("200 OK", describe_compaction(self.store))
        if parts == ["streams"] and method == "GET":
            return _json("200 OK", {"topics": sorted(self.store.streams)})
        try:
            if len(parts) == 2 and parts[0] == "streams" and method == "GET":
                return _json("200 OK", describe_stream(self.store, parts[1]))
            if parts[2:] == ["chunks"] and parts[0] == "streams" and method == "GET":
                return _json("200 OK", describe_chunks(self.store, parts[1]))
            if len(parts) == 3 and parts[0] == "streams" and parts[2] == "scale":
                if method != "POST":
                    return _json("405 Method Not Allowed", {"error": "POST only"})
                try:
                    request = json.loads(body or b"null")
                except ValueError:
                    return _json("400 Bad Request", {"error": "body is not JSON"})
                result = scale_stream(self.store, parts[1], request)
                return _json(
                    "200 OK",
                    {
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
                    },
                )
        except TopicError as exc:
            return _json("404 Not Found", {"error": str(exc)})
        except ScaleError as exc:
            return _json("400 Bad Request", {"error": str(exc)})
        return _json("404 Not Found", {"error": f"no route {method} {path}"})


def _json(status: str, value: Any) -> tuple[str, str, bytes]:
    return status, "application/json", json.dumps(value).encode()


async def _read_request(conn: trio.SocketStream) -> tuple[str, str, bytes] | None:
    """(method, path, body) of one HTTP/1.x request, or None if malformed or too large."""
    buffer = bytearray()
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > MAX_HEAD_BYTES:
            return None
        chunk = await conn.receive_some(65536)
        if not chunk:
            return None
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    request_line = lines[0].split()
    if len(request_line) != 3:
        return None
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            if not value.strip().isdigit():
                return None
            length = int(value.strip())
    if length > MAX_BODY_BYTES:
        return None
    body = bytearray(rest)
    while len(body) < length:
        chunk = await conn.receive_some(65536)
        if not chunk:
            return None
        body += chunk
    return request_line[0].upper(), request_line[1], bytes(body[:length])
