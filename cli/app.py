"""Wires the store and the TCP server together and runs them until SIGINT/SIGTERM."""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import signal
import socket
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

import hotpath
from admin.auth import AdminSecurity
from admin.server import AdminServer
from cli.acl_flags import AclSettings
from core import interpreter_tuning
from core.acl.authorizer import Authorizer
from core.acl.quotas import ClientQuotas
from core.compaction import CompactionSettings
from core.configs.broker import DynamicBrokerConfigs
from core.configs.group import (
    CONSUMER_HEARTBEAT_INTERVAL,
    CONSUMER_SESSION_TIMEOUT,
    SHARE_AUTO_OFFSET_RESET,
    SHARE_HEARTBEAT_INTERVAL,
    SHARE_RECORD_LOCK_DURATION,
    SHARE_SESSION_TIMEOUT,
    GroupConfigs,
)
from core.credentials import Credentials, CredentialStore
from core.groups import GroupCoordinator, GroupSettings
from core.groups.consumer_coordinator import ConsumerGroupSettings
from core.metadata import SQLiteCredentialStore
from core.sharegroups import ShareCoordinator, ShareSettings
from core.store import StoreSettings, StreamStore
from core.tiering import TierSettings
from core.txn import TransactionCoordinator
from core.wal.writer import WalSettings
from gateway.handlers.context import GatewayContext
from gateway.security.listeners import Listener, ListenerSetup
from gateway.security.sasl import ALL_MECHANISMS
from gateway.server import Gateway, ServerSettings

if TYPE_CHECKING:
    from core.nodes.membership import NodeMembership

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
    # Consumer groups of the next-generation protocol (Kafka's group.consumer.* settings)
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    metrics_listen: tuple[str, int] | None = None  # admin/metrics HTTP endpoint, off if None
    admin_insecure: bool = False  # allow the admin endpoint off loopback without SASL users
    admin_tls: ssl.SSLContext | None = None  # HTTPS on the admin endpoint (--admin-tls)
    console_bridge_metrics: tuple[str, ...] = ()  # MQTT bridges' /metrics URLs, for the console
    scaling_window_s: float = 60.0
    scaling_interval_s: float = 5.0
    tier2_url: str | None = None
    s3_endpoint: str | None = None
    tier: TierSettings = field(default_factory=TierSettings)
    acl: AclSettings = field(default_factory=AclSettings)
    # --listeners (security): every listener, first one is the main one; None: one
    # PLAINTEXT listener on listen_host:listen_port advertised as above.
    listeners: list[Listener] | None = None
    advertised_listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None  # for SSL/SASL_SSL listeners (cli.serve)
    ssl_client_auth: str = "none"
    sasl_mechanisms: tuple[str, ...] = ALL_MECHANISMS
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    # docs/several-nodes.md: postgresql://... metadata, this node's id and lease
    metadata_url: str | None = None
    node_id: int = 1
    node_lease_s: float = 3.0
    multi_node: bool = False  # several active nodes (experimental; docs/several-nodes.md)
    wal: str = "local"  # or "object": the write-ahead log in object storage (core/wal)
    wal_settings: WalSettings = field(default_factory=WalSettings)
    share: ShareSettings = field(default_factory=ShareSettings)  # share groups


