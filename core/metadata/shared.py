"""The metadata store's queries, written once for SQLite and PostgreSQL.

Every change that must be atomic (a topic with its first segment, a scale event sealing
and opening segments, a chunk with its slices and producer states) is one transaction of
the engine. The engines (sqlite.py, postgres.py) only connect and say their dialect;
postgres.py adds what only a shared database has (nodes, leases, placement, hand-overs).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ..acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from ..acl.quotas import Entity
from .dialect import Engine, Handle, marks
from .records import (
    AbortedTxn,
    ChunkRecord,
    ChunkSlice,
    CommittedOffset,
    OpenTxn,
    OpenTxnSnapshot,
    OwnedSegment,
    PendingTxnOffset,
    ProducerSnapshot,
    SegmentRecord,
    TopicExistsError,
    TopicHead,
    TopicRecord,
    TxnMarker,
    TxnPartition,
    TxnRecord,
    WalFenced,
    WalRange,
)
from .schema import migrate, schema_version


class SqlMetadataStore:
    """`MetadataStore` on one engine connection. `node_id` owns the segments of the topics
    this store creates (several nodes; None on a single node)."""

    def __init__(self, engine: Engine, node_id: int | None = None) -> None:
        self.engine = engine
        self.node_id = node_id
        with engine.transaction() as db:
            migrate(db)

    def schema_version(self) -> int:
        with self.engine.read() as db:
            return schema_version(db)

    def close(self) -> None:
        self.engine.close()

    # --- topics and segments -------------------------------------------------------------

    def load_topics(self) -> list[TopicRecord]:
        with self.engine.read() as db:
            rows = db.all("SELECT name, topic_id, partitions, configs, created_ms FROM topics")
            segments = db.all(
                "SELECT topic, segment_id, epoch, first_partition, last_partition, sealed, "
                "uploaded_end FROM segments ORDER BY topic, segment_id"
            )
        topics = {
            name: TopicRecord(name, uuid.UUID(tid), parts, json.loads(configs), created)
            for name, tid, parts, configs, created in rows
        }
        for row in segments:
            if row[0] in topics:
                topics[row[0]].segments.append(_segment(row[1:]))
        return list(topics.values())

    def create_topic(self, topic: TopicRecord) -> None:
        """The topic and its segments, owned by this store's node. TopicExistsError when
        the name is taken (another node may have created it first)."""
        self._insert_topic(topic, [self.node_id] * len(topic.segments))

    def _insert_topic(self, topic: TopicRecord, owners: Sequence[int | None]) -> None:
        topic.created_ms = topic.created_ms or int(time.time() * 1000)
        try:
            with self.engine.transaction() as db:
                db.execute(
                    "INSERT INTO topics VALUES (?, ?, ?, ?, ?)",
                    (
                        topic.name,
                        str(topic.topic_id),
                        topic.partitions,
                        json.dumps(topic.configs),
                        topic.created_ms,
                    ),
                )
                insert_segments(db, topic.name, topic.segments, owners)
        except self.engine.dialect.unique_violation:
            raise TopicExistsError(f"topic {topic.name!r} already exists") from None

    def delete_topic(self, name: str) -> None:
        with self.engine.transaction() as db:
            db.execute("DELETE FROM topics WHERE name = ?", (name,))
            # Offsets of a deleted topic must not resurface if the name is reused.
            db.execute("DELETE FROM committed_offsets WHERE topic = ?", (name,))

    def topic_heads(self) -> dict[str, TopicHead]:
        """name -> (topic id, partition count, configs): what other nodes compare (sync)."""
        with self.engine.read() as db:
            rows = db.all("SELECT name, topic_id, partitions, configs FROM topics")
        return {
            name: TopicHead(uuid.UUID(tid), parts, json.loads(configs))
            for name, tid, parts, configs in rows
        }

    def update_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's stored configs (one transaction); KeyError if no such topic."""
        with self.engine.transaction() as db:
            cursor = db.execute(
                "UPDATE topics SET configs = ? WHERE name = ?", (json.dumps(configs), name)
            )
            if cursor.rowcount != 1:
                raise KeyError(name)

    def grow_partitions(self, name: str, partitions: int, segment_id: int) -> None:
        """Raise the topic's partition count and let open segment `segment_id` own the new
        partitions (its last_partition becomes partitions - 1), in one transaction.

        ValueError (nothing changed) unless the topic has fewer partitions and the segment
        is open and owns the topic's current last partition.
        """
        with self.engine.transaction() as db:
            row = db.one("SELECT partitions FROM topics WHERE name = ?{for_update}", (name,))
            if row is None or row[0] >= partitions:
                raise ValueError(f"topic {name!r} cannot grow to {partitions} partitions")
            db.execute("UPDATE topics SET partitions = ? WHERE name = ?", (partitions, name))
            cursor = db.execute(
                "UPDATE segments SET last_partition = ? WHERE topic = ? AND segment_id = ? "
                "AND NOT sealed AND last_partition = ?",
                (partitions - 1, name, segment_id, row[0] - 1),
            )
            if cursor.rowcount != 1:
                raise ValueError(f"segment {segment_id} of {name!r} does not own the tail")

    def scale_segments(self, name: str, seal: list[int], successors: list[SegmentRecord]) -> None:
        """A scale event, in one transaction: mark the `seal` segments sealed and insert the
        `successors` (open, on the node that owned their predecessors). ValueError (nothing
        changed) unless every segment to seal is open and no successor id exists yet."""
        try:
            with self.engine.transaction() as db:
                owner = None
                for segment_id in seal:
                    row = db.one(
                        "UPDATE segments SET sealed = TRUE WHERE topic = ? AND segment_id = ? "
                        "AND NOT sealed RETURNING owner_node",
                        (name, segment_id),
                    )
                    if row is None:
                        raise ValueError(f"segment {segment_id} of {name!r} is not open")
                    owner = row[0] if owner is None else owner
                insert_segments(db, name, successors, [owner] * len(successors))
        except self.engine.dialect.unique_violation as exc:
            raise ValueError(f"successor segment of {name!r} already exists: {exc}") from None

    def load_segments(self, name: str) -> list[OwnedSegment]:
        """The topic's segments with their owner nodes, by id."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT segment_id, epoch, first_partition, last_partition, sealed, "
                "uploaded_end, owner_node FROM segments WHERE topic = ? ORDER BY segment_id",
                (name,),
            )
        return [OwnedSegment(_segment(r[:6]), r[6]) for r in rows]

    def next_counter(self, name: str) -> int:
        """Atomically increment and return a persistent counter (first value 0)."""
        with self.engine.transaction() as db:
            row = db.one(
                "INSERT INTO counters VALUES (?, 0) ON CONFLICT (name) DO UPDATE "
                "SET value = counters.value + 1 RETURNING value",
                (name,),
            )
        return int(row[0])

    # --- tier 2: chunks, producer states and log start offsets ---------------------------

    def load_chunks(self, name: str) -> list[ChunkRecord]:
        """The topic's confirmed chunks with their slices, in (segment, position) order."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT chunk_id, segment_id, start_position, end_position, object_key, size, "
                "created_ms FROM chunks WHERE topic = ? ORDER BY segment_id, start_position",
                (name,),
            )
            slices = db.all(
                "SELECT s.chunk_id, s.partition, s.first_offset, s.last_offset, s.byte_start, "
                "s.byte_length, s.max_timestamp FROM chunk_slices s JOIN chunks c "
                "ON c.chunk_id = s.chunk_id WHERE c.topic = ? ORDER BY s.chunk_id, s.partition",
                (name,),
            )
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
        """Record an uploaded chunk, its slices, the segment's new uploaded end and the
        producer states of its partitions in one transaction; returns the chunk id.
        KeyError if the topic or segment is gone."""
        chunk.created_ms = chunk.created_ms or int(time.time() * 1000)
        with self.engine.transaction() as db:
            if self._chunk_fenced(db, name, chunk.segment_id):
                raise KeyError(f"{name} segment {chunk.segment_id} is another node's now")
            cursor = db.execute(
                "UPDATE segments SET uploaded_end = {greatest}(uploaded_end, ?) "
                "WHERE topic = ? AND segment_id = ?",
                (chunk.end_position, name, chunk.segment_id),
            )
            if cursor.rowcount != 1:
                raise KeyError(f"{name} segment {chunk.segment_id}")
            _insert_chunk(db, name, chunk)
            _upsert_producer_states(db, name, producers or ())
        for s in chunk.slices:
            s.chunk_id = chunk.chunk_id
        return chunk.chunk_id

    def delete_chunks(self, name: str, chunk_ids: list[int], log_starts: dict[int, int]) -> None:
        """Forget chunks (retention) and raise log start offsets, in one transaction. The
        objects are deleted after this commits: an orphan object is garbage, never a hole."""
        with self.engine.transaction() as db:
            _upsert_log_starts(db, name, log_starts)
            db.executemany("DELETE FROM chunks WHERE chunk_id = ?", [(c,) for c in chunk_ids])

    def replace_chunks(
        self,
        name: str,
        old_ids: list[int],
        new_chunks: list[ChunkRecord],
        compacted_ends: dict[int, int],
    ) -> None:
        """Compaction's swap, in one transaction: the new chunks and their slices replace
        the old ones, and the partitions' compacted ends move. KeyError (nothing changed)
        when an old chunk is gone already (retention or a topic delete got there first)."""
        with self.engine.transaction() as db:
            # FOR UPDATE (PostgreSQL): a concurrent retention delete of these chunks waits.
            found = db.all(
                f"SELECT chunk_id FROM chunks WHERE topic = ? AND chunk_id IN {marks(len(old_ids))}"
                "{for_update}",
                (name, *old_ids),
            )
            if len(found) != len(old_ids):
                raise KeyError(f"{name}: {len(old_ids) - len(found)} chunks to replace are gone")
            for chunk in new_chunks:
                _insert_chunk(db, name, chunk)
            db.executemany("DELETE FROM chunks WHERE chunk_id = ?", [(c,) for c in old_ids])
            db.executemany(
                "INSERT INTO compaction_state VALUES (?, ?, ?) "
                "ON CONFLICT (topic, partition) DO UPDATE SET compacted_end = "
                "{greatest}(compaction_state.compacted_end, excluded.compacted_end)",
                [(name, p, end) for p, end in compacted_ends.items()],
            )
        for chunk in new_chunks:
            for s in chunk.slices:
                s.chunk_id = chunk.chunk_id

    def load_compacted_ends(self, name: str) -> dict[int, int]:
        """Per partition, the offset below which compaction has rewritten tier 2."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT partition, compacted_end FROM compaction_state WHERE topic = ?", (name,)
            )
        return {int(p): int(end) for p, end in rows}

    # --- write-ahead objects (core/wal) ------------------------------------------------

    def commit_wal_object(
        self, key: str, node_id: int, size: int, ranges: Sequence[WalRange], incarnation: int
    ) -> None:
        """Record a written write-ahead object and its ranges in one transaction; from then
        on its appends count as durable. WalFenced (nothing recorded) if this node may no
        longer write its segments (several nodes: `_wal_fenced`)."""
        with self.engine.transaction() as db:
            if self._wal_fenced(db, node_id, incarnation, ranges):
                raise WalFenced(f"node {node_id} incarnation {incarnation} was fenced")
            db.execute(
                "INSERT INTO wal_objects VALUES (?, ?, ?, ?)",
                (key, node_id, size, int(time.time() * 1000)),
            )
            db.executemany(
                "INSERT INTO wal_ranges VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        key,
                        r.topic,
                        str(r.topic_id),
                        r.segment_id,
                        r.start_position,
                        r.end_position,
                        r.object_offset,
                    )
                    for r in ranges
                ],
            )

    def _chunk_fenced(self, db: Handle, name: str, segment_id: int) -> bool:
        """One node owns everything: never (postgres.py checks the owner)."""
        return False

    def _wal_fenced(
        self, db: Handle, node_id: int, incarnation: int, ranges: Sequence[WalRange]
    ) -> bool:
        """One node owns everything: never fenced (postgres.py checks owners and leases)."""
        return False

    def wal_ranges(self, name: str, segment_id: int, from_position: int) -> list[WalRange]:
        """The write-ahead ranges of a segment ending after `from_position`, in log order."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT topic, topic_id, segment_id, start_position, end_position, "
                "object_offset, object_key FROM wal_ranges "
                "WHERE topic = ? AND segment_id = ? AND end_position > ? "
                "ORDER BY start_position",
                (name, segment_id, from_position),
            )
        return [WalRange(r[0], uuid.UUID(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in rows]

    def folded_wal_objects(self, limit: int = 1000) -> list[str]:
        """Write-ahead objects every range of which is in tier 2 (below its segment's
        uploaded end) or belongs to a topic or segment that is gone: safe to delete."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT o.object_key FROM wal_objects o WHERE NOT EXISTS ("
                " SELECT 1 FROM wal_ranges r JOIN segments s"
                " ON s.topic = r.topic AND s.segment_id = r.segment_id"
                " JOIN topics t ON t.name = r.topic AND t.topic_id = r.topic_id"
                " WHERE r.object_key = o.object_key AND r.end_position > s.uploaded_end"
                ") ORDER BY o.object_key LIMIT ?",
                (limit,),
            )
        return [row[0] for row in rows]

    def wal_object_keys(self, node_id: int) -> list[str]:
        """The recorded write-ahead objects written by node `node_id`."""
        with self.engine.read() as db:
            rows = db.all("SELECT object_key FROM wal_objects WHERE node_id = ?", (node_id,))
        return [row[0] for row in rows]

    def forget_wal_objects(self, keys: Sequence[str]) -> None:
        """Drop the rows of deleted (or about to be deleted) write-ahead objects."""
        with self.engine.transaction() as db:
            db.executemany("DELETE FROM wal_objects WHERE object_key = ?", [(k,) for k in keys])
            db.executemany("DELETE FROM wal_ranges WHERE object_key = ?", [(k,) for k in keys])

    def load_producer_states(self, name: str) -> list[ProducerSnapshot]:
        with self.engine.read() as db:
            rows = db.all(
                "SELECT partition, producer_id, epoch, batches FROM producer_states "
                "WHERE topic = ?",
                (name,),
            )
        return [
            ProducerSnapshot(partition, producer_id, epoch, [tuple(b) for b in json.loads(raw)])
            for partition, producer_id, epoch, raw in rows
        ]

    def save_producer_states(self, name: str, producers: list[ProducerSnapshot]) -> None:
        with self.engine.transaction() as db:
            _upsert_producer_states(db, name, producers)

    def load_log_starts(self, name: str) -> dict[int, int]:
        with self.engine.read() as db:
            rows = db.all(
                "SELECT partition, log_start_offset FROM log_starts WHERE topic = ?", (name,)
            )
        return {int(p): int(o) for p, o in rows}

    def set_log_starts(self, name: str, log_starts: dict[int, int]) -> None:
        """Raise (never lower) the partitions' log start offsets, durably."""
        with self.engine.transaction() as db:
            _upsert_log_starts(db, name, log_starts)

    # --- offset reservations (core/stream/reservations.py) -------------------------------

    def load_reservations(self, name: str) -> dict[int, int]:
        with self.engine.read() as db:
            rows = db.all(
                "SELECT partition, reserved FROM offset_reservations WHERE topic = ?", (name,)
            )
        return {int(p): int(r) for p, r in rows}

    def raise_reservations(self, name: str, marks: dict[int, int]) -> None:
        """Raise (never lower) the partitions' reserved offsets, durably."""
        with self.engine.transaction() as db:
            db.executemany(
                "INSERT INTO offset_reservations VALUES (?, ?, ?) "
                "ON CONFLICT (topic, partition) DO UPDATE SET reserved = "
                "{greatest}(offset_reservations.reserved, excluded.reserved)",
                [(name, partition, mark) for partition, mark in marks.items()],
            )

    def settle_reservations(self, name: str, ends: dict[int, int]) -> None:
        """Set the partitions' marks to their exact ends (a clean stop: no append is in
        flight, so the end is the tightest bound; it may lower a mark)."""
        with self.engine.transaction() as db:
            db.executemany(
                "INSERT INTO offset_reservations VALUES (?, ?, ?) "
                "ON CONFLICT (topic, partition) DO UPDATE SET reserved = excluded.reserved",
                [(name, partition, end) for partition, end in ends.items()],
            )

    # --- share groups (core/sharegroups) ---------------------------------------------------

    def load_share_partitions(self) -> list[tuple[str, str, int, int, int, str]]:
        """Every share partition: (group, topic, partition, start, end, records JSON)."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT group_id, topic, partition, start_offset, end_offset, records "
                "FROM share_partitions"
            )
        return [(str(g), str(t), int(p), int(s), int(e), str(r)) for g, t, p, s, e, r in rows]

    def save_share_partitions(self, rows: Sequence[tuple[str, str, int, int, int, str]]) -> None:
        """Upsert share partitions' states in one transaction (all or none durable)."""
        with self.engine.transaction() as db:
            db.executemany(
                "INSERT INTO share_partitions VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
                "start_offset = excluded.start_offset, end_offset = excluded.end_offset, "
                "records = excluded.records",
                rows,
            )

    def delete_share_partitions(self, group_id: str | None, topic: str | None = None) -> None:
        """Forget a group's share partitions (of one topic when given), or a topic's in
        every group (group_id None)."""
        with self.engine.transaction() as db:
            if group_id is None:
                db.execute("DELETE FROM share_partitions WHERE topic = ?", (topic,))
            elif topic is None:
                db.execute("DELETE FROM share_partitions WHERE group_id = ?", (group_id,))
            else:
                db.execute(
                    "DELETE FROM share_partitions WHERE group_id = ? AND topic = ?",
                    (group_id, topic),
                )

    # --- committed offsets ---------------------------------------------------------------

    def load_offsets(self) -> list[CommittedOffset]:
        return self._select_offsets("", ())

    def load_group_offsets(self, group_id: str) -> list[CommittedOffset]:
        """One group's committed offsets (several nodes: read before an OffsetFetch)."""
        return self._select_offsets("WHERE group_id = ?", (group_id,))

    def _select_offsets(self, where: str, params: tuple[str, ...]) -> list[CommittedOffset]:
        with self.engine.read() as db:
            rows = db.all(
                "SELECT group_id, topic, partition, committed_offset, leader_epoch, metadata, "
                f"commit_ms FROM committed_offsets {where} ORDER BY group_id, topic, partition",
                params,
            )
        return [CommittedOffset(*row) for row in rows]

    def commit_offsets(self, offsets: list[CommittedOffset]) -> None:
        """Upsert the offsets in one transaction (all or none become durable)."""
        with self.engine.transaction() as db:
            db.executemany(
                "INSERT INTO committed_offsets VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (group_id, topic, partition) DO UPDATE SET "
                "committed_offset = excluded.committed_offset, "
                "leader_epoch = excluded.leader_epoch, metadata = excluded.metadata, "
                "commit_ms = excluded.commit_ms",
                [
                    (
                        o.group_id,
                        o.topic,
                        o.partition,
                        o.offset,
                        o.leader_epoch,
                        o.metadata,
                        o.commit_ms,
                    )
                    for o in offsets
                ],
            )

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None
    ) -> None:
        """Forget the group's offsets for `partitions`, or all of them when None."""
        with self.engine.transaction() as db:
            if partitions is None:
                db.execute("DELETE FROM committed_offsets WHERE group_id = ?", (group_id,))
            else:
                db.executemany(
                    "DELETE FROM committed_offsets "
                    "WHERE group_id = ? AND topic = ? AND partition = ?",
                    [(group_id, topic, partition) for topic, partition in partitions],
                )

    # --- transactions (core/txn) ---------------------------------------------------------

    def load_transactions(self) -> list[TxnRecord]:
        with self.engine.read() as db:
            rows = db.all(
                "SELECT transactional_id, producer_id, epoch, state, timeout_ms, start_ms, "
                "update_ms, partitions, offsets FROM transactions"
            )
        return [_txn_record(row) for row in rows]

    def load_open_transactions(self) -> list[TxnRecord]:
        """The ids with a transaction under way (Ongoing, PrepareCommit, PrepareAbort)."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT transactional_id, producer_id, epoch, state, timeout_ms, start_ms, "
                "update_ms, partitions, offsets FROM transactions "
                "WHERE state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')"
            )
        return [_txn_record(row) for row in rows]

    def load_transaction(self, transactional_id: str) -> TxnRecord | None:
        """One id's record as committed (several nodes: another may have changed it)."""
        with self.engine.read() as db:
            row = db.one(
                "SELECT transactional_id, producer_id, epoch, state, timeout_ms, start_ms, "
                "update_ms, partitions, offsets FROM transactions WHERE transactional_id = ?",
                (transactional_id,),
            )
        return None if row is None else _txn_record(row)

    def add_txn_markers(self, markers: list[TxnMarker]) -> None:
        with self.engine.transaction() as db:
            for m in markers:
                db.execute(
                    "INSERT INTO txn_markers VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (topic, partition, producer_id) DO UPDATE SET "
                    "epoch = excluded.epoch, is_commit = excluded.is_commit",
                    (m.topic, m.partition, m.producer_id, m.epoch, int(m.commit)),
                )

    def txn_markers(self) -> list[TxnMarker]:
        with self.engine.read() as db:
            rows = db.all("SELECT topic, partition, producer_id, epoch, is_commit FROM txn_markers")
        return [TxnMarker(str(t), int(p), int(i), int(e), bool(c)) for t, p, i, e, c in rows]

    def forget_txn_markers(self, markers: list[TxnMarker]) -> None:
        """Delete these rows (only as written: a newer marker for the same producer stays)."""
        with self.engine.transaction() as db:
            for m in markers:
                db.execute(
                    "DELETE FROM txn_markers WHERE topic = ? AND partition = ? AND "
                    "producer_id = ? AND epoch = ? AND is_commit = ?",
                    (m.topic, m.partition, m.producer_id, m.epoch, int(m.commit)),
                )

    def save_transaction(self, txn: TxnRecord) -> None:
        with self.engine.transaction() as db:
            db.execute(
                "INSERT INTO transactions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
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

    def load_aborted_txns(self, name: str) -> list[AbortedTxn]:
        """The topic's aborted transactions, by last offset."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT partition, producer_id, first_offset, last_offset FROM aborted_txns "
                "WHERE topic = ? ORDER BY last_offset",
                (name,),
            )
        return [AbortedTxn(*map(int, row)) for row in rows]

    def add_aborted_txns(self, name: str, aborted: list[AbortedTxn]) -> None:
        with self.engine.transaction() as db:
            db.executemany(
                "INSERT INTO aborted_txns VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [
                    (name, a.partition, a.producer_id, a.first_offset, a.last_offset)
                    for a in aborted
                ],
            )

    def save_open_txns(self, name: str, snapshots: list[OpenTxnSnapshot]) -> None:
        """Replace each partition's open transactions with a newer snapshot, atomically."""
        with self.engine.transaction() as db:
            for snap in snapshots:
                row = db.one(
                    "SELECT first_offset FROM open_txns "
                    "WHERE topic = ? AND partition = ? AND producer_id = -1{for_update}",
                    (name, snap.partition),
                )
                if row is not None and int(row[0]) > snap.as_of:
                    continue  # an older snapshot committed late: keep the newer one
                db.execute(
                    "DELETE FROM open_txns WHERE topic = ? AND partition = ?",
                    (name, snap.partition),
                )
                db.executemany(
                    "INSERT INTO open_txns VALUES (?, ?, ?, ?)",
                    [(name, snap.partition, -1, snap.as_of)]
                    + [(name, snap.partition, pid, first) for pid, first in snap.open.items()],
                )

    def load_open_txns(self, name: str) -> list[OpenTxn]:
        """The topic's saved open transactions."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT partition, producer_id, first_offset FROM open_txns "
                "WHERE topic = ? AND producer_id >= 0",
                (name,),
            )
        return [OpenTxn(*map(int, row)) for row in rows]

    # --- ACLs, client quotas and dynamic broker configs ----------------------------------

    def load_acls(self) -> list[AclBinding]:
        with self.engine.read() as db:
            rows = db.all(
                "SELECT resource_type, resource_name, pattern_type, principal, host, "
                "operation, permission FROM acls"
            )
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
        with self.engine.transaction() as db:
            db.executemany(
                "INSERT INTO acls VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [_acl_row(a) for a in acls],
            )

    def delete_acls(self, acls: list[AclBinding]) -> None:
        with self.engine.transaction() as db:
            db.executemany(
                "DELETE FROM acls WHERE resource_type = ? AND resource_name = ? AND "
                "pattern_type = ? AND principal = ? AND host = ? AND operation = ? AND "
                "permission = ?",
                [_acl_row(a) for a in acls],
            )

    def load_client_quotas(self) -> dict[Entity, dict[str, float]]:
        with self.engine.read() as db:
            rows = db.all("SELECT entity, quota_key, value FROM client_quotas")
        quotas: dict[Entity, dict[str, float]] = {}
        for entity, key, value in rows:
            parts = tuple((kind, name) for kind, name in json.loads(entity))
            quotas.setdefault(parts, {})[key] = float(value)
        return quotas

    def alter_client_quotas(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        with self.engine.transaction() as db:
            for entity, ops in changes:
                key = json.dumps(entity)
                for name, value in ops.items():
                    if value is None:
                        db.execute(
                            "DELETE FROM client_quotas WHERE entity = ? AND quota_key = ?",
                            (key, name),
                        )
                    else:
                        db.execute(
                            "INSERT INTO client_quotas VALUES (?, ?, ?) ON CONFLICT "
                            "(entity, quota_key) DO UPDATE SET value = excluded.value",
                            (key, name, value),
                        )

    def load_broker_configs(self) -> dict[str, dict[str, str]]:
        """Dynamic broker configs: resource (a node id, or "" for the cluster default) ->
        name -> value."""
        with self.engine.read() as db:
            rows = db.all("SELECT resource, name, value FROM broker_configs")
        configs: dict[str, dict[str, str]] = {}
        for resource, name, value in rows:
            configs.setdefault(resource, {})[name] = value
        return configs

    def save_broker_configs(self, resource: str, configs: dict[str, str]) -> None:
        """Replace one resource's dynamic broker configs with `configs`."""
        with self.engine.transaction() as db:
            db.execute("DELETE FROM broker_configs WHERE resource = ?", (resource,))
            db.executemany(
                "INSERT INTO broker_configs VALUES (?, ?, ?)",
                [(resource, name, value) for name, value in configs.items()],
            )


def _segment(row: Any) -> SegmentRecord:
    """(segment_id, epoch, first, last, sealed, uploaded_end) -> a SegmentRecord."""
    return SegmentRecord(row[0], row[1], row[2], row[3], bool(row[4]), row[5])


def insert_segments(
    db: Handle, name: str, segments: Sequence[SegmentRecord], owners: Sequence[int | None]
) -> None:
    """New segments of `name`, each owned by its node in `owners` (owner epoch 1)."""
    db.executemany(
        "INSERT INTO segments (topic, segment_id, epoch, first_partition, last_partition, "
        "sealed, uploaded_end, owner_node, owner_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
        [
            (
                name,
                s.segment_id,
                s.epoch,
                s.first_partition,
                s.last_partition,
                s.sealed,
                s.uploaded_end,
                owner,
            )
            for s, owner in zip(segments, owners, strict=True)
        ],
    )


def _insert_chunk(db: Handle, name: str, chunk: ChunkRecord) -> None:
    """The chunk and its slices; sets `chunk.chunk_id`."""
    row = db.one(
        "INSERT INTO chunks (topic, segment_id, start_position, end_position, object_key, "
        "size, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING chunk_id",
        (
            name,
            chunk.segment_id,
            chunk.start_position,
            chunk.end_position,
            chunk.object_key,
            chunk.size,
            chunk.created_ms,
        ),
    )
    chunk.chunk_id = int(row[0])
    db.executemany(
        "INSERT INTO chunk_slices VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(chunk.chunk_id, *s.row()) for s in chunk.slices],
    )


def _upsert_producer_states(db: Handle, name: str, producers: Sequence[ProducerSnapshot]) -> None:
    db.executemany(
        "INSERT INTO producer_states VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (topic, partition, producer_id) DO UPDATE SET "
        "epoch = excluded.epoch, batches = excluded.batches",
        [(name, p.partition, p.producer_id, p.epoch, json.dumps(p.batches)) for p in producers],
    )


def _upsert_log_starts(db: Handle, name: str, log_starts: dict[int, int]) -> None:
    db.executemany(
        "INSERT INTO log_starts VALUES (?, ?, ?) ON CONFLICT (topic, partition) DO UPDATE "
        "SET log_start_offset = {greatest}(log_starts.log_start_offset, "
        "excluded.log_start_offset)",
        [(name, partition, offset) for partition, offset in log_starts.items()],
    )


def _acl_row(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    # Plain ints: the columns are INTEGER whatever a driver's Enum adaptation would do.
    return (
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        acl.host,
        int(acl.operation),
        int(acl.permission),
    )


def _txn_record(row: Sequence[Any]) -> TxnRecord:
    return TxnRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        partitions=[TxnPartition(*tp) for tp in json.loads(row[7])],
        offsets=[PendingTxnOffset(*o) for o in json.loads(row[8])],
    )
