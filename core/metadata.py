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
from dataclasses import dataclass, field
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


class MetadataStore(Protocol):
    def load_topics(self) -> list[TopicRecord]: ...
    def create_topic(self, topic: TopicRecord) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def next_counter(self, name: str) -> int: ...
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

    def next_counter(self, name: str) -> int:
        """Atomically increment and return a persistent counter (first value 0)."""
        with self._transaction() as db:
            row = db.execute(
                "INSERT INTO counters VALUES (?, 0) ON CONFLICT(name) DO UPDATE "
                "SET value = value + 1 RETURNING value",
                (name,),
            ).fetchone()
        return int(row[0])

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