async def serve(settings: Settings) -> None:
    problem = check_admin_exposure(settings)
    if problem is not None:
        raise SystemExit(f"streamgate serve: {problem}")
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
            compaction=settings.compaction,
            metadata_url=settings.metadata_url,
            node_id=settings.node_id if settings.metadata_url else None,
            wal=settings.wal,
            wal_settings=settings.wal_settings,
        )
    )
    if settings.wal == "object":
        await _require_tier2(settings)
    async with trio.open_nursery() as root:
        if (settings.tier2_url or "").startswith("s3://") and settings.wal != "object":
            root.start_soon(_check_tier2, settings, store)  # a folder: checked in cli.serve
        membership = None
        if settings.metadata_url:
            membership = await _start_node(settings, store, root)
        else:
            await root.start(store.run)
        credentials = Credentials(_credential_store(settings), store.worker.call)
        groups = GroupCoordinator(
            store.metadata,
            GroupSettings(
                initial_rebalance_delay=settings.group_initial_rebalance_delay_ms / 1000,
                consumer=ConsumerGroupSettings(
                    session_timeout=settings.group_consumer_session_timeout_ms / 1000,
                    heartbeat_interval=settings.group_consumer_heartbeat_interval_ms / 1000,
                ),
            ),
            offload=store.worker.call,
        )
        store.on_topic_deleted.append(groups.on_topic_deleted)
        if membership is not None and settings.multi_node:
            membership.offsets_sink = groups.offsets.refresh_group
            groups.offsets.group_loader = membership.load_group_offsets
        await root.start(groups.run)
        shares = ShareCoordinator(store, store.metadata, settings.share, offload=store.worker.call)
        store.on_topic_deleted.append(shares.on_topic_deleted)
        await root.start(shares.run)
        txns = TransactionCoordinator(store, store.metadata, store.worker, groups.offsets.commit)
        await root.start(txns.run)
        try:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as server_nursery:
                    # RSS: freed heap back to the OS (core/interpreter_tuning.py)
                    server_nursery.start_soon(interpreter_tuning.trim_heap_periodically)
                    authorizer = _authorizer(settings, store)
                    if settings.metrics_listen is not None:
                        host, metrics_port = settings.metrics_listen
                        security = AdminSecurity(credentials, _uses_sasl(settings), authorizer)
                        admin = AdminServer(
                            store, security, groups, txns, shares, settings.console_bridge_metrics
                        )
                        _, bound_port = await server_nursery.start(
                            admin.serve, host, metrics_port, settings.admin_tls
                        )
                        log.info(
                            "admin/metrics HTTP%s on %s:%d",
                            "S" if settings.admin_tls else "",
                            host,
                            bound_port,
                        )
                    listeners = await server_nursery.start(
                        functools.partial(
                            _serve_tcp,
                            settings,
                            store,
                            groups,
                            server_nursery,
                            txns,
                            credentials,
                            shares,
                            authorizer=authorizer,
                        )
                    )
                    port = listeners[0].socket.getsockname()[1]
                    log.info(
                        "streamgate listening on %s:%d (data in %s)",
                        settings.listen_host,
                        port,
                        settings.data_dir,
                    )
                    log.info("%s", hotpath.describe())
                    async for signum in signals:
                        log.info("received %s, shutting down", signal.Signals(signum).name)
                        server_nursery.cancel_scope.cancel()
                        break
        finally:
            txns.stop()
            shares.stop()
            groups.stop()
            store.stop()  # flushers drain what is queued, then the store closes
            credentials.backend.close()


async def _require_tier2(settings: Settings) -> None:
    """`--wal object` acknowledges nothing without its object store: refuse to start, with
    one line, when it does not work."""
    from core.segments.tier2_health import check_tier2

    try:
        check = await check_tier2(settings.tier2_url, settings.data_dir, settings.s3_endpoint)
    except ValueError as exc:
        raise SystemExit(f"streamgate serve: --tier2: {exc}") from None
    if not check.ok:
        raise SystemExit(
            f"streamgate serve: {check.line()}; --wal object cannot acknowledge anything without it"
        )
    log.info("%s", check.line())


async def _check_tier2(settings: Settings, store: StreamStore) -> None:
    """Probe tier 2 once at start, beside the store opening: one line if it does not work.
    Acknowledgements come from tier 1, so the server serves either way; uploads retry until
    tier 2 answers (core/tiering.py says how that goes, in a few lines)."""
    from core.segments.tier2_health import check_tier2

    try:
        check = await check_tier2(settings.tier2_url, settings.data_dir, settings.s3_endpoint)
    except ValueError:
        return  # a malformed URL: the store's start says so
    if check.ok:
        log.info("%s", check.line())
    else:
        tier = store._tier  # the uploads' reporter: it need not say the same thing again
        if tier is not None and check.reason is not None:
            tier.reporter.announced(check.reason)
        log.error(
            "%s; serving anyway: acks come from tier 1, uploads retry until tier 2 works",
            check.line(),
        )


async def _start_node(settings: Settings, store: StreamStore, root: trio.Nursery) -> NodeMembership:
    """Take this node's lease before the store opens its segments; keep renewing it until
    the store has closed (queued writes flushed), then release it."""
    from core.nodes.membership import NodeMembership, NodeSettings  # psycopg only when asked for

    membership = NodeMembership(
        settings.metadata_url or "",
        NodeSettings(
            settings.node_id,
            settings.advertised_host or _default_advertised_host(settings.listen_host),
            settings.advertised_port or settings.listen_port,
            lease_s=settings.node_lease_s,
            exclusive=not settings.multi_node,
        ),
    )
    await membership.register()
    store.settings.wal_incarnation = membership.incarnation
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


def _credential_store(settings: Settings) -> CredentialStore:
    """SCRAM users live with the metadata: the shared PostgreSQL of a cluster, else the
    node's metadata.db."""
    if settings.metadata_url:
        from core.metadata.postgres import PostgresCredentialStore  # psycopg only when asked

        return PostgresCredentialStore(settings.metadata_url)
    return SQLiteCredentialStore(os.path.join(settings.data_dir, "metadata.db"))


