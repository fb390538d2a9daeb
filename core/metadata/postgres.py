"""The shared engine: PostgreSQL through psycopg 3, for gateway nodes that share one
database, and what only a shared database has: the cluster id, nodes with leases, segment
owners with fencing epochs, placement and hand-overs.

psycopg 3 because it is the maintained successor of psycopg2, ships binary wheels
(`psycopg[binary]`) and has real server-side parameters and `executemany` pipelining.

Nodes and leases (see README "Several nodes"): each node has a row in `nodes` with a lease
that expires at a time of the *database's* clock (`now()`), so nodes never compare their own
clocks. Registering bumps the node's `incarnation`; renewing is a compare-and-set on it, so a
node that was frozen past its lease and replaced cannot renew. Open segments carry
`owner_node` and `owner_epoch`; a claim bumps the epoch in the same transaction.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

from .credentials import SqlCredentialStore
from .dialect import Dialect, Engine, Handle
from .records import (
    NodeRecord,
    OpenSegment,
    SegmentOwner,
    SegmentRecord,
    TopicRecord,
    WalRange,
)
from .shared import SqlMetadataStore, insert_segments

_MIGRATION_LOCK = 0x5354_5247  # advisory lock key ("STRG")

POSTGRESQL = Dialect(
    name="postgresql",
    placeholder="%s",
    slots={
        "greatest": "GREATEST",
        "for_update": " FOR UPDATE",
        "BIGINT": "BIGINT",
        "BOOL": "BOOLEAN",
        "BLOB": "BYTEA",
        "DOUBLE": "DOUBLE PRECISION",
        "SERIAL_PK": "BIGSERIAL PRIMARY KEY",
    },
    unique_violation=(psycopg.errors.UniqueViolation,),
    columns_query="SELECT column_name FROM information_schema.columns "
    "WHERE table_schema = current_schema() AND table_name = %s",
    # Nodes starting together: the second waits, then finds nothing left to do.
    migration_lock=f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})",
)


class LeaseError(Exception):
    """This node cannot (or can no longer) hold its lease."""


class PostgresEngine(Engine):
    """One autocommit psycopg connection; `transaction()` opens a real one."""

    dialect = POSTGRESQL

    def __init__(self, url: str, session_name: str = "streamgate") -> None:
        self.url = url
        self.session_name = session_name
        super().__init__(_connect(url, session_name))

    def _reconnect(self) -> None:
        """A connection the server ended (a PostgreSQL restart, a failover) is replaced on
        the next call; the call that saw it end has failed, and its caller retries."""
        if self.conn.closed or self.conn.broken:
            self.conn = _connect(self.url, self.session_name)
            self.handle = Handle(self.conn, self.dialect)

    @contextmanager
    def read(self) -> Iterator[Handle]:
        with self.lock:
            self._reconnect()
            yield self.handle

    @contextmanager
    def transaction(self) -> Iterator[Handle]:
        with self.lock:
            self._reconnect()
            with self.conn.transaction():
                yield self.handle


def session_name(node_id: int | None) -> str:
    """The `application_name` of a node's sessions: how live nodes find the transactions
    a dead node left open (`end_expired_sessions`)."""
    return "streamgate" if node_id is None else f"streamgate node {node_id}"


def _connect(url: str, name: str) -> psycopg.Connection:
    # A node frozen inside a transaction (SIGSTOP, a stalled VM) would keep its row locks for
    # as long as it is frozen, and the node taking its segments over would wait as long: the
    # server ends such a session after 5 s, longer than any lease. Not one frozen in the
    # middle of a pipeline (psycopg's executemany), which the server does not count as idle:
    # the live nodes' syncs end those (`end_expired_sessions`). A server that does not answer
    # fails the call after 5 s rather than stalling the metadata thread.
    return psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=5,
        application_name=name,
        options="-c idle_in_transaction_session_timeout=5000",
    )


class PostgresCredentialStore(SqlCredentialStore):
    """SCRAM credentials in the shared database, so every node sees the same users."""

    def __init__(self, url: str) -> None:
        super().__init__(PostgresEngine(url))


class PostgresMetadataStore(SqlMetadataStore):
    """`MetadataStore` on PostgreSQL, plus nodes, leases, placement and hand-overs. Leases
    use a connection of their own so a renewal never waits behind a slow commit.
    `session_node` (default `node_id`) names the sessions after the node they serve."""

    def __init__(
        self, url: str, node_id: int | None = None, *, session_node: int | None = None
    ) -> None:
        self.session_name = session_name(node_id if session_node is None else session_node)
        super().__init__(PostgresEngine(url, self.session_name), node_id)
        self.url = url
        self._lease_db: psycopg.Connection | None = None
        self._lease_lock = threading.Lock()

    def close(self) -> None:
        super().close()
        with self._lease_lock:
            if self._lease_db is not None:
                self._lease_db.close()

    # --- cluster-wide --------------------------------------------------------------------

    def cluster_id(self) -> str:
        """The cluster's id, created by the first node (shared by every node)."""
        with self.engine.transaction() as db:
            db.execute(
                "INSERT INTO cluster VALUES (1, ?) ON CONFLICT (id) DO NOTHING",
                (uuid.uuid4().hex[:22],),
            )
            row = db.one("SELECT cluster_id FROM cluster WHERE id = 1")
        return str(row[0])

    # --- nodes, leases and segment owners ------------------------------------------------

    def register_node(
        self, node_id: int, host: str, port: int, lease_s: float, exclusive: bool
    ) -> int:
        """Take node `node_id`'s lease (a new incarnation) and claim every open segment that
        is unowned or owned by this node id, bumping each one's owner epoch; returns the
        incarnation. LeaseError if a live process holds this node id, or (`exclusive`) if
        any other node is live or owns open segments (a dead node's segments wait for it)."""
        with self.engine.transaction() as db:
            db.execute("LOCK TABLE nodes IN SHARE ROW EXCLUSIVE MODE")
            if exclusive:
                live = db.all(
                    "SELECT node_id FROM nodes WHERE node_id <> ? AND lease_expires > now()",
                    (node_id,),
                )
                if live:
                    raise LeaseError(
                        f"node(s) {sorted(r[0] for r in live)} hold a live lease on this "
                        "database; this build serves one active node per database"
                    )
            row = db.one(
                "INSERT INTO nodes VALUES (?, ?, ?, 1, now() + make_interval(secs => ?)) "
                "ON CONFLICT (node_id) DO UPDATE SET host = excluded.host, "
                "port = excluded.port, incarnation = nodes.incarnation + 1, "
                "lease_expires = excluded.lease_expires "
                "WHERE nodes.lease_expires <= now() RETURNING incarnation",
                (node_id, host, port, lease_s),
            )
            if row is None:
                raise LeaseError(f"node id {node_id} is held by a live process")
            if exclusive:
                others = db.all(
                    "SELECT DISTINCT owner_node FROM segments WHERE NOT sealed "
                    "AND owner_node IS NOT NULL AND owner_node <> ?",
                    (node_id,),
                )
                if others:
                    # Their tier-1 logs are on those nodes' disks: they must come back.
                    raise LeaseError(
                        f"open segments belong to node(s) {sorted(r[0] for r in others)}; "
                        "start that node id with its data dir"
                    )
            db.execute(
                "UPDATE segments SET owner_node = ?, owner_epoch = owner_epoch + 1 "
                "WHERE NOT sealed AND (owner_node IS NULL OR owner_node = ?)",
                (node_id, node_id),
            )
            return int(row[0])

    def renew_lease(self, node_id: int, incarnation: int, lease_s: float) -> bool:
        """Extend the lease if this incarnation still holds it (compare-and-set); False when
        it was lost (expired and taken over, or re-registered)."""
        with self._lease_lock:
            if self._lease_db is None or self._lease_db.closed or self._lease_db.broken:
                self._lease_db = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=5, application_name=self.session_name
                )
            row = Handle(self._lease_db, POSTGRESQL).one(
                "UPDATE nodes SET lease_expires = now() + make_interval(secs => ?) "
                "WHERE node_id = ? AND incarnation = ? AND lease_expires > now() "
                "RETURNING node_id",
                (lease_s, node_id, incarnation),
            )
        return row is not None

    def release_lease(self, node_id: int, incarnation: int) -> None:
        """Clean stop: expire the lease now so another node may claim at once."""
        with self.engine.transaction() as db:
            db.execute(
                "UPDATE nodes SET lease_expires = now() WHERE node_id = ? AND incarnation = ?",
                (node_id, incarnation),
            )

    def nodes(self) -> list[NodeRecord]:
        with self.engine.read() as db:
            rows = db.all(
                "SELECT node_id, host, port, incarnation, lease_expires > now(), "
                "EXTRACT(EPOCH FROM lease_expires - now()) FROM nodes ORDER BY node_id"
            )
        return [NodeRecord(n, h, p, i, live, float(left)) for n, h, p, i, live, left in rows]

    def topic_owners(self) -> dict[str, int]:
        """topic -> the node owning its open segments (one per topic: see scale_segments)."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT topic, min(owner_node) FROM segments WHERE NOT sealed "
                "AND owner_node IS NOT NULL GROUP BY topic"
            )
        return {str(topic): int(node) for topic, node in rows}

    def segment_owners(self, name: str) -> dict[int, SegmentOwner]:
        """segment id -> its owner node and owner epoch, for the topic's segments."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT segment_id, owner_node, owner_epoch FROM segments WHERE topic = ?",
                (name,),
            )
        return {sid: SegmentOwner(node, epoch) for sid, node, epoch in rows}

    # --- placement and moving segments (README "Placement and moving segments") ---------

    def create_topic_placed(self, topic: TopicRecord, owners: list[int]) -> None:
        """Create a topic whose segments (in `topic.segments` order) are owned by `owners`;
        TopicExistsError when another node created it first."""
        self._insert_topic(topic, owners)

    def node_loads(self) -> dict[int, int]:
        """Live node -> open segments it owns (the placement load)."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT n.node_id, count(s.segment_id) FROM nodes n LEFT JOIN segments s "
                "ON s.owner_node = n.node_id AND NOT s.sealed "
                "WHERE n.lease_expires > now() GROUP BY n.node_id"
            )
        return {int(node): int(count) for node, count in rows}

    def _wal_fenced(
        self, db: Handle, node_id: int, incarnation: int, ranges: Sequence[WalRange]
    ) -> bool:
        """A write-ahead object commits only while its node holds its lease in this
        incarnation and owns every segment written (rows locked: a takeover in flight waits
        for this commit or makes it fail)."""
        row = db.one(
            "SELECT 1 FROM nodes WHERE node_id = ? AND incarnation = ? "
            "AND lease_expires > now() FOR UPDATE",
            (node_id, incarnation),
        )
        if row is None:
            return True
        for topic, segment_id in sorted({(r.topic, r.segment_id) for r in ranges}):
            owner = db.one(
                "SELECT owner_node FROM segments WHERE topic = ? AND segment_id = ? FOR UPDATE",
                (topic, segment_id),
            )
            if owner is not None and owner[0] is not None and owner[0] != node_id:
                return True
        return False

    def orphaned_segments(self) -> list[OpenSegment]:
        """Open segments whose owner node's lease has expired (a dead or frozen node)."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT s.topic, s.segment_id, s.first_partition, s.last_partition, "
                "s.owner_node FROM segments s JOIN nodes n ON n.node_id = s.owner_node "
                "WHERE NOT s.sealed AND n.lease_expires <= now()"
            )
        return [OpenSegment(str(t), int(s), int(f), int(la), int(o)) for t, s, f, la, o in rows]

    def end_expired_sessions(self, node_id: int) -> int:
        """End the database sessions of node `node_id` that are inside a transaction begun
        before its lease expired (a frozen node's; the server's idle timeout misses one
        stopped in the middle of a pipeline), so its row locks cannot hold a takeover up.
        Only once its lease has expired; returns how many were ended."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a JOIN nodes n "
                "ON n.node_id = ? WHERE n.lease_expires <= now() AND a.application_name = ? "
                "AND a.xact_start < n.lease_expires AND a.pid <> pg_backend_pid()",
                (node_id, session_name(node_id)),
            )
        return sum(1 for (ended,) in rows if ended)

    def take_over_segment(self, name: str, segment_id: int, from_node: int, to_node: int) -> bool:
        """Make `to_node` the owner of a dead node's open segment: a compare-and-set on the
        owner, under the dead node's row lock and only once its lease has expired, so that
        none of its write-ahead commits (which hold that lock and need a live lease) can
        land after this. False when refused (the node is back, or another took it)."""
        try:
            with self.engine.transaction() as db:
                # a frozen node may hold its row inside a commit: try again next round
                # (its session ends: PostgresEngine) rather than stall this node's sync
                db.execute("SET LOCAL lock_timeout = '200ms'")
                dead = db.one(
                    "SELECT 1 FROM nodes WHERE node_id = ? AND lease_expires <= now() FOR UPDATE",
                    (from_node,),
                )
                if dead is None:
                    return False
                cursor = db.execute(
                    "UPDATE segments SET owner_node = ?, owner_epoch = owner_epoch + 1 "
                    "WHERE topic = ? AND segment_id = ? AND owner_node = ? AND NOT sealed",
                    (to_node, name, segment_id, from_node),
                )
                return cursor.rowcount == 1
        except psycopg.errors.LockNotAvailable:
            return False

    def _chunk_fenced(self, db: Handle, name: str, segment_id: int) -> bool:
        """A chunk commits only from the segment's owner: a node whose segment was taken
        over must not record chunks cut from its stale local log."""
        if self.node_id is None:
            return False
        row = db.one(
            "SELECT owner_node FROM segments WHERE topic = ? AND segment_id = ?",
            (name, segment_id),
        )
        return row is not None and row[0] is not None and row[0] != self.node_id

    def open_segments(self) -> list[OpenSegment]:
        """Every open segment that has an owner."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT topic, segment_id, first_partition, last_partition, owner_node "
                "FROM segments WHERE NOT sealed AND owner_node IS NOT NULL"
            )
        return [OpenSegment(str(t), int(s), int(f), int(la), int(o)) for t, s, f, la, o in rows]

    def hand_over(
        self,
        name: str,
        seal: list[int],
        successors: list[SegmentRecord],
        owners: list[int],
        from_node: int,
    ) -> None:
        """Seal `seal` and open `successors` owned by `owners`, in one transaction: a
        compare-and-set on the sealed segments' owner (each must be open and owned by
        `from_node`, epochs locked with FOR UPDATE), so two nodes never own one partition.
        ValueError when refused (nothing changed)."""
        try:
            with self.engine.transaction() as db:
                for segment_id in seal:
                    row = db.one(
                        "SELECT owner_node FROM segments WHERE topic = ? AND segment_id = ? "
                        "AND NOT sealed FOR UPDATE",
                        (name, segment_id),
                    )
                    if row is None or row[0] != from_node:
                        owner = "nobody" if row is None else f"node {row[0]}"
                        raise ValueError(
                            f"segment {segment_id} of {name!r} is not an open segment of node "
                            f"{from_node} (open segment of {owner})"
                        )
                    db.execute(
                        "UPDATE segments SET sealed = TRUE, owner_epoch = owner_epoch + 1 "
                        "WHERE topic = ? AND segment_id = ?",
                        (name, segment_id),
                    )
                insert_segments(db, name, successors, owners)
        except psycopg.errors.UniqueViolation as exc:
            raise ValueError(f"successor segment of {name!r} already exists: {exc}") from None
