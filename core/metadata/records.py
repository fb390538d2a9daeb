"""What crosses the metadata layer's interface: named records, never bare tuples.

Dataclasses for what callers build and mutate (a topic with its segments, a chunk whose id
the store assigns); NamedTuples for the read-only rows the store returns (they still
unpack like the tuples they replace).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple


class TopicExistsError(Exception):
    """create_topic: a topic of that name exists already (another node may have made it)."""


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


class TxnPartition(NamedTuple):
    """A partition a transaction wrote to (AddPartitionsToTxn)."""

    topic: str
    partition: int


class PendingTxnOffset(NamedTuple):
    """A TxnOffsetCommit offset, committed with its transaction or dropped with it."""

    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


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
    partitions: list[TxnPartition] = field(default_factory=list)
    offsets: list[PendingTxnOffset] = field(default_factory=list)


class AbortedTxn(NamedTuple):
    """An aborted transaction's range in one partition (Fetch's aborted_transactions)."""

    partition: int
    producer_id: int
    first_offset: int
    last_offset: int


class TxnMarker(NamedTuple):
    """A marker a transaction coordinator asks another node to write: the node leading
    `partition` of `topic` appends it and forgets the row (several nodes)."""

    topic: str
    partition: int
    producer_id: int
    epoch: int
    commit: bool


class OpenTxn(NamedTuple):
    """A saved open transaction: where producer `producer_id`'s starts in `partition`."""

    partition: int
    producer_id: int
    first_offset: int


class TopicHead(NamedTuple):
    """A topic's head row: what nodes compare to follow each other's topic changes."""

    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str]


class OwnedSegment(NamedTuple):
    segment: SegmentRecord
    owner_node: int | None


class SegmentOwner(NamedTuple):
    node: int | None
    epoch: int  # bumped by every claim and hand-over: fences the previous owner


class OpenSegment(NamedTuple):
    """An open segment with an owner (several nodes)."""

    topic: str
    segment_id: int
    first_partition: int
    last_partition: int
    owner_node: int


@dataclass(slots=True)
class NodeRecord:
    node_id: int
    host: str
    port: int
    incarnation: int
    live: bool
    lease_left_s: float = 0.0  # until the lease expires by the database's clock (<0: past)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a SCRAM server keeps of a password (RFC 5802): never the password itself."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


class CredentialKey(NamedTuple):
    """One user's credential for one SCRAM mechanism: what a deletion names."""

    user: str
    mechanism: str


class UserCredential(NamedTuple):
    """A credential to store (insert or replace) for `user` and `mechanism`."""

    user: str
    mechanism: str
    credential: ScramCredential


class CredentialInfo(NamedTuple):
    """A user's credential as DescribeUserScramCredentials shows it (no secrets)."""

    mechanism: str
    iterations: int


class WalRange(NamedTuple):
    """Log positions [start, end) of one segment, stored at `object_offset` in a
    write-ahead object (core/wal)."""

    topic: str
    topic_id: uuid.UUID
    segment_id: int
    start_position: int
    end_position: int
    object_offset: int
    object_key: str = ""  # set when read back from the store


class WalFenced(Exception):
    """A write-ahead object's commit was refused: this node no longer owns a segment in
    it (another node took it over) or its lease is gone. Nothing in it is acknowledged."""
