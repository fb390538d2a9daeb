"""A gateway node's membership in a cluster that shares PostgreSQL metadata.

`NodeMembership.run` registers the node (a new incarnation of its lease, claiming the open
segments it may own: see `PostgresMetadataStore.register_node`), then renews the lease
every `lease_s / 6`. Each success moves the process-wide fence deadline (core/cluster/fencing.py);
a renewal the database refuses means another incarnation won: the fence is lost and the
process ends at once (exit status 75) without flushing anything, because it no longer owns
its segments. A renewal that merely fails (database unreachable) is retried; appends stop
being acknowledged when the deadline passes, and resume if a renewal succeeds in time.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ..cluster.fencing import FENCE
from ..cluster.view import CLUSTER, Lease
from ..failure_log import FailureLog
from ..metadata import CommittedOffset, NodeRecord
from ..metadata.postgres import LeaseError, PostgresMetadataStore
from ..stream.handover import apply_cluster_segments
from .balance import REBALANCE_EVERY_S, rebalance
from .takeover import Unadopted, take_over_orphans
from .topic_sync import reconcile

if TYPE_CHECKING:
    from ..store import StreamStore

log = logging.getLogger(__name__)

DEAD_SESSIONS_S = 60.0  # how long after a lease expired its node's sessions are looked for
LEASE_LOST_EXIT = 75  # EX_TEMPFAIL: a supervisor may restart the node


@dataclass(slots=True)
class NodeSettings:
    node_id: int
    host: str
    port: int
    lease_s: float = 3.0
    # A restart after SIGKILL finds its previous incarnation's lease still live: wait for it.
    register_timeout_s: float = 10.0
    exclusive: bool = True  # one active node per database (docs/several-nodes.md)
    sync_every_s: float = 0.5  # several active nodes: how often the cluster view refreshes

    @property
    def margin_s(self) -> float:
        return self.lease_s / 6

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / 6


class NodeMembership:
    def __init__(self, url: str, settings: NodeSettings) -> None:
        self.url = url
        self.settings = settings
        self.incarnation = 0
        self._db: PostgresMetadataStore | None = None
        self._limiter = trio.CapacityLimiter(1)
        # a database away fails every round: a line at first, then a count now and then
        self.failures = FailureLog(f"node {settings.node_id}: ", log, every_s=10.0)
        # several nodes: given the committed offsets of each group another node coordinates
        self.offsets_sink: Callable[[str, list[CommittedOffset], bool], None] | None = None
        self._unadopted = Unadopted()  # segments taken over, not yet opened (takeover.py)

    async def _call(self, fn, *args):  # type: ignore[no-untyped-def]
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def register(self) -> None:
        """Take the lease (waiting up to register_timeout_s for a stale one); LeaseError."""
        s = self.settings
        self._db = await self._call(
            functools.partial(PostgresMetadataStore, self.url, session_node=s.node_id)
        )
        deadline = time.monotonic() + s.register_timeout_s
        while True:
            started = time.monotonic()
            try:
                self.incarnation = await self._call(
                    self._db.register_node, s.node_id, s.host, s.port, s.lease_s, s.exclusive
                )
                break
            except LeaseError:
                if time.monotonic() > deadline:
                    raise
                await trio.sleep(s.lease_s / 10)
        FENCE.renewed(started, s.lease_s, s.margin_s)
        if not s.exclusive:
            CLUSTER.node_id = s.node_id
            CLUSTER.brokers = [(s.node_id, s.host, s.port)]
            CLUSTER.enabled = True
        log.info(
            "node %d registered (incarnation %d, lease %.1f s)",
            s.node_id,
            self.incarnation,
            s.lease_s,
        )

    async def sync(self, store: StreamStore) -> None:
        """Several active nodes: refresh the live brokers and topic owners, and open the
        topics other nodes created, until cancelled; with --wal object also rebalance."""
        async with trio.open_nursery() as nursery:
            if store.wal is not None:
                nursery.start_soon(self._balance, store)
            await self._sync_rounds(store)

    async def _sync_rounds(self, store: StreamStore) -> None:
        assert self._db is not None, "register first"
        db = self._db
        cycle = 0
        while True:
            cycle += 1
            try:
                nodes = await self._call(db.nodes)
                owners = await self._call(db.topic_owners)
                # deletes, partition counts and configs changed on other nodes
                await reconcile(store, functools.partial(self._call, db.topic_heads))
                if any(name not in store.streams for name in owners):
                    store.adopt_topics(await self._call(db.load_topics))
                await self._end_dead_sessions(db, nodes)
                # --wal object: the open segments of nodes whose lease expired
                live = [n.node_id for n in nodes if n.live]
                await take_over_orphans(
                    store, db, self._call, self.settings.node_id, live, self._unadopted
                )
            except Exception as exc:  # database unreachable: keep the last view
                self.failures.failed("cluster sync", exc, "keeping the last view")
            else:
                self.failures.succeeded("cluster sync")
                CLUSTER.brokers = [(n.node_id, n.host, n.port) for n in nodes if n.live]
                read_at = time.monotonic()
                CLUSTER.leases = [
                    Lease(n.node_id, n.host, n.port, n.incarnation, n.live, n.lease_left_s, read_at)
                    for n in nodes
                ]
                CLUSTER.owners = owners
            await self._sync_segments(db, store)
            if self.offsets_sink is not None and cycle % 4 == 0:
                await self._refresh_offsets(db, self.offsets_sink)
            await trio.sleep(self.settings.sync_every_s)

    async def _end_dead_sessions(self, db: PostgresMetadataStore, nodes: list[NodeRecord]) -> None:
        """End the transactions a node whose lease just expired left open in the database:
        one frozen inside a commit holds its row locks (a segment's, a group's offsets)
        for as long as it is frozen, and PostgreSQL's idle timeout misses one stopped in the
        middle of a pipeline. Tried for a minute after the expiry, by every live node."""
        for n in nodes:
            if n.live or n.node_id == self.settings.node_id or n.lease_left_s < -DEAD_SESSIONS_S:
                continue
            what = f"ending node {n.node_id}'s database sessions"
            try:
                count = await self._call(db.end_expired_sessions, n.node_id)
            except Exception as exc:  # (no right to: the server's idle timeout still helps)
                self.failures.failed(what, exc)
                continue
            self.failures.succeeded(what)
            if count:
                log.warning(
                    "ended %d database session(s) that node %d left inside a transaction "
                    "when its lease expired",
                    count,
                    n.node_id,
                )

    async def _balance(self, store: StreamStore) -> None:
        """--wal object: segments back to the nodes that lead fewer (balance.py)."""
        assert self._db is not None
        while True:
            await trio.sleep(REBALANCE_EVERY_S)
            try:
                await rebalance(store, self._db, self._call, self.settings.node_id)
            except Exception as exc:  # refused (a scale under way...): next round
                self.failures.failed("rebalancing", exc, "trying again later")

    async def _sync_segments(self, db: PostgresMetadataStore, store: StreamStore) -> None:
        """Per-partition leaders: every open segment's owner; open the segments other nodes
        handed to this one (core/stream/handover.py)."""
        try:
            await apply_cluster_segments(store.streams, db, self._call)
        except Exception as exc:
            self.failures.failed("segment sync", exc)
        else:
            self.failures.succeeded("segment sync")

    async def load_group_offsets(self, group_id: str) -> list[CommittedOffset]:
        """One group's committed offsets, from the database (OffsetStore.group_loader)."""
        assert self._db is not None, "register first"
        rows: list[CommittedOffset] = await self._call(self._db.load_group_offsets, group_id)
        return rows

    async def _refresh_offsets(
        self,
        db: PostgresMetadataStore,
        sink: Callable[[str, list[CommittedOffset], bool], None],
    ) -> None:
        try:
            rows = await self._call(db.load_offsets)
        except Exception as exc:
            self.failures.failed("offsets refresh", exc)
            return
        self.failures.succeeded("offsets refresh")
        by_group: dict[str, list[CommittedOffset]] = {}
        for row in rows:
            by_group.setdefault(row.group_id, []).append(row)
        for group_id, offsets in by_group.items():
            owner = CLUSTER.coordinator(group_id)
            sink(group_id, offsets, owner is not None and owner[0] != self.settings.node_id)

    async def run(self) -> None:
        """Renew the lease until cancelled; ends the process if the lease was lost."""
        assert self._db is not None, "register first"
        s = self.settings
        try:
            while True:
                await trio.sleep(s.renew_every_s)
                started = time.monotonic()
                try:
                    held = await self._call(
                        self._db.renew_lease, s.node_id, self.incarnation, s.lease_s
                    )
                except Exception as exc:  # database unreachable: the fence deadline decides
                    self.failures.failed("lease renewal", exc)
                    continue
                self.failures.succeeded("lease renewal")
                if not held:
                    FENCE.lose()
                    log.critical(
                        "node %d lost its lease (incarnation %d): exiting without flushing",
                        s.node_id,
                        self.incarnation,
                    )
                    logging.shutdown()
                    os._exit(LEASE_LOST_EXIT)
                FENCE.renewed(started, s.lease_s, s.margin_s)
        finally:
            with trio.CancelScope(shield=True):
                if FENCE.valid():  # clean stop: let another node claim at once
                    try:
                        await self._call(self._db.release_lease, s.node_id, self.incarnation)
                    except Exception as exc:
                        log.warning("node %d: lease release failed: %s", s.node_id, exc)
                await self._call(self._db.close)
