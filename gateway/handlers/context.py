"""What every handler can reach: the store and the gateway's own identity."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from core.acl.authorizer import Authorizer
from core.acl.quotas import ClientQuotas
from core.api import Store, Transactions
from core.configs.broker import DynamicBrokerConfigs
from core.configs.group import GroupConfigs
from core.credentials import Credentials
from core.groups import GroupCoordinator
from core.sharegroups import ShareCoordinator
from kafkawire.codec import RequestHeader

NODE_ID = 1
ZERO_UUID = uuid.UUID(int=0)


# The client address of the connection a request arrived on; the server sets it per
# connection and request tasks inherit it (trio copies the context into new tasks).
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="")
# The connection's authenticated principal, Kafka style ("User:alice"); the anonymous
# principal until SASL or a client certificate says otherwise. Set per connection by the
# server (security), read by the authorizer (ACLs) and quotas.
PRINCIPAL: ContextVar[str] = ContextVar("principal", default="User:ANONYMOUS")
# The listener a connection came in on: (name, advertised host, advertised port); set per
# connection, so Metadata and FindCoordinator send each client back through its listener.
LISTENER: ContextVar[tuple[str, str, int] | None] = ContextVar("listener", default=None)


@dataclass(slots=True)
class GatewayContext:
    store: Store
    advertised_host: str
    advertised_port: int
    groups: GroupCoordinator
    node_id: int = NODE_ID
    max_message_bytes: int = 8 * 1024 * 1024
    max_request_bytes: int = 100 * 1024 * 1024
    listener: str = ""  # the address actually listened on, host:port
    transactions: Transactions | None = None  # the transaction coordinator (core/txn)
    # ACLs (gateway/authorization): None = no authorizer, everything allowed (the embedded default).
    authorizer: Authorizer | None = None
    quotas: ClientQuotas | None = None  # client quotas, always on when the server runs
    credentials: Credentials | None = None  # SCRAM credentials (SASL, kafka-configs.sh)
    # Every listener as (name, bound host:port, advertised host:port), for broker configs.
    listeners: tuple[tuple[str, str, str], ...] = ()
    # Dynamic broker configs (core/configs/broker.py); None: broker configs are read-only.
    dynamic_configs: DynamicBrokerConfigs | None = None
    shares: ShareCoordinator | None = None  # share groups (core/sharegroups)
    group_configs: GroupConfigs | None = None  # per-group configs (core/configs/group.py)


def advertised_endpoint(ctx: GatewayContext) -> tuple[str, int]:
    """The host and port to give this connection's client for this node."""
    listener = LISTENER.get()
    if listener is None:
        return ctx.advertised_host, ctx.advertised_port
    return listener[1], listener[2]


# A handler's answer: fields for the encoder, an encoded body, or an encoded body in
# pieces (Fetch: record batches are sent from where they are, not joined), or no answer.
Response = dict[str, Any] | bytes | list[bytes | memoryview] | None
Handler = Callable[[GatewayContext, RequestHeader, Any], Awaitable[Response]]
