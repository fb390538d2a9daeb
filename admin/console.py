"""The console: static pages at `/` (admin/static, no build step) and the JSON they poll.

    GET /api/topics?offset=&limit=&q=   a page of topics with their figures
    GET /streams/TOPIC/history           segments over time and the scale events' causes
    GET /api/groups?offset=&limit=&q=   a page of groups (classic, consumer, share), total lag
    GET /api/groups/GROUP                members, assignments, committed offsets and lag, or
                                         a share group's share-partition windows
    GET /api/nodes                       the cluster's nodes: leases, open segments led
    GET /api/nodes/events?limit=         recent segment moves and takeovers of this node
    GET /api/transactions                the transaction coordinator's transactional ids
    GET /api/bridges                     the MQTT bridges' counters (--console-bridge-metrics)
Every list is paged (limit at most MAX_PAGE) and holds only what the principal may
DESCRIBE, so 1,000 topics cost one page of work per poll.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from admin.auth import AdminSecurity
from admin.bridge import BridgeScraper
from admin.groups import describe_group, group_ids, summary
from admin.history import ScaleHistory
from core.acl.model import Operation, ResourceType
from core.cluster.events import EVENTS, KEPT
from core.cluster.view import CLUSTER
from core.groups import GroupCoordinator
from core.sharegroups.coordinator import ShareCoordinator
from core.store import StreamStore
from core.stream.stream import Stream
from core.txn import TransactionCoordinator

STATIC = Path(__file__).with_name("static")
PAGES = {"console.js": "text/javascript", "console.css": "text/css"}
MAX_PAGE = 500
MAX_LED = 50  # segments listed per node (the count covers all)


class Console:
    def __init__(
        self,
        store: StreamStore,
        groups: GroupCoordinator | None,
        security: AdminSecurity,
        transactions: TransactionCoordinator | None = None,
        shares: ShareCoordinator | None = None,
        bridge_metrics: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.groups = groups
        self.shares = shares
        self.bridges = BridgeScraper(bridge_metrics)
        self.transactions = transactions
        self.security = security
        self.history = ScaleHistory(store)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.index, methods=["GET"]),
            Route("/console/{name}", self.asset, methods=["GET"]),
            Route("/api/topics", self.topics, methods=["GET"]),
            Route("/streams/{topic}/history", self.topic_history, methods=["GET"]),
            Route("/api/groups", self.group_list, methods=["GET"]),
            Route("/api/groups/{group}", self.group, methods=["GET"]),
            Route("/api/nodes", self.nodes, methods=["GET"]),
            Route("/api/nodes/events", self.node_events, methods=["GET"]),
            Route("/api/transactions", self.transaction_list, methods=["GET"]),
            Route("/api/bridges", self.bridge_list, methods=["GET"]),
        ]

    async def index(self, request: Request) -> Response:
        await self.security.principal(request)  # the browser asks for credentials here
        return FileResponse(STATIC / "index.html", media_type="text/html")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in PAGES:
            raise HTTPException(404, f"no console file {name!r}")
        return FileResponse(STATIC / name, media_type=PAGES[name])

    async def topics(self, request: Request) -> Response:
        principal = await self.security.principal(request)
        offset, limit, query = _page(request)
        names = [
            name
            for name in sorted(self.store.streams)
            if query in name and self.security.may_describe(request, principal, name)
        ]
        rows = []
        for name in names[offset : offset + limit]:
            stream = self.store.streams.get(name)
            if stream is not None:
                rows.append(self._topic_row(name, stream))
        return JSONResponse({"total": len(names), "offset": offset, "limit": limit, "topics": rows})

    def _topic_row(self, name: str, stream: Stream) -> dict[str, Any]:
        meter = self.store.meters.get(name)
        rate = sum(load.rate for load in meter.loads(False)) if meter else 0.0
        pending = uploaded = bytes_in = bytes_out = 0
        for segment_id, segment_log in list(stream.segments.items()):
            pending += max(0, segment_log.durable_size - segment_log.uploaded_end)
            uploaded += segment_log.uploaded_end
            stats = stream.stats.get(segment_id)
            if stats is not None:
                bytes_in += stats.bytes_in
                bytes_out += stats.bytes_out
        return {
            "topic": name,
            "partitions": stream.partition_count,
            "epoch": stream.epoch,
            "open_segments": len(stream.owners()),
            "tier1_bytes": pending,
            "tier2_bytes": uploaded,
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "rate_kib_per_s": round(rate, 3),
        }

    async def topic_history(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        await self.security.require(request, Operation.DESCRIBE, topic)
        return JSONResponse(self.history.describe(topic))

    def _group_ids(self) -> list[str]:
        return [] if self.groups is None else group_ids(self.groups, self.shares)

    def _describe_group(self, group_id: str) -> dict[str, Any]:
        assert self.groups is not None
        return describe_group(self.store, self.groups, group_id, self.shares)

    def _may_describe_group(self, request: Request, principal: str, group_id: str) -> bool:
        return self.security.allowed(
            request, principal, Operation.DESCRIBE, ResourceType.GROUP, group_id
        )

    async def group_list(self, request: Request) -> Response:
        principal = await self.security.principal(request)
        offset, limit, query = _page(request)
        ids = [
            g
            for g in self._group_ids()
            if query in g and self._may_describe_group(request, principal, g)
        ]
        rows = [summary(self._describe_group(g)) for g in ids[offset : offset + limit]]
        return JSONResponse({"total": len(ids), "offset": offset, "limit": limit, "groups": rows})

    async def group(self, request: Request) -> Response:
        group_id = request.path_params["group"]
        principal = await self.security.principal(request)
        if not self._may_describe_group(request, principal, group_id):
            raise HTTPException(403, f"{principal} may not DESCRIBE group {group_id!r}")
        if group_id not in self._group_ids():
            raise HTTPException(404, f"no group {group_id!r}")
        return JSONResponse(self._describe_group(group_id))

    async def nodes(self, request: Request) -> Response:
        await self.security.require(request, Operation.DESCRIBE)
        counts = CLUSTER.open_segment_counts() if CLUSTER.enabled else {}
        led: dict[int, list[str]] = {}
        for topic, segments in sorted(CLUSTER.segment_nodes.items()):
            stream = self.store.streams.get(topic)
            # segment_nodes keeps sealed segments' last owners too: list only open ones
            open_ids = {sid for _f, _l, sid in stream.owners()} if stream is not None else set()
            for segment_id, node in sorted(segments.items()):
                if segment_id in open_ids:
                    led.setdefault(node, []).append(f"{topic}/{segment_id}")
        now = time.monotonic()
        leases = {lease.node_id: lease for lease in CLUSTER.leases}
        live = {node_id: (host, port) for node_id, host, port in CLUSTER.brokers}
        nodes = []
        for node_id in sorted(live.keys() | leases.keys()):
            lease = leases.get(node_id)
            address = live.get(node_id)
            if address is None and lease is not None:
                address = (lease.host, lease.port)
            host, port = address or ("", 0)
            nodes.append(
                {
                    "node_id": node_id,
                    "host": host,
                    "port": port,
                    "live": node_id in live,
                    "incarnation": lease.incarnation if lease else None,
                    # counted down from the last sync's reading (negative: expired)
                    "lease_expires_in_s": (
                        round(lease.left_s - (now - lease.read_at), 2) if lease else None
                    ),
                    "open_segments": counts.get(node_id, 0) if node_id in live else None,
                    "segments": led.get(node_id, [])[:MAX_LED] if node_id in live else [],
                }
            )
        return JSONResponse(
            {"cluster": CLUSTER.enabled, "this_node": CLUSTER.node_id, "nodes": nodes}
        )

    async def node_events(self, request: Request) -> Response:
        """This node's recent moves and takeovers, newest first (core/cluster/events.py)."""
        await self.security.require(request, Operation.DESCRIBE)
        try:
            limit = min(KEPT, max(1, int(request.query_params.get("limit", "50"))))
        except ValueError:
            raise HTTPException(400, "limit must be an integer") from None
        events = [event.as_json() for event in EVENTS.recent(limit)]
        return JSONResponse({"this_node": CLUSTER.node_id, "events": events})

    async def bridge_list(self, request: Request) -> Response:
        await self.security.require(request, Operation.DESCRIBE)
        return JSONResponse({"bridges": await self.bridges.describe()})

    async def transaction_list(self, request: Request) -> Response:
        """Transactional ids the principal may DESCRIBE, open ones (Ongoing, Prepare*) first."""
        principal = await self.security.principal(request)
        offset, limit, query = _page(request)
        records = [
            r
            for r in (self.transactions.list_transactions() if self.transactions else [])
            if query in r.transactional_id
            and self.security.allowed(
                request,
                principal,
                Operation.DESCRIBE,
                ResourceType.TRANSACTIONAL_ID,
                r.transactional_id,
            )
        ]
        records.sort(key=lambda r: (not _is_open(r.state), r.transactional_id))
        rows = [
            {
                "transactional_id": r.transactional_id,
                "producer_id": r.producer_id,
                "epoch": r.epoch,
                "state": r.state,
                "open": _is_open(r.state),
                "timeout_ms": r.timeout_ms,
                "start_ms": r.start_ms,
                "partitions": [f"{p.topic}-{p.partition}" for p in r.partitions],
            }
            for r in records[offset : offset + limit]
        ]
        return JSONResponse(
            {
                "total": len(records),
                "open": sum(_is_open(r.state) for r in records),
                "offset": offset,
                "limit": limit,
                "transactions": rows,
            }
        )


def _is_open(state: str) -> bool:
    return state in ("Ongoing", "PrepareCommit", "PrepareAbort")


def _page(request: Request) -> tuple[int, int, str]:
    """(offset, limit, substring) from the query string; 400 when not integers."""
    params = request.query_params
    try:
        offset = max(0, int(params.get("offset", "0")))
        limit = min(MAX_PAGE, max(1, int(params.get("limit", "100"))))
    except ValueError:
        raise HTTPException(400, "offset and limit must be integers") from None
    return offset, limit, params.get("q", "")
