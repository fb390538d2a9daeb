"""The admin API as an ASGI application (Starlette), served by admin/server.py.

Routes (docs/console.md describes every answer):
    GET  /metrics              Prometheus text format
    GET  /tier                 JSON: tier-1 budget use, tier-2 upload/read counters
    GET  /compaction           JSON: compaction counters, per-partition progress
    GET  /streams              JSON: the topic names
    GET  /streams/TOPIC        JSON: epochs and segments (range, state, rates, sizes)
    GET  /streams/TOPIC/chunks JSON: the tier-2 chunk map, for readers of tier 2 (chunks.py)
    POST /streams/TOPIC/scale  JSON body {"split": id, "parts": n} or {"merge": [ids]}
    POST /streams/TOPIC/move   JSON body {"segment": id, "to_node": n, "parts": 1}
Every error is JSON {"error": message}: 400 bad request or refused change, 401 missing or
wrong credentials, 403 refused by an ACL, 404, 405, 413 body too large, 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from admin.auth import AdminSecurity
from admin.chunks import describe_chunks_everywhere
from admin.compaction import describe_compaction
from admin.describe import describe_stream, describe_tier, scale_answer, scale_stream
from admin.moves import MOVE_TIMEOUT_S, move_segment
from core.acl.model import Operation
from core.api import TopicError
from core.scaling.plan import ScaleError
from core.store import StreamStore

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024


class AdminApi:
    """The endpoints, over one store; `extra_routes` lets the console add its own."""

    def __init__(
        self, store: StreamStore, registry: CollectorRegistry, security: AdminSecurity
    ) -> None:
        self.store = store
        self.registry = registry
        self.security = security

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/tier", self.tier, methods=["GET"]),
            Route("/compaction", self.compaction, methods=["GET"]),
            Route("/streams", self.streams, methods=["GET"]),
            Route("/streams/{topic}", self.stream, methods=["GET"]),
            Route("/streams/{topic}/chunks", self.chunks, methods=["GET"]),
            Route("/streams/{topic}/scale", self.scale, methods=["POST"]),
            Route("/streams/{topic}/move", self.move, methods=["POST"]),
        ]

    async def metrics(self, request: Request) -> Response:
        await self.security.require(request, Operation.DESCRIBE)
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def tier(self, request: Request) -> Response:
        await self.security.require(request, Operation.DESCRIBE)
        return JSONResponse(describe_tier(self.store))

    async def compaction(self, request: Request) -> Response:
        await self.security.require(request, Operation.DESCRIBE)
        return JSONResponse(describe_compaction(self.store))

    async def streams(self, request: Request) -> Response:
        principal = await self.security.principal(request)
        names = [
            name
            for name in sorted(self.store.streams)
            if self.security.may_describe(request, principal, name)
        ]
        return JSONResponse({"topics": names})

    async def stream(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        await self.security.require(request, Operation.DESCRIBE, topic)
        return JSONResponse(describe_stream(self.store, topic))

    async def chunks(self, request: Request) -> Response:
        """Where the topic's records are in tier 2: as good as reading them, so READ."""
        topic = request.path_params["topic"]
        await self.security.require(request, Operation.READ, topic)
        return JSONResponse(await describe_chunks_everywhere(self.store, topic))

    async def scale(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        await self.security.require(request, Operation.ALTER, topic)
        body = await read_json(request)
        return JSONResponse(scale_answer(scale_stream(self.store, topic, body)))

    async def move(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        await self.security.require(request, Operation.ALTER, topic)
        body = await read_body(request)
        try:
            with trio.fail_after(MOVE_TIMEOUT_S):  # waits for tier 2
                status, answer = await move_segment(self.store, topic, body)
        except trio.TooSlowError:
            raise HTTPException(504, f"the move took over {MOVE_TIMEOUT_S:.0f} s") from None
        return JSONResponse(answer, status_code=int(status.split()[0]))


async def read_body(request: Request) -> bytes:
    """The request body, at most MAX_BODY_BYTES (413 beyond)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
    return bytes(body)


async def read_json(request: Request) -> Any:
    body = await read_body(request)
    try:
        return json.loads(body or b"null")
    except ValueError:
        raise HTTPException(400, "body is not JSON") from None


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"{request.method} not allowed here"
    return _error(exc.status_code, message, exc.headers)


async def _topic_error(request: Request, exc: Exception) -> Response:
    return _error(404, str(exc))


async def _scale_error(request: Request, exc: Exception) -> Response:
    return _error(400, str(exc))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("admin request %s %s failed", request.method, request.url.path, exc_info=exc)
    return _error(500, f"internal error: {type(exc).__name__}")


def build_app(routes: list[BaseRoute]) -> Starlette:
    """The Starlette application: `routes`, and JSON errors for everything that fails."""
    return Starlette(
        routes=routes,
        exception_handlers={
            HTTPException: _http_error,
            TopicError: _topic_error,
            ScaleError: _scale_error,
            Exception: _unexpected,
        },
    )