async def _serve_tcp(
    settings: Settings,
    store: StreamStore,
    groups: GroupCoordinator,
    nursery: trio.Nursery,
    transactions: TransactionCoordinator | None,
    credentials: Credentials,
    shares: ShareCoordinator | None,
    task_status: trio.TaskStatus[list[trio.SocketListener]],
    authorizer: Authorizer | None = None,
) -> None:
    listeners = settings.listeners or [
        Listener("PLAINTEXT", "PLAINTEXT", settings.listen_host, settings.listen_port)
    ]
    ssl_context = settings.ssl_context
    opened = []
    for listener in listeners:
        sockets = await trio.open_tcp_listeners(listener.port, host=listener.host or None)
        opened.append((listener, sockets))
    setups = []
    for listener, sockets in opened:
        port = sockets[0].socket.getsockname()[1]
        host, adv_port = settings.advertised_listeners.get(listener.name, (None, None))
        if settings.listeners is None:  # --listen: the older --advertised-listener applies
            host, adv_port = settings.advertised_host, settings.advertised_port
        setups.append(
            ListenerSetup(
                listener=listener,
                advertised_host=host or _default_advertised_host(listener.host),
                advertised_port=adv_port or port,
                ssl_context=ssl_context if listener.uses_tls else None,
                sasl_mechanisms=settings.sasl_mechanisms if listener.uses_sasl else (),
            )
        )
    main_listener, main_sockets = opened[0]
    main_port = main_sockets[0].socket.getsockname()[1]
    ctx = GatewayContext(
        store=store,
        advertised_host=setups[0].advertised_host,
        advertised_port=setups[0].advertised_port,
        groups=groups,
        max_message_bytes=settings.max_message_bytes,
        max_request_bytes=settings.max_request_bytes,
        listener=f"{main_listener.host}:{main_port}",
        credentials=credentials,
        listeners=tuple(
            (
                setup.listener.name,
                f"{setup.listener.host}:{sockets[0].socket.getsockname()[1]}",
                f"{setup.advertised_host}:{setup.advertised_port}",
            )
            for setup, (_, sockets) in zip(setups, opened, strict=True)
        )
        if settings.listeners is not None
        else (),
        transactions=transactions,
        shares=shares,
    )
    if settings.metadata_url:  # a node of a cluster answers with its own id
        ctx.node_id = settings.node_id
    server_settings = ServerSettings(
        max_request_bytes=settings.max_request_bytes,
        connections_max_idle_ms=settings.connections_max_idle_ms,
        max_connections_per_ip=settings.acl.max_connections_per_ip,
    )
    ctx.quotas = ClientQuotas(settings.acl.quotas, store.metadata, store.worker.call)
    ctx.quotas.load()
    ctx.dynamic_configs = _dynamic_configs(settings, store, groups, ctx)
    ctx.group_configs = _group_configs(settings, store, groups, shares)
    ctx.authorizer = authorizer
    gateway = Gateway(ctx, server_settings)
    _warn_unauthenticated(setups, settings.ssl_client_auth)
    task_status.started(main_sockets)
    async with trio.open_nursery() as serving:
        if settings.multi_node:  # group configs altered through other nodes
            serving.start_soon(ctx.group_configs.refresh_every, 1.0)
        for setup, (listener, sockets) in zip(setups, opened, strict=True):
            if settings.listeners is not None:
                log.info(
                    "listener %s (%s) on %s:%d, advertised as %s:%d",
                    listener.name,
                    listener.protocol,
                    listener.host,
                    sockets[0].socket.getsockname()[1],
                    setup.advertised_host,
                    setup.advertised_port,
                )
            handler = functools.partial(gateway.handle_connection, setup=setup)
            serving.start_soon(
                functools.partial(trio.serve_listeners, handler, sockets, handler_nursery=nursery)
            )


def _authorizer(settings: Settings, store: StreamStore) -> Authorizer | None:
    """The ACLs (`--acl`), shared by the Kafka listeners and the admin endpoint."""
    if not settings.acl.enabled:
        return None
    authorizer = Authorizer(settings.acl.authorizer, store.metadata, store.worker.call)
    authorizer.load()
    log.info(
        "authorizer on: %d ACLs, super users %s, allow everyone if no ACL found: %s",
        len(authorizer.acls),
        ", ".join(sorted(settings.acl.authorizer.super_users)) or "none",
        settings.acl.authorizer.allow_everyone_if_no_acl_found,
    )
    return authorizer


