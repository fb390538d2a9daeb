"""The metadata store: topics (streams), their segments, and counters.

One small interface (`MetadataStore`) with an embedded SQLite implementation in the data
folder. Every change that must be atomic (a topic with its first segment, later a scale event
sealing and opening segments) is one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from dataclasses import astuple, dataclass, field
from typing import Protocol

from .acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from .acl.quotas import Entity


@dataclass(slots=True)
class SegmentRecord:
    segment_id: int
    epoch: int
    first_partition: int
    last_partition: int
    sealed: bool = False
    # Log position up to which this segment's data is confirmed in tier 2 (monotonic).
    uploaded_end: int = 0


@dataclass(slots=True)
class ChunkSlice:
    """One partition's bytes inside a chunk object: its batches, in offset order. The
    partition's tier-2 index holds these too (with `chunk_id` set once committed)."""

    partition: int
    first_offset: int
    last_offset: int
    byte_start: int
    byte_length: int
    max_timestamp: int
    chunk_id: int = 0  # assigned with its chunk by the metadata store

    def row(self) -> tuple[int, int, int, int, int, int]:
        return (
            self.partition,
            self.first_offset,
            self.last_offset,
            self.byte_start,
            self.byte_length,
            self.max_timestamp,
        )


@dataclass(slots=True)
class ProducerSnapshot:
    """An idempotent producer's last batches in one partition: (first seq, last seq, base
    offset) each. Saved with every chunk, so trimming tier 1 does not forget producers."""

    partition: int
    producer_id: int
    epoch: int
    batches: list[tuple[int, int, int]]


@dataclass(slots=True)
class OpenTxnSnapshot:
    """A partition's open transactions (producer id -> first offset) when its end offset
    was `as_of`. Saved with chunks, so trimming tier 1 does not forget where they start."""

    partition: int
    as_of: int
    open: dict[int, int]


@dataclass(slots=True)
class ChunkRecord:
    """An immutable tier-2 object cut from log positions [start, end) of one segment."""

    segment_id: int
    start_position: int
    end_position: int
    object_key: str
    size: int
    slices: list[ChunkSlice] = field(default_factory=list)
    chunk_id: int = 0  # assigned by the metadata store
    created_ms: int = 0


