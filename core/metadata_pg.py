"""The metadata store on PostgreSQL (psycopg 3): the same methods as `SQLiteMetadataStore`,
for gateway nodes that share one database.

psycopg 3 because it is the maintained successor of psycopg2, ships binary wheels
(`psycopg[binary]`) and has real server-side parameters and `executemany` pipelining.

The schema is created and migrated by streamgate: `schema_version` holds the last applied
step of `_MIGRATIONS`; every node applies the missing steps at start, under a transaction
advisory lock so two nodes starting together do not race.

Nodes and leases (see docs/several-nodes.md): each node has a row in `nodes` with a lease
that expires at a time of the *database's* clock (`now()`), so nodes never compare their own
clocks. Registering bumps the node's `incarnation`; renewing is a compare-and-set on it, so a
node that was frozen past its lease and replaced cannot renew. Open segments carry
`owner_node` and `owner_epoch`; a claim bumps the epoch in the same transaction.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass

import psycopg

from .acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from .acl.quotas import Entity
from .api import TopicError
from .errors import ErrorCode
from .metadata import (
    ChunkRecord,
    ChunkSlice,
    CommittedOffset,
    OpenTxnSnapshot,
    ProducerSnapshot,
    SegmentRecord,
    TopicRecord,
    TxnRecord,
)

# Each step runs once, in order, in one transaction with its schema_version bump.
_MIGRATIONS: list[str] = [
    # 1: the SQLite schema, in PostgreSQL types
    """
    CREATE TABLE topics (
        name TEXT PRIMARY KEY,
        topic_id TEXT NOT NULL UNIQUE,
        partitions INTEGER NOT NULL,
        configs TEXT NOT NULL,
        created_ms BIGINT NOT NULL
    );
    CREATE TABLE segments (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        segment_id INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        first_partition INTEGER NOT NULL,
        last_partition INTEGER NOT NULL,
        sealed BOOLEAN NOT NULL DEFAULT FALSE,
        uploaded_end BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (topic, segment_id)
    );
    CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    CREATE TABLE committed_offsets (
        group_id TEXT NOT NULL,
        topic TEXT NOT NULL,
        partition INTEGER NOT NULL,
        committed_offset BIGINT NOT NULL,
        leader_epoch INTEGER NOT NULL,
        metadata TEXT,
        commit_ms BIGINT NOT NULL,
        PRIMARY KEY (group_id, topic, partition)
    );
    CREATE INDEX committed_offsets_by_topic ON committed_offsets(topic);
    CREATE TABLE chunks (
        chunk_id BIGSERIAL PRIMARY KEY,
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        segment_id INTEGER NOT NULL,
        start_position BIGINT NOT NULL,
        end_position BIGINT NOT NULL,
        object_key TEXT NOT NULL,
        size BIGINT NOT NULL,
        created_ms BIGINT NOT NULL
    );
    CREATE INDEX chunks_by_topic ON chunks(topic, segment_id, start_position);
    CREATE TABLE chunk_slices (
        chunk_id BIGINT NOT NULL REFERENCES chunks(chunk_id) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        first_offset BIGINT NOT NULL,
        last_offset BIGINT NOT NULL,
        byte_start BIGINT NOT NULL,
        byte_length BIGINT NOT NULL,
        max_timestamp BIGINT NOT NULL,
        PRIMARY KEY (chunk_id, partition)
    );
    CREATE TABLE producer_states (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        producer_id BIGINT NOT NULL,
        epoch INTEGER NOT NULL,
        batches TEXT NOT NULL,
        PRIMARY KEY (topic, partition, producer_id)
    );
    CREATE TABLE log_starts (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        log_start_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition)
    );
    CREATE TABLE cluster (id INTEGER PRIMARY KEY CHECK (id = 1), cluster_id TEXT NOT NULL);
    """,
    # 2: nodes with leases, segment owners with fencing epochs
    """
    CREATE TABLE nodes (
        node_id INTEGER PRIMARY KEY,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        incarnation BIGINT NOT NULL,
        lease_expires TIMESTAMPTZ NOT NULL
    );
    ALTER TABLE segments ADD COLUMN owner_node INTEGER;
    ALTER TABLE segments ADD COLUMN owner_epoch BIGINT NOT NULL DEFAULT 0;
    """,
    # 3: transactions, ACLs, client quotas, compaction and SCRAM credentials (as on SQLite)
    """
    CREATE TABLE transactions (
        transactional_id TEXT PRIMARY KEY,
        producer_id BIGINT NOT NULL,
        epoch INTEGER NOT NULL,
        state TEXT NOT NULL,
        timeout_ms BIGINT NOT NULL,
        start_ms BIGINT NOT NULL,
        update_ms BIGINT NOT NULL,
        partitions TEXT NOT NULL,
        offsets TEXT NOT NULL
    );
    CREATE TABLE aborted_txns (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        producer_id BIGINT NOT NULL,
        first_offset BIGINT NOT NULL,
        last_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition, last_offset)
    );
    CREATE TABLE acls (
        resource_type INTEGER NOT NULL,
        resource_name TEXT NOT NULL,
        pattern_type INTEGER NOT NULL,
        principal TEXT NOT NULL,
        host TEXT NOT NULL,
        operation INTEGER NOT NULL,
        permission INTEGER NOT NULL,
        PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                     permission)
    );
    CREATE TABLE client_quotas (
        entity TEXT NOT NULL,
        quota_key TEXT NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (entity, quota_key)
    );
    CREATE TABLE compaction_state (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        compacted_end BIGINT NOT NULL,
        PRIMARY KEY (topic, partition)
    );
    CREATE TABLE scram_credentials (
        username TEXT NOT NULL,
        mechanism TEXT NOT NULL,
        salt BYTEA NOT NULL,
        iterations INTEGER NOT NULL,
        stored_key BYTEA NOT NULL,
        server_key BYTEA NOT NULL,
        PRIMARY KEY (username, mechanism)
    );
    """,
    # 4: open transactions as of a chunk commit (producer_id -1 holds the snapshot's end)
    """
    CREATE TABLE open_txns (
        topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
        partition INTEGER NOT NULL,
        producer_id BIGINT NOT NULL,
        first_offset BIGINT NOT NULL,
        PRIMARY KEY (topic, partition, producer_id)
    );
    """,
    # 5: dynamic broker configs (resource: a node id, or '' for the cluster default)
    """
    CREATE TABLE broker_configs (
        resource TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (resource, name)
    );
    """,
]

SCHEMA_VERSION = len(_MIGRATIONS)
_MIGRATION_LOCK = 0x5354_5247  # advisory lock key ("STRG")


class LeaseError(Exception):
    """This node cannot (or can no longer) hold its lease."""


@dataclass(slots=True)
class NodeRecord:
    node_id: int
    host: str
    port: int
    incarnation: int
    live: bool


class PostgresMetadataStore:
    """`MetadataStore` on one psycopg connection (the metadata worker thread and the rare
    event-loop writes share it under a lock, as with SQLite). Leases use a connection of
    their own so a renewal never waits behind a slow commit."""

    def __init__(self, url: str, node_id: int | None = None) -> None:
        self.url = url
        self.node_id = node_id  # owner of the segments of the topics this store creates
        self._db = psycopg.connect(url, autocommit=True)
        self._lock = threading.Lock()
        self._lease_db: psycopg.Connection | None = None
        self._lease_lock = threading.Lock()
        migrate(self._db)

    # --- cluster-wide --------------------------------------------------------------------

    def cluster_id(self) -> str:
        """The cluster's id, created by the first node (shared by every node)."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO cluster VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                (uuid.uuid4().hex[:22],),
            )
            row = db.execute("SELECT cluster_id FROM cluster WHERE id = 1").fetchone()
        assert row is not None
        return str(row[0])

    # --- topics and segments -------------------------------------------------------------

    def load_topics(self) -> list[TopicRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT name, topic_id, partitions, configs, created_ms FROM topics"
            ).fetchall()
            segments = self._db.execute(
                "SELECT topic, segment_id, epoch, first_partition, last_partition, sealed, "
                "uploaded_end FROM segments ORDER BY topic, segment_id"
            ).fetchall()
        topics = {
            name: TopicRecord(name, uuid.UUID(tid), parts, json.loads(configs), created)
            for name, tid, parts, configs, created in rows
        }
        for row in segments:
            if row[0] in topics:
                topics[row[0]].segments.append(
                    SegmentRecord(row[1], row[2], row[3], row[4], bool(row[5]), row[6])
                )
        return list(topics.values())

    def create_topic(self, topic: TopicRecord) -> None:
        """TopicError(TOPIC_ALREADY_EXISTS) when another node created it first."""
        topic.created_ms = topic.created_ms or int(time.time() * 1000)
        try:
            self._create_topic(topic)
        except psycopg.errors.UniqueViolation:
            raise TopicError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists"
            ) from None

    def _create_topic(self, topic: TopicRecord) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO topics VALUES (%s, %s, %s, %s, %s)",
                (
                    topic.name,
                    str(topic.topic_id),
                    topic.partitions,
                    json.dumps(topic.configs),
                    topic.created_ms,
                ),
            )
            db.cursor().executemany(
                "INSERT INTO segments (topic, segment_id, epoch, first_partition, "
                "last_partition, sealed, uploaded_end, owner_node, owner_epoch) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 1)",
                [
                    (
                        topic.name,
                        s.segment_id,
                        s.epoch,
                        s.first_partition,
                        s.last_partition,
                        s.sealed,
                        s.uploaded_end,
                        self.node_id,
                    )
                    for s in topic.segments
                ],
            )

    def delete_topic(self, name: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM topics WHERE name = %s", (name,))
            db.execute("DELETE FROM committed_offsets WHERE topic = %s", (name,))

    def topic_heads(self) -> dict[str, tuple[uuid.UUID, int, dict[str, str]]]:
        """name -> (topic id, partition count, configs): what other nodes compare (sync)."""
        with self._lock:
            rows = self._db.execute("SELECT name, topic_id, partitions, configs FROM topics")
            return {
                name: (uuid.UUID(tid), parts, json.loads(configs))
                for name, tid, parts, configs in rows.fetchall()
            }

    def update_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE topics SET configs = %s WHERE name = %s", (json.dumps(configs), name)
            )
            if cursor.rowcount != 1:
                raise KeyError(name)

    def grow_partitions(self, name: str, partitions: int, segment_id: int) -> None:
        with self._transaction() as db:
            row = db.execute(
                "SELECT partitions FROM topics WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            if row is None or row[0] >= partitions:
                raise ValueError(f"topic {name!r} cannot grow to {partitions} partitions")
            db.execute("UPDATE topics SET partitions = %s WHERE name = %s", (partitions, name))
            cursor = db.execute(
                "UPDATE segments SET last_partition = %s WHERE topic = %s AND segment_id = %s "
                "AND NOT sealed AND last_partition = %s",
                (partitions - 1, name, segment_id, row[0] - 1),
            )
            if cursor.rowcount != 1:
                raise ValueError(f"segment {segment_id} of {name!r} does not own the tail")

    def scale_segments(self, name: str, seal: list[int], successors: list[SegmentRecord]) -> None:
        try:
            with self._transaction() as db:
                owner = None
                for segment_id in seal:
                    row = db.execute(
                        "UPDATE segments SET sealed = TRUE WHERE topic = %s AND segment_id = %s "
                        "AND NOT sealed RETURNING owner_node",
                        (name, segment_id),
                    ).fetchone()
                    if row is None:
                        raise ValueError(f"segment {segment_id} of {name!r} is not open")
                    owner = row[0] if owner is None else owner
                # Successors start on the node that sealed their predecessors.
                db.cursor().executemany(
                    "INSERT INTO segments (topic, segment_id, epoch, first_partition, "
                    "last_partition, owner_node, owner_epoch) "
                    "VALUES (%s, %s, %s, %s, %s, %s, 1)",
                    [
                        (name, s.segment_id, s.epoch, s.first_partition, s.last_partition, owner)
                        for s in successors
                    ],
                )
        except psycopg.errors.UniqueViolation as exc:
            raise ValueError(f"successor segment of {name!r} already exists: {exc}") from None

    def next_counter(self, name: str) -> int:
        with self._transaction() as db:
            row = db.execute(
                "INSERT INTO counters VALUES (%s, 0) ON CONFLICT (name) DO UPDATE "
                "SET value = counters.value + 1 RETURNING value",
                (name,),
            ).fetchone()
        assert row is not None
        return int(row[0])

    # --- tier 2 ----------------------------------------------------------------------------

    def load_chunks(self, name: str) -> list[ChunkRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT chunk_id, segment_id, start_position, end_position, object_key, size, "
                "created_ms FROM chunks WHERE topic = %s ORDER BY segment_id, start_position",
                (name,),
            ).fetchall()
            slices = self._db.execute(
                "SELECT s.chunk_id, s.partition, s.first_offset, s.last_offset, s.byte_start, "
                "s.byte_length, s.max_timestamp FROM chunk_slices s JOIN chunks c "
                "ON c.chunk_id = s.chunk_id WHERE c.topic = %s ORDER BY s.chunk_id, s.partition",
                (name,),
            ).fetchall()
        chunks: dict[int, ChunkRecord] = {}
        for chunk_id, segment_id, start, end, key, size, created_ms in rows:
            chunks[chunk_id] = ChunkRecord(
                segment_id, start, end, key, size, chunk_id=chunk_id, created_ms=created_ms
            )
        for chunk_id, partition, first, last, start, length, max_ts in slices:
            chunks[chunk_id].slices.append(
                ChunkSlice(partition, first, last, start, length, max_ts, chunk_id)
            )
        return list(chunks.values())

    def commit_chunk(
        self, name: str, chunk: ChunkRecord, producers: list[ProducerSnapshot] | None = None
    ) -> int:
        chunk.created_ms = chunk.created_ms or int(time.time() * 1000)
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE segments SET uploaded_end = GREATEST(uploaded_end, %s) "
                "WHERE topic = %s AND segment_id = %s",
                (chunk.end_position, name, chunk.segment_id),
            )
            if cursor.rowcount != 1:
                raise KeyError(f"{name} segment {chunk.segment_id}")
            row = db.execute(
                "INSERT INTO chunks (topic, segment_id, start_position, end_position, "
                "object_key, size, created_ms) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "RETURNING chunk_id",
                (
                    name,
                    chunk.segment_id,
                    chunk.start_position,
                    chunk.end_position,
                    chunk.object_key,
                    chunk.size,
                    chunk.created_ms,
                ),
            ).fetchone()
            assert row is not None
            chunk_id = int(row[0])
            cur = db.cursor()
            cur.executemany(
                "INSERT INTO chunk_slices VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(chunk_id, *s.row()) for s in chunk.slices],
            )
            cur.executemany(
                "INSERT INTO producer_states VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (topic, partition, producer_id) DO UPDATE SET "
                "epoch = excluded.epoch, batches = excluded.batches",
                [
                    (name, p.partition, p.producer_id, p.epoch, json.dumps(p.batches))
                    for p in producers or ()
                ],
            )
        chunk.chunk_id = chunk_id
        for s in chunk.slices:
            s.chunk_id = chunk_id
        return chunk_id

    def delete_chunks(self, name: str, chunk_ids: list[int], log_starts: dict[int, int]) -> None:
        with self._transaction() as db:
            _upsert_log_starts(db, name, log_starts)
            db.cursor().executemany(
                "DELETE FROM chunks WHERE chunk_id = %s", [(c,) for c in chunk_ids]
            )

    def replace_chunks(
        self,
        name: str,
        old_ids: list[int],
        new_chunks: list[ChunkRecord],
        compacted_ends: dict[int, int],
    ) -> None:
        """Compaction's swap in one transaction (see SQLiteMetadataStore.replace_chunks);
        KeyError, nothing changed, when an old chunk is gone already."""
        with self._transaction() as db:
            # FOR UPDATE: a concurrent retention delete of these chunks waits for us.
            found = db.execute(
                "SELECT chunk_id FROM chunks WHERE topic = %s AND chunk_id = ANY(%s) FOR UPDATE",
                (name, old_ids),
            ).fetchall()
            if len(found) != len(old_ids):
                raise KeyError(f"{name}: {len(old_ids) - len(found)} chunks to replace are gone")
            cur = db.cursor()
            for chunk in new_chunks:
                row = db.execute(
                    "INSERT INTO chunks (topic, segment_id, start_position, end_position, "
                    "object_key, size, created_ms) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                    "RETURNING chunk_id",
                    (
                        name,
                        chunk.segment_id,
                        chunk.start_position,
                        chunk.end_position,
                        chunk.object_key,
                        chunk.size,
                        chunk.created_ms,
                    ),
                ).fetchone()
                assert row is not None
                chunk.chunk_id = int(row[0])
                cur.executemany(
                    "INSERT INTO chunk_slices VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(chunk.chunk_id, *s.row()) for s in chunk.slices],
                )
            db.execute("DELETE FROM chunks WHERE chunk_id = ANY(%s)", (old_ids,))
            cur.executemany(
                "INSERT INTO compaction_state VALUES (%s, %s, %s) "
                "ON CONFLICT (topic, partition) DO UPDATE SET compacted_end = "
                "GREATEST(compaction_state.compacted_end, excluded.compacted_end)",
                [(name, p, end) for p, end in compacted_ends.items()],
            )
        for chunk in new_chunks:
            for s in chunk.slices:
                s.chunk_id = chunk.chunk_id

    def load_compacted_ends(self, name: str) -> dict[int, int]:
        with self._lock:
            rows = self._db.execute(
                "SELECT partition, compacted_end FROM compaction_state WHERE topic = %s",
                (name,),
            ).fetchall()
        return {int(p): int(end) for p, end in rows}

    def load_producer_states(self, name: str) -> list[ProducerSnapshot]:
        with self._lock:
            rows = self._db.execute(
                "SELECT partition, producer_id, epoch, batches FROM producer_states "
                "WHERE topic = %s",
                (name,),
            ).fetchall()
        return [
            ProducerSnapshot(partition, producer_id, epoch, [tuple(b) for b in json.loads(raw)])
            for partition, producer_id, epoch, raw in rows
        ]

    def load_log_starts(self, name: str) -> dict[int, int]:
        with self._lock:
            rows = self._db.execute(
                "SELECT partition, log_start_offset FROM log_starts WHERE topic = %s", (name,)
            ).fetchall()
        return {int(p): int(o) for p, o in rows}

    def set_log_starts(self, name: str, log_starts: dict[int, int]) -> None:
        with self._transaction() as db:
            _upsert_log_starts(db, name, log_starts)

    # --- committed offsets -----------------------------------------------------------------

    def load_offsets(self) -> list[CommittedOffset]:
        return self._select_offsets("", ())

    def load_group_offsets(self, group_id: str) -> list[CommittedOffset]:
        """One group's committed offsets (several nodes: read before an OffsetFetch)."""
        return self._select_offsets("WHERE group_id = %s", (group_id,))

    def _select_offsets(self, where: str, params: tuple[str, ...]) -> list[CommittedOffset]:
        with self._lock:
            rows = self._db.execute(
                "SELECT group_id, topic, partition, committed_offset, leader_epoch, metadata, "
                f"commit_ms FROM committed_offsets {where} ORDER BY group_id, topic, partition",
                params,
            ).fetchall()
        return [CommittedOffset(*row) for row in rows]

    def commit_offsets(self, offsets: list[CommittedOffset]) -> None:
        with self._transaction() as db:
            db.cursor().executemany(
                "INSERT INTO committed_offsets VALUES (%s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
                "committed_offset = excluded.committed_offset, "
                "leader_epoch = excluded.leader_epoch, metadata = excluded.metadata, "
                "commit_ms = excluded.commit_ms",
                [astuple(o) for o in offsets],
            )

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None
    ) -> None:
        with self._transaction() as db:
            if partitions is None:
                db.execute("DELETE FROM committed_offsets WHERE group_id = %s", (group_id,))
            else:
                db.cursor().executemany(
                    "DELETE FROM committed_offsets "
                    "WHERE group_id = %s AND topic = %s AND partition = %s",
                    [(group_id, topic, partition) for topic, partition in partitions],
                )

    # --- transactions (core/txn) ------------------------------------------------------------

    def load_transactions(self) -> list[TxnRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT transactional_id, producer_id, epoch, state, timeout_ms, start_ms, "
                "update_ms, partitions, offsets FROM transactions"
            ).fetchall()
        return [
            TxnRecord(
                *row[:7],
                partitions=[(t, p) for t, p in json.loads(row[7])],
                offsets=[tuple(o) for o in json.loads(row[8])],  # type: ignore[misc]
            )
            for row in rows
        ]

    def save_transaction(self, txn: TxnRecord) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO transactions VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (transactional_id) DO UPDATE SET "
                "producer_id = excluded.producer_id, epoch = excluded.epoch, "
                "state = excluded.state, timeout_ms = excluded.timeout_ms, "
                "start_ms = excluded.start_ms, update_ms = excluded.update_ms, "
                "partitions = excluded.partitions, offsets = excluded.offsets",
                (
                    txn.transactional_id,
                    txn.producer_id,
                    txn.epoch,
                    txn.state,
                    txn.timeout_ms,
                    txn.start_ms,
                    txn.update_ms,
                    json.dumps(txn.partitions),
                    json.dumps(txn.offsets),
                ),
            )

    def load_aborted_txns(self, name: str) -> list[tuple[int, int, int, int]]:
        """(partition, producer id, first offset, last offset) of the topic's aborts."""
        with self._lock:
            rows = self._db.execute(
                "SELECT partition, producer_id, first_offset, last_offset FROM aborted_txns "
                "WHERE topic = %s ORDER BY last_offset",
                (name,),
            ).fetchall()
        return [(int(p), int(pid), int(first), int(last)) for p, pid, first, last in rows]

    def add_aborted_txns(self, name: str, rows: list[tuple[int, int, int, int]]) -> None:
        with self._transaction() as db:
            db.cursor().executemany(
                "INSERT INTO aborted_txns VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(name, *row) for row in rows],
            )

    def save_open_txns(self, name: str, snapshots: list[OpenTxnSnapshot]) -> None:
        """Replace each partition's open transactions with a newer snapshot, atomically."""
        with self._transaction() as db:
            for snap in snapshots:
                row = db.execute(
                    "SELECT first_offset FROM open_txns "
                    "WHERE topic = %s AND partition = %s AND producer_id = -1 FOR UPDATE",
                    (name, snap.partition),
                ).fetchone()
                if row is not None and int(row[0]) > snap.as_of:
                    continue  # an older snapshot committed late: keep the newer one
                db.execute(
                    "DELETE FROM open_txns WHERE topic = %s AND partition = %s",
                    (name, snap.partition),
                )
                db.cursor().executemany(
                    "INSERT INTO open_txns VALUES (%s, %s, %s, %s)",
                    [(name, snap.partition, -1, snap.as_of)]
                    + [(name, snap.partition, pid, first) for pid, first in snap.open.items()],
                )

    def load_open_txns(self, name: str) -> list[tuple[int, int, int]]:
        """(partition, producer id, first offset) of the topic's saved open transactions."""
        with self._lock:
            rows = self._db.execute(
                "SELECT partition, producer_id, first_offset FROM open_txns "
                "WHERE topic = %s AND producer_id >= 0",
                (name,),
            ).fetchall()
        return [(int(p), int(pid), int(first)) for p, pid, first in rows]

    # --- ACLs and client quotas (core/acl) -----------------------------------------------

    def load_acls(self) -> list[AclBinding]:
        with self._lock:
            rows = self._db.execute(
                "SELECT resource_type, resource_name, pattern_type, principal, host, "
                "operation, permission FROM acls"
            ).fetchall()
        return [
            AclBinding(
                ResourceType(r[0]),
                r[1],
                PatternType(r[2]),
                r[3],
                r[4],
                Operation(r[5]),
                Permission(r[6]),
            )
            for r in rows
        ]

    def add_acls(self, acls: list[AclBinding]) -> None:
        with self._transaction() as db:
            db.cursor().executemany(
                "INSERT INTO acls VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [_acl_row(a) for a in acls],
            )

    def delete_acls(self, acls: list[AclBinding]) -> None:
        with self._transaction() as db:
            db.cursor().executemany(
                "DELETE FROM acls WHERE resource_type = %s AND resource_name = %s AND "
                "pattern_type = %s AND principal = %s AND host = %s AND operation = %s AND "
                "permission = %s",
                [_acl_row(a) for a in acls],
            )

    def load_client_quotas(self) -> dict[Entity, dict[str, float]]:
        with self._lock:
            rows = self._db.execute("SELECT entity, quota_key, value FROM client_quotas").fetchall()
        quotas: dict[Entity, dict[str, float]] = {}
        for entity, key, value in rows:
            parts = tuple((kind, name) for kind, name in json.loads(entity))
            quotas.setdefault(parts, {})[key] = float(value)
        return quotas

    def alter_client_quotas(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        with self._transaction() as db:
            for entity, ops in changes:
                key = json.dumps(entity)  # the same text as SQLite's, so lookups match
                for name, value in ops.items():
                    if value is None:
                        db.execute(
                            "DELETE FROM client_quotas WHERE entity = %s AND quota_key = %s",
                            (key, name),
                        )
                    else:
                        db.execute(
                            "INSERT INTO client_quotas VALUES (%s, %s, %s) ON CONFLICT "
                            "(entity, quota_key) DO UPDATE SET value = excluded.value",
                            (key, name, value),
                        )

    def load_broker_configs(self) -> dict[str, dict[str, str]]:
        with self._lock:
            rows = self._db.execute("SELECT resource, name, value FROM broker_configs").fetchall()
        configs: dict[str, dict[str, str]] = {}
        for resource, name, value in rows:
            configs.setdefault(resource, {})[name] = value
        return configs

    def save_broker_configs(self, resource: str, configs: dict[str, str]) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM broker_configs WHERE resource = %s", (resource,))
            db.cursor().executemany(
                "INSERT INTO broker_configs VALUES (%s, %s, %s)",
                [(resource, name, value) for name, value in configs.items()],
            )

    # --- nodes, leases and segment owners ---------------------------------------------------

    def register_node(
        self, node_id: int, host: str, port: int, lease_s: float, exclusive: bool
    ) -> int:
        """Take node `node_id`'s lease (a new incarnation) and claim every open segment that
        is unowned or owned by this node id, bumping each one's owner epoch; returns the
        incarnation. LeaseError if a live process holds this node id, or (`exclusive`) if
        any other node is live or owns open segments (a dead node's segments wait for it)."""
        with self._transaction() as db:
            db.execute("LOCK TABLE nodes IN SHARE ROW EXCLUSIVE MODE")
            if exclusive:
                live = db.execute(
                    "SELECT node_id FROM nodes WHERE node_id <> %s AND lease_expires > now()",
                    (node_id,),
                ).fetchall()
                if live:
                    raise LeaseError(
                        f"node(s) {sorted(r[0] for r in live)} hold a live lease on this "
                        "database; this build serves one active node per database"
                    )
            row = db.execute(
                "INSERT INTO nodes VALUES (%s, %s, %s, 1, now() + make_interval(secs => %s)) "
                "ON CONFLICT (node_id) DO UPDATE SET host = excluded.host, "
                "port = excluded.port, incarnation = nodes.incarnation + 1, "
                "lease_expires = excluded.lease_expires "
                "WHERE nodes.lease_expires <= now() RETURNING incarnation",
                (node_id, host, port, lease_s),
            ).fetchone()
            if row is None:
                raise LeaseError(f"node id {node_id} is held by a live process")
            if exclusive:
                others = db.execute(
                    "SELECT DISTINCT owner_node FROM segments WHERE NOT sealed "
                    "AND owner_node IS NOT NULL AND owner_node <> %s",
                    (node_id,),
                ).fetchall()
                if others:
                    # Their tier-1 logs are on those nodes' disks: they must come back.
                    raise LeaseError(
                        f"open segments belong to node(s) {sorted(r[0] for r in others)}; "
                        "start that node id with its data dir"
                    )
            db.execute(
                "UPDATE segments SET owner_node = %s, owner_epoch = owner_epoch + 1 "
                "WHERE NOT sealed AND (owner_node IS NULL OR owner_node = %s)",
                (node_id, node_id),
            )
            return int(row[0])

    def renew_lease(self, node_id: int, incarnation: int, lease_s: float) -> bool:
        """Extend the lease if this incarnation still holds it (compare-and-set); False when
        it was lost (expired and taken over, or re-registered)."""
        with self._lease_lock:
            if self._lease_db is None:
                self._lease_db = psycopg.connect(self.url, autocommit=True)
            row = self._lease_db.execute(
                "UPDATE nodes SET lease_expires = now() + make_interval(secs => %s) "
                "WHERE node_id = %s AND incarnation = %s AND lease_expires > now() "
                "RETURNING node_id",
                (lease_s, node_id, incarnation),
            ).fetchone()
        return row is not None

    def release_lease(self, node_id: int, incarnation: int) -> None:
        """Clean stop: expire the lease now so another node may claim at once."""
        with self._transaction() as db:
            db.execute(
                "UPDATE nodes SET lease_expires = now() WHERE node_id = %s AND incarnation = %s",
                (node_id, incarnation),
            )

    def nodes(self) -> list[NodeRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT node_id, host, port, incarnation, lease_expires > now() FROM nodes "
                "ORDER BY node_id"
            ).fetchall()
        return [NodeRecord(*row) for row in rows]

    def topic_owners(self) -> dict[str, int]:
        """topic -> the node owning its open segments (one per topic: see scale_segments)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT topic, min(owner_node) FROM segments WHERE NOT sealed "
                "AND owner_node IS NOT NULL GROUP BY topic"
            ).fetchall()
        return {str(topic): int(node) for topic, node in rows}

    # --- placement and moving segments (docs/several-nodes.md) ---------------------------

    def create_topic_placed(self, topic: TopicRecord, owners: list[int]) -> None:
        """Create a topic whose segments (in `topic.segments` order) are owned by `owners`;
        TopicError(TOPIC_ALREADY_EXISTS) when another node created it first."""
        topic.created_ms = topic.created_ms or int(time.time() * 1000)
        try:
            with self._transaction() as db:
                db.execute(
                    "INSERT INTO topics VALUES (%s, %s, %s, %s, %s)",
                    (
                        topic.name,
                        str(topic.topic_id),
                        topic.partitions,
                        json.dumps(topic.configs),
                        topic.created_ms,
                    ),
                )
                db.cursor().executemany(
                    "INSERT INTO segments (topic, segment_id, epoch, first_partition, "
                    "last_partition, owner_node, owner_epoch) VALUES (%s, %s, %s, %s, %s, %s, 1)",
                    [
                        (topic.name, s.segment_id, s.epoch, s.first_partition, s.last_partition, o)
                        for s, o in zip(topic.segments, owners, strict=True)
                    ],
                )
        except psycopg.errors.UniqueViolation:
            raise TopicError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists"
            ) from None

    def node_loads(self) -> dict[int, int]:
        """Live node -> open segments it owns (the placement load)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT n.node_id, count(s.segment_id) FROM nodes n LEFT JOIN segments s "
                "ON s.owner_node = n.node_id AND NOT s.sealed "
                "WHERE n.lease_expires > now() GROUP BY n.node_id"
            ).fetchall()
        return {int(node): int(count) for node, count in rows}

    def open_segments(self) -> list[tuple[str, int, int, int, int]]:
        """Every open segment: (topic, segment id, first, last, owner node)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT topic, segment_id, first_partition, last_partition, owner_node "
                "FROM segments WHERE NOT sealed AND owner_node IS NOT NULL"
            ).fetchall()
        return [(str(t), int(s), int(f), int(la), int(o)) for t, s, f, la, o in rows]

    def load_segments(self, name: str) -> list[tuple[SegmentRecord, int | None]]:
        """The topic's segments with their owner nodes, by id."""
        with self._lock:
            rows = self._db.execute(
                "SELECT segment_id, epoch, first_partition, last_partition, sealed, "
                "uploaded_end, owner_node FROM segments WHERE topic = %s ORDER BY segment_id",
                (name,),
            ).fetchall()
        return [(SegmentRecord(r[0], r[1], r[2], r[3], bool(r[4]), r[5]), r[6]) for r in rows]

    def save_producer_states(self, name: str, producers: list[ProducerSnapshot]) -> None:
        with self._transaction() as db:
            db.cursor().executemany(
                "INSERT INTO producer_states VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (topic, partition, producer_id) DO UPDATE SET "
                "epoch = excluded.epoch, batches = excluded.batches",
                [
                    (name, p.partition, p.producer_id, p.epoch, json.dumps(p.batches))
                    for p in producers
                ],
            )

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
            with self._transaction() as db:
                for segment_id in seal:
                    row = db.execute(
                        "SELECT owner_node FROM segments WHERE topic = %s AND segment_id = %s "
                        "AND NOT sealed FOR UPDATE",
                        (name, segment_id),
                    ).fetchone()
                    if row is None or row[0] != from_node:
                        owner = "nobody" if row is None else f"node {row[0]}"
                        raise ValueError(
                            f"segment {segment_id} of {name!r} is not an open segment of node "
                            f"{from_node} (open segment of {owner})"
                        )
                    db.execute(
                        "UPDATE segments SET sealed = TRUE, owner_epoch = owner_epoch + 1 "
                        "WHERE topic = %s AND segment_id = %s",
                        (name, segment_id),
                    )
                db.cursor().executemany(
                    "INSERT INTO segments (topic, segment_id, epoch, first_partition, "
                    "last_partition, owner_node, owner_epoch) VALUES (%s, %s, %s, %s, %s, %s, 1)",
                    [
                        (name, s.segment_id, s.epoch, s.first_partition, s.last_partition, o)
                        for s, o in zip(successors, owners, strict=True)
                    ],
                )
        except psycopg.errors.UniqueViolation as exc:
            raise ValueError(f"successor segment of {name!r} already exists: {exc}") from None

    def segment_owners(self, name: str) -> dict[int, tuple[int | None, int]]:
        """segment id -> (owner node, owner epoch) for the topic's segments."""
        with self._lock:
            rows = self._db.execute(
                "SELECT segment_id, owner_node, owner_epoch FROM segments WHERE topic = %s",
                (name,),
            ).fetchall()
        return {sid: (node, epoch) for sid, node, epoch in rows}

    def close(self) -> None:
        self._db.close()
        if self._lease_db is not None:
            self._lease_db.close()

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection]:
        with self._lock, self._db.transaction():
            yield self._db


def migrate(db: psycopg.Connection) -> int:
    """Apply the missing schema steps; returns the schema version now in place."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = db.execute("SELECT max(version) FROM schema_version").fetchone()
        current = int(row[0]) if row and row[0] is not None else 0
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"database schema version {current} is newer than this streamgate's "
                f"({SCHEMA_VERSION}): upgrade streamgate"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            db.execute(_MIGRATIONS[version - 1].encode())
            db.execute("INSERT INTO schema_version VALUES (%s)", (version,))
    return SCHEMA_VERSION


def _acl_row(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    # Plain ints: the columns are INTEGER whatever psycopg's Enum adaptation would do.
    return (
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission),
    )


def _upsert_log_starts(db: psycopg.Connection, name: str, log_starts: dict[int, int]) -> None:
    db.cursor().executemany(
        "INSERT INTO log_starts VALUES (%s, %s, %s) ON CONFLICT (topic, partition) DO UPDATE "
        "SET log_start_offset = GREATEST(log_starts.log_start_offset, "
        "excluded.log_start_offset)",
        [(name, partition, offset) for partition, offset in log_starts.items()],
    )
