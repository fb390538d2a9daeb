"""The admin listener (`serve --metrics-listen`): the admin ASGI app on Hypercorn's trio
worker, inside the gateway process and its event loop (HTTP/1.1 keep-alive, h2c)."""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Sequence

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from admin.app import AdminApi, build_app
from admin.auth import AdminSecurity
from admin.console import Console
from admin.metrics import store_registry
from core.groups import GroupCoordinator
from core.sharegroups.coordinator import ShareCoordinator
from core.store import StreamStore
from core.txn import TransactionCoordinator

# Hypercorn's own lines: its warnings and errors (its "Running on" line repeats ours)
_HYPERCORN_LOG = logging.getLogger("admin.hypercorn")
_HYPERCORN_LOG.setLevel(logging.WARNING)
KEEP_ALIVE_S = 30.0  # browsers and Prometheus reuse connections between polls


class AdminServer:
    def __init__(
        self,
        store: StreamStore,
        security: AdminSecurity | None = None,
        groups: GroupCoordinator | None = None,
        transactions: TransactionCoordinator | None = None,
        shares: ShareCoordinator | None = None,
        bridge_metrics: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.security = security or AdminSecurity()
        self.api = AdminApi(store, store_registry(store, groups), self.security)
        self.console = Console(store, groups, self.security, transactions, shares, bridge_metrics)
        self.app = build_app(self.api.routes() + self.console.routes())

    async def serve(
        self,
        host: str,
        port: int,
        tls: ssl.SSLContext | None = None,
        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until cancelled, over HTTPS with `tls`; starts with the bound (host, port)
        (port 0: a free one)."""
        config = _TlsConfig(tls) if tls is not None else Config()
        host = host or "0.0.0.0"  # --metrics-listen :PORT
        config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        config.keep_alive_timeout = KEEP_ALIVE_S
        config.accesslog = None
        config.errorlog = _HYPERCORN_LOG
        config.include_server_header = False
        async with trio.open_nursery() as nursery:
            app = functools.partial(serve, self.app, config)  # type: ignore[arg-type]
            binds: list[str] = await nursery.start(app)
            bound_host, _, bound_port = binds[0].split("://", 1)[1].rpartition(":")
            task_status.started((bound_host.strip("[]"), int(bound_port)))


class _TlsConfig(Config):
    """Hypercorn's config with the gateway's own TLS context (Hypercorn builds one from
    file names otherwise); ALPN offers HTTP/2 and HTTP/1.1."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        context.set_alpn_protocols(["h2", "http/1.1"])
        self._context = context

    @property
    def ssl_enabled(self) -> bool:
        return True

    def create_ssl_context(self) -> ssl.SSLContext:
        return self._context