@dataclass(slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    created_ms: int = 0
    segments: list[SegmentRecord] = field(default_factory=list)


@dataclass(slots=True)
class CommittedOffset:
    """A consumer group's committed position in one partition (OffsetCommit's payload)."""

    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_ms: int = 0


@dataclass(slots=True)
class TxnRecord:
    """A transactional id's coordinator state (core/txn), one row per id."""

    transactional_id: str
    producer_id: int
    epoch: int
    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort
    timeout_ms: int
    start_ms: int = -1  # when the current transaction began
    update_ms: int = 0
    partitions: list[tuple[str, int]] = field(default_factory=list)
    # TxnOffsetCommit offsets pending until the commit: (group, topic, partition, offset,
    # leader epoch, metadata)
    offsets: list[tuple[str, str, int, int, int, str | None]] = field(default_factory=list)


class MetadataStore(Protocol):
    def load_topics(self) -> list[TopicRecord]: ...
    def create_topic(self, topic: TopicRecord) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def update_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def grow_partitions(self, name: str, partitions: int, segment_id: int) -> None: ...
    def scale_segments(
        self, name: str, seal: list[int], successors: list[SegmentRecord]
    ) -> None: ...
    def next_counter(self, name: str) -> int: ...
    def load_chunks(self, name: str) -> list[ChunkRecord]: ...
    def commit_chunk(
        self, name: str, chunk: ChunkRecord, producers: list[ProducerSnapshot] | None = None
    ) -> int: ...
    def load_producer_states(self, name: str) -> list[ProducerSnapshot]: ...
    def delete_chunks(
        self, name: str, chunk_ids: list[int], log_starts: dict[int, int]
    ) -> None: ...
    def load_log_starts(self, name: str) -> dict[int, int]: ...
    def replace_chunks(
        self,
        name: str,
        old_ids: list[int],
        new_chunks: list[ChunkRecord],
        compacted_ends: dict[int, int],
    ) -> None: ...
    def load_compacted_ends(self, name: str) -> dict[int, int]: ...
    def set_log_starts(self, name: str, log_starts: dict[int, int]) -> None: ...
    def load_offsets(self) -> list[CommittedOffset]: ...
    def save_open_txns(self, name: str, snapshots: list[OpenTxnSnapshot]) -> None: ...
    def load_open_txns(self, name: str) -> list[tuple[int, int, int]]: ...
    def commit_offsets(self, offsets: list[CommittedOffset]) -> None: ...
    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None
    ) -> None: ...
    # transactions (core/txn)
    def load_transactions(self) -> list[TxnRecord]: ...
    def save_transaction(self, txn: TxnRecord) -> None: ...
    def load_aborted_txns(self, name: str) -> list[tuple[int, int, int, int]]: ...
    def add_aborted_txns(self, name: str, rows: list[tuple[int, int, int, int]]) -> None: ...
    # ACLs and client quotas (core/acl: AclStore and QuotaStore are subsets of these)
    def load_acls(self) -> list[AclBinding]: ...
    def add_acls(self, acls: list[AclBinding]) -> None: ...
    def delete_acls(self, acls: list[AclBinding]) -> None: ...
    def load_client_quotas(self) -> dict[Entity, dict[str, float]]: ...
    def load_broker_configs(self) -> dict[str, dict[str, str]]: ...
    def save_broker_configs(self, resource: str, configs: dict[str, str]) -> None: ...
    def alter_client_quotas(
        self, changes: list[tuple[Entity, dict[str, float | None]]]
    ) -> None: ...
    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    topic_id TEXT NOT NULL UNIQUE,
    partitions INTEGER NOT NULL,
    configs TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS segments (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    segment_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    first_partition INTEGER NOT NULL,
    last_partition INTEGER NOT NULL,
    sealed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, segment_id)
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS committed_offsets (
    group_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    metadata TEXT,
    commit_ms INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
CREATE INDEX IF NOT EXISTS committed_offsets_by_topic ON committed_offsets(topic);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    segment_id INTEGER NOT NULL,
    start_position INTEGER NOT NULL,
    end_position INTEGER NOT NULL,
    object_key TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_topic ON chunks(topic, segment_id, start_position);
CREATE TABLE IF NOT EXISTS chunk_slices (
    chunk_id INTEGER NOT NULL REFERENCES chunks(chunk_id) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    byte_start INTEGER NOT NULL,
    byte_length INTEGER NOT NULL,
    max_timestamp INTEGER NOT NULL,
    PRIMARY KEY (chunk_id, partition)
);
CREATE TABLE IF NOT EXISTS producer_states (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    batches TEXT NOT NULL,
    PRIMARY KEY (topic, partition, producer_id)
);
CREATE TABLE IF NOT EXISTS transactions (
    transactional_id TEXT PRIMARY KEY,
    producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    state TEXT NOT NULL,
    timeout_ms INTEGER NOT NULL,
    start_ms INTEGER NOT NULL,
    update_ms INTEGER NOT NULL,
    partitions TEXT NOT NULL,
    offsets TEXT NOT NULL
);
-- Open transactions per partition as of a chunk commit (before tier 1 may be trimmed);
-- producer_id -1 is the row holding the snapshot's `as_of` (partition end offset), so an
-- older snapshot committed late never replaces a newer one.
CREATE TABLE IF NOT EXISTS open_txns (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, producer_id)
);
CREATE TABLE IF NOT EXISTS aborted_txns (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    producer_id INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    last_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition, last_offset)
);
CREATE TABLE IF NOT EXISTS log_starts (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    log_start_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS acls (
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
CREATE TABLE IF NOT EXISTS client_quotas (
    entity TEXT NOT NULL,
    quota_key TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (entity, quota_key)
);
CREATE TABLE IF NOT EXISTS broker_configs (
    resource TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (resource, name)
);
CREATE TABLE IF NOT EXISTS compaction_state (
    topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,
    partition INTEGER NOT NULL,
    compacted_end INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""


class SQLiteMetadataStore:
    """Embedded default: a SQLite file with WAL journaling and synchronous=FULL."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(segments)")}
        if "uploaded_end" not in columns:  # a data folder from before tier 2
            self._db.execute(
                "ALTER TABLE segments ADD COLUMN uploaded_end INTEGER NOT NULL DEFAULT 0"
            )

    def load_topics(self) -> list[TopicRecord]:
        topics = {}
        for name, topic_id, partitions, configs, created_ms in self._db.execute(
            "SELECT name, topic_id, partitions, configs, created_ms FROM topics"
        ):
            topics[name] = TopicRecord(
                name, uuid.UUID(topic_id), partitions, json.loads(configs), created_ms
            )
        for row in self._db.execute(
            "SELECT topic, segment_id, epoch, first_partition, last_partition, sealed, "
            "uploaded_end FROM segments ORDER BY topic, segment_id"
        ):
            topics[row[0]].segments.append(
                SegmentRecord(row[1], row[2], row[3], row[4], bool(row[5]), row[6])
            )
        return list(topics.values())

    def create_topic(self, topic: TopicRecord) -> None:
        topic.created_ms = topic.created_ms or int(time.time() * 1000)
        with self._transaction() as db:
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
            db.executemany(
                "INSERT INTO segments VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        topic.name,
                        s.segment_id,
                        s.epoch,
                        s.first_partition,
                        s.last_partition,
                        int(s.sealed),
                        s.uploaded_end,
                    )
                    for s in topic.segments
                ],
            )

    def delete_topic(self, name: str) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM topics WHERE name = ?", (name,))
            # Offsets of a deleted topic must not resurface if the name is reused.
            db.execute("DELETE FROM committed_offsets WHERE topic = ?", (name,))

    def update_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's stored configs (one transaction); KeyError if no such topic."""
        with self._transaction() as db:
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
        with self._transaction() as db:
            row = db.execute("SELECT partitions FROM topics WHERE name = ?", (name,)).fetchone()
            if row is None or row[0] >= partitions:
                raise ValueError(f"topic {name!r} cannot grow to {partitions} partitions")
            db.execute("UPDATE topics SET partitions = ? WHERE name = ?", (partitions, name))
            cursor = db.execute(
                "UPDATE segments SET last_partition = ? "
                "WHERE topic = ? AND segment_id = ? AND sealed = 0 AND last_partition = ?",
                (partitions - 1, name, segment_id, row[0] - 1),
            )
            if cursor.rowcount != 1:
                raise ValueError(f"segment {segment_id} of {name!r} does not own the tail")

    def scale_segments(self, name: str, seal: list[int], successors: list[SegmentRecord]) -> None:
        """A scale event, in one transaction: mark the `seal` segments sealed and insert the
        `successors` (open). ValueError (nothing changed) unless every segment to seal is
        open and no successor id exists yet."""
        with self._transaction() as db:
            for segment_id in seal:
                cursor = db.execute(
                    "UPDATE segments SET sealed = 1 WHERE topic = ? AND segment_id = ? "
                    "AND sealed = 0",
                    (name, segment_id),
                )
                if cursor.rowcount != 1:
                    raise ValueError(f"segment {segment_id} of {name!r} is not open")
            try:
                db.executemany(
                    "INSERT INTO segments VALUES (?, ?, ?, ?, ?, 0, 0)",
                    [
                        (name, s.segment_id, s.epoch, s.first_partition, s.last_partition)
                        for s in successors
                    ],
                )
            except sqlite3.IntegrityError as exc:
                raise ValueError(f"successor segment of {name!r} already exists: {exc}") from None

    def next_counter(self, name: str) -> int:
        """Atomically increment and return a persistent counter (first value 0)."""
        with self._transaction() as db:
            row = db.execute(
                "INSERT INTO counters VALUES (?, 0) ON CONFLICT(name) DO UPDATE "
                "SET value = value + 1 RETURNING value",
                (name,),
            ).fetchone()
        return int(row[0])

    # --- tier 2: chunks and log start offsets -------------------------------------------

    def load_chunks(self, name: str) -> list[ChunkRecord]:
        """The topic's confirmed chunks with their slices, in (segment, position) order."""
        chunks: dict[int, ChunkRecord] = {}
        for row in self._db.execute(
            "SELECT chunk_id, segment_id, start_position, end_position, object_key, size, "
            "created_ms FROM chunks WHERE topic = ? ORDER BY segment_id, start_position",
            (name,),
        ):
            chunk_id, segment_id, start, end, key, size, created_ms = row
            chunks[chunk_id] = ChunkRecord(
                segment_id, start, end, key, size, chunk_id=chunk_id, created_ms=created_ms
            )
        for row in self._db.execute(
            "SELECT s.chunk_id, s.partition, s.first_offset, s.last_offset, s.byte_start, "
            "s.byte_length, s.max_timestamp FROM chunk_slices s JOIN chunks c "
            "ON c.chunk_id = s.chunk_id WHERE c.topic = ? ORDER BY s.chunk_id, s.partition",
            (name,),
        ):
            chunk_id, partition, first, last, start, length, max_ts = row
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
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE segments SET uploaded_end = MAX(uploaded_end, ?) "
                "WHERE topic = ? AND segment_id = ?",
                (chunk.end_position, name, chunk.segment_id),
            )
            if cursor.rowcount != 1:
                raise KeyError(f"{name} segment {chunk.segment_id}")
            chunk_id = db.execute(
                "INSERT INTO chunks (topic, segment_id, start_position, end_position, "
                "object_key, size, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING chunk_id",
                (
                    name,
                    chunk.segment_id,
                    chunk.start_position,
                    chunk.end_position,
                    chunk.object_key,
                    chunk.size,
                    chunk.created_ms,
                ),
            ).fetchone()[0]
            db.executemany(
                "INSERT INTO chunk_slices VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(chunk_id, *s.row()) for s in chunk.slices],
            )
            db.executemany(
                "INSERT INTO producer_states VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(topic, partition, producer_id) DO UPDATE SET "
                "epoch = excluded.epoch, batches = excluded.batches",
                [
                    (name, p.partition, p.producer_id, p.epoch, json.dumps(p.batches))
                    for p in producers or ()
                ],
            )
        chunk.chunk_id = int(chunk_id)
        for s in chunk.slices:
            s.chunk_id = chunk.chunk_id
        return chunk.chunk_id

    def delete_chunks(self, name: str, chunk_ids: list[int], log_starts: dict[int, int]) -> None:
        """Forget chunks (retention) and raise log start offsets, in one transaction. The
        objects are deleted after this commits: an orphan object is garbage, never a hole."""
        with self._transaction() as db:
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
        with self._transaction() as db:
            marks = ",".join("?" * len(old_ids))
            (found,) = db.execute(
                f"SELECT count(*) FROM chunks WHERE topic = ? AND chunk_id IN ({marks})",
                (name, *old_ids),
            ).fetchone()
            if found != len(old_ids):
                raise KeyError(f"{name}: {len(old_ids) - found} chunks to replace are gone")
            for chunk in new_chunks:
                (chunk_id,) = db.execute(
                    "INSERT INTO chunks (topic, segment_id, start_position, end_position, "
                    "object_key, size, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
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
                chunk.chunk_id = int(chunk_id)
                db.executemany(
                    "INSERT INTO chunk_slices VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(chunk.chunk_id, *s.row()) for s in chunk.slices],
                )
            db.executemany("DELETE FROM chunks WHERE chunk_id = ?", [(c,) for c in old_ids])
            db.executemany(
                "INSERT INTO compaction_state VALUES (?, ?, ?) ON CONFLICT(topic, partition) "
                "DO UPDATE SET compacted_end = MAX(compacted_end, excluded.compacted_end)",
                [(name, p, end) for p, end in compacted_ends.items()],
            )
        for chunk in new_chunks:
            for s in chunk.slices:
                s.chunk_id = chunk.chunk_id

    def load_compacted_ends(self, name: str) -> dict[int, int]:
        """Per partition, the offset below which compaction has rewritten tier 2."""
        return dict(
            self._db.execute(
                "SELECT partition, compacted_end FROM compaction_state WHERE topic = ?", (name,)
            ).fetchall()
        )

    def load_producer_states(self, name: str) -> list[ProducerSnapshot]:
        return [
            ProducerSnapshot(partition, producer_id, epoch, [tuple(b) for b in json.loads(raw)])
            for partition, producer_id, epoch, raw in self._db.execute(
                "SELECT partition, producer_id, epoch, batches FROM producer_states "
                "WHERE topic = ?",
                (name,),
            )
        ]

    def load_log_starts(self, name: str) -> dict[int, int]:
        return dict(
            self._db.execute(
                "SELECT partition, log_start_offset FROM log_starts WHERE topic = ?", (name,)
            ).fetchall()
        )

    def set_log_starts(self, name: str, log_starts: dict[int, int]) -> None:
        """Raise (never lower) the partitions' log start offsets, durably."""
        with self._transaction() as db:
            _upsert_log_starts(db, name, log_starts)

    # --- committed offsets ----------------------------------------------------------------

    def load_offsets(self) -> list[CommittedOffset]:
        return [
            CommittedOffset(*row)
            for row in self._db.execute(
                "SELECT group_id, topic, partition, committed_offset, leader_epoch, metadata, "
                "commit_ms FROM committed_offsets ORDER BY group_id, topic, partition"
            )
        ]

    def commit_offsets(self, offsets: list[CommittedOffset]) -> None:
        """Upsert the offsets in one transaction (all or none become durable)."""
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO committed_offsets VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(group_id, topic, partition) DO UPDATE SET "
                "committed_offset = excluded.committed_offset, "
                "leader_epoch = excluded.leader_epoch, metadata = excluded.metadata, "
                "commit_ms = excluded.commit_ms",
                [astuple(o) for o in offsets],
            )

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None
    ) -> None:
        """Forget the group's offsets for `partitions`, or all of them when None."""
        with self._transaction() as db:
            if partitions is None:
                db.execute("DELETE FROM committed_offsets WHERE group_id = ?", (group_id,))
            else:
                db.executemany(
                    "DELETE FROM committed_offsets "
                    "WHERE group_id = ? AND topic = ? AND partition = ?",
                    [(group_id, topic, partition) for topic, partition in partitions],
                )

    # --- transactions (core/txn) ----------------------------------------------------------

    def load_transactions(self) -> list[TxnRecord]:
        rows = self._db.execute(
            "SELECT transactional_id, producer_id, epoch, state, timeout_ms, start_ms, "
            "update_ms, partitions, offsets FROM transactions"
        )
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
                "INSERT OR REPLACE INTO transactions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        return list(
            self._db.execute(
                "SELECT partition, producer_id, first_offset, last_offset FROM aborted_txns "
                "WHERE topic = ? ORDER BY last_offset",
                (name,),
            )
        )

    def save_open_txns(self, name: str, snapshots: list[OpenTxnSnapshot]) -> None:
        """Replace each partition's open transactions with a newer snapshot, atomically."""
        with self._transaction() as db:
            for snap in snapshots:
                row = db.execute(
                    "SELECT first_offset FROM open_txns "
                    "WHERE topic = ? AND partition = ? AND producer_id = -1",
                    (name, snap.partition),
                ).fetchone()
                if row is not None and row[0] > snap.as_of:
                    continue
                db.execute(
                    "DELETE FROM open_txns WHERE topic = ? AND partition = ?",
                    (name, snap.partition),
                )
                db.executemany(
                    "INSERT INTO open_txns VALUES (?, ?, ?, ?)",
                    [(name, snap.partition, -1, snap.as_of)]
                    + [(name, snap.partition, pid, first) for pid, first in snap.open.items()],
                )

    def load_open_txns(self, name: str) -> list[tuple[int, int, int]]:
        """(partition, producer id, first offset) of the topic's saved open transactions."""
        return list(
            self._db.execute(
                "SELECT partition, producer_id, first_offset FROM open_txns "
                "WHERE topic = ? AND producer_id >= 0",
                (name,),
            )
        )

    def add_aborted_txns(self, name: str, rows: list[tuple[int, int, int, int]]) -> None:
        with self._transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO aborted_txns VALUES (?, ?, ?, ?, ?)",
                [(name, *row) for row in rows],
            )

    # --- ACLs and client quotas (core/acl) --------------------------------------------------

    def load_acls(self) -> list[AclBinding]:
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
            for r in self._db.execute(
                "SELECT resource_type, resource_name, pattern_type, principal, host, "
                "operation, permission FROM acls"
            )
        ]

    def add_acls(self, acls: list[AclBinding]) -> None:
        with self._transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO acls VALUES (?, ?, ?, ?, ?, ?, ?)",
                [astuple(a) for a in acls],
            )

    def delete_acls(self, acls: list[AclBinding]) -> None:
        with self._transaction() as db:
            db.executemany(
                "DELETE FROM acls WHERE resource_type = ? AND resource_name = ? AND "
                "pattern_type = ? AND principal = ? AND host = ? AND operation = ? AND "
                "permission = ?",
                [astuple(a) for a in acls],
            )

    def load_client_quotas(self) -> dict[Entity, dict[str, float]]:
        quotas: dict[Entity, dict[str, float]] = {}
        for entity, key, value in self._db.execute(
            "SELECT entity, quota_key, value FROM client_quotas"
        ):
            parts = tuple((kind, name) for kind, name in json.loads(entity))
            quotas.setdefault(parts, {})[key] = value
        return quotas

    def alter_client_quotas(self, changes: list[tuple[Entity, dict[str, float | None]]]) -> None:
        with self._transaction() as db:
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
                            "INSERT INTO client_quotas VALUES (?, ?, ?) ON CONFLICT(entity, "
                            "quota_key) DO UPDATE SET value = excluded.value",
                            (key, name, value),
                        )

    def load_broker_configs(self) -> dict[str, dict[str, str]]:
        """Dynamic broker configs: resource (a node id, or "" for the cluster default) ->
        name -> value."""
        configs: dict[str, dict[str, str]] = {}
        for resource, name, value in self._db.execute(
            "SELECT resource, name, value FROM broker_configs"
        ):
            configs.setdefault(resource, {})[name] = value
        return configs

    def save_broker_configs(self, resource: str, configs: dict[str, str]) -> None:
        """Replace one resource's dynamic broker configs with `configs`."""
        with self._transaction() as db:
            db.execute("DELETE FROM broker_configs WHERE resource = ?", (resource,))
            db.executemany(
                "INSERT INTO broker_configs VALUES (?, ?, ?)",
                [(resource, name, value) for name, value in configs.items()],
            )

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db, self._lock)

    def close(self) -> None:
        self._db.close()


def _upsert_log_starts(db: sqlite3.Connection, name: str, log_starts: dict[int, int]) -> None:
    db.executemany(
        "INSERT INTO log_starts VALUES (?, ?, ?) ON CONFLICT(topic, partition) DO UPDATE "
        "SET log_start_offset = MAX(log_start_offset, excluded.log_start_offset)",
        [(name, partition, offset) for partition, offset in log_starts.items()],
    )


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT on the one connection, holding the store's lock: the
    metadata worker thread and the (rare) writes still made on the event loop share the
    connection, and two transactions must never interleave on it."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db = db
        self._lock = lock

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self._lock.release()
