"""Client quotas on Produce and Fetch, answered the Kafka way (KIP-219): the response goes
out at once with `throttle_time_ms`, and the connection is muted (not read from) for that
long, so even a client that ignores the field is held to the rate."""

from __future__ import annotations

import struct
from collections.abc import Awaitable
from contextvars import ContextVar
from typing import Any

import trio

from core.acl.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from gateway.handlers.context import PRINCIPAL, GatewayContext, Handler, Response
from kafkawire.apis import ApiKey
from kafkawire.codec import RequestHeader

_I32 = struct.Struct(">i")


class Mute:
    """A connection's mute deadline (trio clock); the reader waits for it before reading."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0

    def extend(self, seconds: float) -> None:
        self.until = max(self.until, trio.current_time() + seconds)

    async def wait(self) -> None:
        if self.until > trio.current_time():
            await trio.sleep_until(self.until)


# Set per connection by the server; request tasks share the connection's object.
MUTE: ContextVar[Mute | None] = ContextVar("mute", default=None)


def _user(principal: str) -> str:
    return principal.partition(":")[2]


def _throttle(ctx: GatewayContext, key: str, header: RequestHeader, size: int) -> int:
    quotas = ctx.quotas
    if quotas is None or not quotas.quotas:
        return 0
    ms = quotas.record(key, _user(PRINCIPAL.get()), header.client_id or "", size)
    mute = MUTE.get()
    if ms > 0 and mute is not None:
        mute.extend(ms / 1000)
    return ms


def _produce(inner: Handler) -> Handler:
    def handler(ctx: GatewayContext, header: RequestHeader, body: Any) -> Awaitable[Response]:
        if ctx.quotas is None or not ctx.quotas.quotas:
            return inner(ctx, header, body)
        size = sum(len(p.records or b"") for t in body.topic_data for p in t.partition_data)
        # Counted when the request is read, so the next pipelined request already waits.
        ms = _throttle(ctx, PRODUCER_BYTE_RATE, header, size)
        pending = inner(ctx, header, body)
        if not ms:
            return pending

        async def finish() -> Response:
            response = await pending
            if isinstance(response, dict):
                response["throttle_time"] = ms
            return response

        return finish()

    return handler


def _fetch(inner: Handler) -> Handler:
    def handler(ctx: GatewayContext, header: RequestHeader, body: Any) -> Awaitable[Response]:
        if ctx.quotas is None or not ctx.quotas.quotas:
            return inner(ctx, header, body)  # no quota: no coroutine wrapped around it
        return throttled(ctx, header, body)

    async def throttled(ctx: GatewayContext, header: RequestHeader, body: Any) -> Response:
        response = await inner(ctx, header, body)
        if ctx.quotas is None or not ctx.quotas.quotas:
            return response
        if isinstance(response, list):  # throttled ones are patched whole
            response = b"".join(response)
        if not isinstance(response, bytes):
            return response
        ms = _throttle(ctx, CONSUMER_BYTE_RATE, header, len(response))
        if ms:
            # throttle_time_ms follows the response header (v1: plus its tagged fields).
            at = 4 + (1 if header.api_version >= 12 else 0)
            response = response[:at] + _I32.pack(ms) + response[at + 4 :]
        return response

    return handler


def with_quotas(handlers: dict[int, Handler]) -> dict[int, Handler]:
    table = dict(handlers)
    table[ApiKey.PRODUCE] = _produce(handlers[ApiKey.PRODUCE])
    table[ApiKey.FETCH] = _fetch(handlers[ApiKey.FETCH])
    return table
