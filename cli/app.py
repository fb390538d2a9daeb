"""Wires the store and the TCP server together and runs them until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import signal
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from admin.http import AdminServer
from core.groups import GroupCoordinator, GroupSettings
from core.store import StoreSettings, StreamStore
from core.tiering import TierSettings
from gateway.handlers.context import GatewayContext
from gateway.server import Gateway, ServerSettings

if TYPE_CHECKING:
    from core.nodes import NodeMembership

log = logging.getLogger("streamgate")


@dataclass(slots=True)
class Settings:
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    data_dir: str = "./data"
    advertised_host: str | None = None
    advertised_port: int | None = None
    default_partitions: int = 1
    auto_create_topics: bool = True
    max_request_bytes: int = 100 * 1024 * 1024
    max_message_bytes: int = 8 * 1024 * 1024
    connections_max_idle_ms: int = 600_000
    group_initial_rebalance_delay_ms: int = 300
    metrics_listen: tuple[str, int] | None = None  # admin/metrics HTTP endpoint, off if None
    scaling_window_s: float = 60.0
    scaling_interval_s: float = 5.0
    tier2_url: str | None = None
    s3_endpoint: str | None = None
    tier: TierSettings = field(default_factory=TierSettings)
    # README "Several nodes": postgresql://... metadata, this node's id and lease
    metadata_url: str | None = None
    node_id: int = 1
    node_lease_s: float = 3.0
    multi_node: bool = False  # several active nodes (experimental; README "Several nodes")


async def serve(settings: Settings) -> None:
    store = StreamStore(
        StoreSettings(
            settings.data_dir,
            settings.default_partitions,
            settings.auto_create_topics,
            scaling_window_s=settings.scaling_window_s,
            scaling_interval_s=settings.scaling_interval_s,
            tier2_url=settings.tier2_url,
            s3_endpoint=settings.s3_endpoint,
            tier=settings.tier,
            metadata_url=settings.metadata_url,
            node_id=settings.node_id if settings.metadata_url else None,
        )
    )
    async with trio.open_nursery() as root:
        membership = None
        if settings.metadata_url:
            membership = await _start_node(settings, store, root)
        else:
            await root.start(store.run)
        groups = GroupCoordinator(
            store.metadata,
            GroupSettings(initial_rebalance_delay=settings.group_initial_rebalance_delay_ms / 1000),
            offload=store.worker.call,
        )
        store.on_topic_deleted.append(groups.on_topic_deleted)
        if membership is not None and settings.multi_node:
            membership.offsets_sink = groups.offsets.refresh_group
        await root.start(groups.run)
        try:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as server_nursery:
                    if settings.metrics_listen is not None:
                        host, metrics_port = settings.metrics_listen
                        admin = await server_nursery.start(
                            AdminServer(store).serve, host, metrics_port
                        )
                        log.info(
                            "admin/metrics HTTP on %s:%d",
                            host,
                            admin[0].socket.getsockname()[1],
                        )
                    listeners = await server_nursery.start(
                        _serve_tcp, settings, store, groups, server_nursery
                    )
                    port = listeners[0].socket.getsockname()[1]
                    log.info(
                        "streamgate listening on %s:%d (data in %s)",
                        settings.listen_host,
                        port,
                        settings.data_dir,
                    )
                    async for signum in signals:
                        log.info("received %s, shutting down", signal.Signals(signum).name)
                        server_nursery.cancel_scope.cancel()
                        break
        finally:
            groups.stop()
            store.stop()  # flushers drain what is queued, then the store closes


async def _start_node(settings: Settings, store: StreamStore, root: trio.Nursery) -> NodeMembership:
    """Take this node's lease before the store opens its segments; keep renewing it until
    the store has closed (queued writes flushed), then release it."""
    from core.nodes import NodeMembership, NodeSettings  # psycopg only when asked for

    membership = NodeMembership(
        settings.metadata_url or "",
        NodeSettings(
            settings.node_id,
            settings.advertised_host or settings.listen_host,
            settings.advertised_port or settings.listen_port,
            lease_s=settings.node_lease_s,
            exclusive=not settings.multi_node,
        ),
    )
    await membership.register()
    lease_scope, sync_scope = trio.CancelScope(), trio.CancelScope()

    async def renew() -> None:
        with lease_scope:
            await membership.run()

    async def run_store(task_status: trio.TaskStatus[None]) -> None:
        try:
            await store.run(task_status=task_status)
        finally:
            sync_scope.cancel()
            lease_scope.cancel()

    root.start_soon(renew)
    await root.start(run_store)
    if settings.multi_node:

        async def sync() -> None:
            with sync_scope:
                await membership.sync(store)

        root.start_soon(sync)
    return membership


async def _serve_tcp(
    settings: Settings,
    store: StreamStore,
    groups: GroupCoordinator,
    nursery: trio.Nursery,
    task_status: trio.TaskStatus[list[trio.SocketListener]],
) -> None:
    listeners = await trio.open_tcp_listeners(settings.listen_port, host=settings.listen_host)
    port = listeners[0].socket.getsockname()[1]
    ctx = GatewayContext(
        store=store,
        advertised_host=settings.advertised_host or _default_advertised_host(settings.listen_host),
        advertised_port=settings.advertised_port or port,
        groups=groups,
        max_message_bytes=settings.max_message_bytes,
        max_request_bytes=settings.max_request_bytes,
        listener=f"{settings.listen_host}:{port}",
    )
    if settings.metadata_url:  # a node of a cluster answers with its own id
        ctx.node_id = settings.node_id
    server_settings = ServerSettings(
        max_request_bytes=settings.max_request_bytes,
        connections_max_idle_ms=settings.connections_max_idle_ms,
    )
    gateway = Gateway(ctx, server_settings)
    task_status.started(listeners)
    await trio.serve_listeners(gateway.handle_connection, listeners, handler_nursery=nursery)


def _default_advertised_host(listen_host: str) -> str:
    """Clients need a reachable name: a wildcard bind advertises this machine's hostname."""
    if listen_host in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return listen_host
