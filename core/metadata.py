"""The metadata store: topics (streams), their segments, and counters.

One small interface (`MetadataStore`) with an embedded SQLite implementation in the data
folder. Every change that must be atomic (a topic with its first segment, later a scale event
sealing and opening segments) is one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from dataclasses import astuple, dataclass, field
from typing import Protocol


@dataclass(slots=True)
class SegmentRecord:
    segment_id: int
    epoch: int
    first_partition: int
    last_partition: int
    sealed: bool = False


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
    def load_offsets(self) -> list[CommittedOffset]: ...
    def commit_offsets(self, offsets: list[CommittedOffset]) -> None: ...
    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None = None
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
"""


class SQLiteMetadataStore:
    """Embedded default: a SQLite file with WAL journaling and synchronous=FULL."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)

    def load_topics(self) -> list[TopicRecord]:
        topics = {}
        for name, topic_id, partitions, configs, created_ms in self._db.execute(
            "SELECT name, topic_id, partitions, configs, created_ms FROM topics"
        ):
            topics[name] = TopicRecord(
                name, uuid.UUID(topic_id), partitions, json.loads(configs), created_ms
            )
        for row in self._db.execute(
            "SELECT topic, segment_id, epoch, first_partition, last_partition, sealed "
            "FROM segments ORDER BY topic, segment_id"
        ):
            topics[row[0]].segments.append(
                SegmentRecord(row[1], row[2], row[3], row[4], bool(row[5]))
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
                "INSERT INTO segments VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        topic.name,
                        s.segment_id,
                        s.epoch,
                        s.first_partition,
                        s.last_partition,
                        int(s.sealed),
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
                    "INSERT INTO segments VALUES (?, ?, ?, ?, ?, 0)",
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

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def close(self) -> None:
        self._db.close()


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