def _uses_sasl(settings: Settings) -> bool:
    """The gateway has SASL users: the admin endpoint asks for them too."""
    return any(listener.uses_sasl for listener in settings.listeners or ())


def check_admin_exposure(settings: Settings) -> str | None:
    """Why the admin endpoint must not start as configured, or None: off loopback it needs
    authentication (a SASL listener) or an explicit `--admin-insecure`."""
    if settings.metrics_listen is None or settings.admin_insecure or _uses_sasl(settings):
        return None
    host = settings.metrics_listen[0]
    if _is_loopback(host):
        return None
    return (
        f"--metrics-listen {host or '*'}:{settings.metrics_listen[1]} is reachable from the "
        "network but needs no credentials (no SASL listener): scale and move would be open "
        "to anyone; add a SASL listener, bind it to 127.0.0.1, or pass --admin-insecure true"
    )


def _dynamic_configs(
    settings: Settings, store: StreamStore, groups: GroupCoordinator, ctx: GatewayContext
) -> DynamicBrokerConfigs:
    """The dynamic broker configs stored for this node and the cluster (applied now), and
    the serve options they override at once (docs/clients-and-apis.md "Dynamic broker configs")."""
    dynamic = DynamicBrokerConfigs(ctx.node_id, store.metadata, store.worker.call)

    def max_message_bytes(value: str) -> None:
        ctx.max_message_bytes = int(value)

    def rebalance_delay(value: str) -> None:
        groups.set_initial_rebalance_delay(int(value) / 1000)

    def retention_interval(value: str) -> None:  # read before each retention pass
        settings.tier.retention_check_interval_s = int(value) / 1000

    def compaction_interval(value: str) -> None:  # read before each compaction pass
        settings.compaction.interval_s = int(value) / 1000

    dynamic.register("message.max.bytes", str(settings.max_message_bytes), max_message_bytes)
    dynamic.register(
        "group.initial.rebalance.delay.ms",
        str(settings.group_initial_rebalance_delay_ms),
        rebalance_delay,
    )
    dynamic.register(
        "log.retention.check.interval.ms",
        str(round(settings.tier.retention_check_interval_s * 1000)),
        retention_interval,
    )
    dynamic.register(
        "log.cleaner.backoff.ms",
        str(round(settings.compaction.interval_s * 1000)),
        compaction_interval,
    )
    dynamic.load()
    dynamic.apply_all()
    stored = {resource or "cluster default": len(c) for resource, c in dynamic.configs.items()}
    if any(stored.values()):
        log.info("dynamic broker configs loaded: %s", stored)
    return dynamic


def _group_configs(
    settings: Settings,
    store: StreamStore,
    groups: GroupCoordinator,
    shares: ShareCoordinator | None,
) -> GroupConfigs:
    """Per-group configs (loaded now), read by the consumer and share group coordinators;
    a group without its own takes the serve options."""
    consumer = groups.settings.consumer
    configs = GroupConfigs(
        store.metadata,
        store.worker.call,
        {
            CONSUMER_SESSION_TIMEOUT: str(round(consumer.session_timeout * 1000)),
            CONSUMER_HEARTBEAT_INTERVAL: str(round(consumer.heartbeat_interval * 1000)),
            SHARE_SESSION_TIMEOUT: str(settings.share.session_timeout_ms),
            SHARE_HEARTBEAT_INTERVAL: str(settings.share.heartbeat_interval_ms),
            SHARE_RECORD_LOCK_DURATION: str(settings.share.record_lock_ms),
            SHARE_AUTO_OFFSET_RESET: settings.share.auto_offset_reset,
        },
    )
    configs.load()
    groups.consumer.group_configs = configs
    if shares is not None:
        shares.group_configs = configs
    return configs


def _warn_unauthenticated(setups: list[ListenerSetup], client_auth: str) -> None:
    """One clear warning when clients from the network need no credentials."""
    exposed = [
        f"{setup.listener.name}://{setup.listener.host}:{setup.listener.port}"
        for setup in setups
        if not _is_loopback(setup.listener.host)
        and (
            setup.listener.protocol == "PLAINTEXT"
            or (setup.listener.protocol == "SSL" and client_auth != "required")
        )
    ]
    if exposed:
        log.warning(
            "SECURITY: %s accept(s) clients from the network without authentication; "
            "anyone who can reach it may read, write and delete every topic. Use a "
            "SASL_SSL listener (or SSL with --ssl-client-auth required) for non-loopback "
            "addresses.",
            ", ".join(exposed),
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a wildcard ("") or a name: assume reachable


def _default_advertised_host(listen_host: str) -> str:
    """Clients need a reachable name: a wildcard bind advertises this machine's hostname."""
    if listen_host in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return listen_host
