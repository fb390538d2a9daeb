"""What the Kafka layer needs from a stream store: the interface, its results and its errors.

`gateway/` depends on these protocols only, never on a concrete engine, so another engine
(an in-memory store for handler tests, PostgreSQL metadata for several nodes) plugs in by
satisfying them. `core.store.StreamStore` is today's engine.

Errors: a store raises `StoreError` subclasses, never its backends' exceptions (sqlite3,
object-store clients, OS errors). `retriable` says whether the same request may succeed
later; the gateway maps them to Kafka error codes in one place (`gateway/errors.py`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import trio

from .errors import ErrorCode
from .metadata import CommittedOffset, SegmentRecord, TxnRecord

ZERO_UUID = uuid.UUID(int=0)  # Kafka's "no topic id"

# --- errors ------------------------------------------------------------------------------


class StoreError(Exception):
    """A request the store could not carry out."""

    retriable = False


class TopicError(StoreError):
    """A topic-level request was refused; `error_code` is the Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class StoreUnavailable(StoreError):
    """A backend the request needs is down or behind (e.g. tier 2); retry later."""

    retriable = True


class StorageError(StoreError):
    """Local storage (the log or the metadata database) failed the request."""

    retriable = True


# --- results -----------------------------------------------------------------------------


@dataclass(slots=True)
class AppendResult:
    error: int
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None


@dataclass(slots=True)
class ReadResult:
    error: int
    high_watermark: int = -1
    log_start_offset: int = -1
    batches: Sequence[bytes | memoryview] | None = None
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of aborted transactions in the range read
    aborted: list[tuple[int, int]] | None = None


@dataclass(slots=True)
class ScaleResult:
    kind: str  # "split" or "merge"
    epoch: int
    sealed: list[int]
    successors: list[SegmentRecord]


class PendingAppend(Protocol):
    """An append that is queued; `wait` returns its result once it is durable."""

    def wait(self) -> Awaitable[AppendResult]: ...

    def result_now(self) -> AppendResult | None:
        """The result if it is already known (durable or failed), without awaiting."""
        ...

    def notify_when_done(self, callback: Callable[[], None]) -> bool:
        """Have `callback` called once, by the task that finishes the append, when
        `result_now` knows the result (it must not raise); False where that cannot be told
        (the caller awaits `wait` instead). Only for a result not known yet."""
        ...


class PendingRead(Protocol):
    """A tier-1 read planned synchronously (`Topic.plan_read`): its size is known, its
    bytes are read by `Store.finish_reads`, together with the other partitions'."""

    @property
    def size(self) -> int: ...


# --- the interface -----------------------------------------------------------------------


class PartitionView(Protocol):
    """One virtual partition's offsets, and a way to wait for new data."""

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def local_start_offset(self) -> int:
        """The first offset still in tier 1 (ListOffsets v8's earliest-local)."""
        ...

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, else the high watermark."""
        ...

    def size_bytes(self) -> int:
        """Bytes the partition holds: tier-1 batches plus tier-2 slices older than them."""
        ...

    def add_waiter(self, event: trio.Event) -> None:
        """Set `event` the next time the high watermark moves or the partition goes away."""

    def remove_waiter(self, event: trio.Event) -> None: ...


class Topic(Protocol):
    """A topic: its partitions, appends, reads and timestamp lookups."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID:
        """The topic's stable UUID (KIP-516), new when a name is deleted and created again."""
        ...

    @property
    def partition_count(self) -> int: ...

    @property
    def configs(self) -> dict[str, str]: ...

    def has_partition(self, index: int) -> bool: ...

    def partition(self, index: int) -> PartitionView: ...

    def start_append(
        self,
        index: int,
        records: bytes | memoryview | None,
        acks: int,
        transactional: bool = False,
    ) -> AppendResult | PendingAppend:
        """Validate and queue synchronously (so request order is append order); the final
        result (an error, or acks=0) or a PendingAppend to await. `transactional`: the
        request has a transactional id the transaction coordinator accepted."""
        ...

    async def read(
        self,
        index: int,
        offset: int,
        max_bytes: int,
        first_may_exceed: bool = True,
        read_committed: bool = False,
    ) -> ReadResult: ...

    def plan_read(
        self,
        index: int,
        offset: int,
        max_bytes: int,
        first_may_exceed: bool = True,
        read_committed: bool = False,
    ) -> ReadResult | PendingRead | None:
        """`read` planned without reading: the final result when nothing is to be read, a
        PendingRead for tier-1 batches (pass it to `Store.finish_reads`), None when the
        batches must come from tier 2 (then await `read`)."""
        ...

    async def offset_for_timestamp(self, index: int, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record at or after `timestamp`; (-1, -1) if
        none; timestamp -3 = the record with the largest timestamp. StoreUnavailable."""
        ...


class BrokerDefaults(Protocol):
    """The store settings the broker's DescribeConfigs reports."""

    @property
    def data_dir(self) -> str: ...

    @property
    def default_partitions(self) -> int: ...

    @property
    def auto_create_topics(self) -> bool: ...


class Store(Protocol):
    """Topics and producer ids. Methods raise TopicError / StoreError as documented."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def settings(self) -> BrokerDefaults: ...

    def topics(self) -> Iterable[Topic]: ...

    def get(self, name: str) -> Topic | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic | None: ...

    def get_or_create(self, name: str) -> Topic | None:
        """The topic, auto-created with the default partition count if allowed."""
        ...

    def check_new_topic(
        self, name: str, partitions: int = -1, configs: Mapping[str, str | None] | None = None
    ) -> tuple[int, dict[str, str]]:
        """What `create_topic` would create (partition count, normalised configs)."""
        ...

    def create_topic(
        self, name: str, partitions: int = -1, configs: Mapping[str, str | None] | None = None
    ) -> Topic: ...

    def delete_topic(self, name: str) -> Awaitable[None]: ...

    def update_topic_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> dict[str, str]: ...

    def grow_partitions(self, name: str, count: int, validate_only: bool = False) -> None: ...

    def delete_records(self, name: str, index: int, offset: int) -> Awaitable[tuple[int, int]]:
        """Raise a partition's log start offset durably: (error code, low watermark)."""
        ...

    def allocate_producer_id(self) -> Awaitable[int]: ...

    async def finish_reads(self, pending: Sequence[PendingRead]) -> list[ReadResult]:
        """The results of reads planned by `Topic.plan_read` (of any topics), in order,
        their bytes read in one worker-thread hop."""
        ...

    def appends_sent_together(self) -> AbstractContextManager[None]:
        """A context for one request's appends: each log they went to writes them as it
        ends, in one write, with no pass through its flusher task."""
        ...

    def finish_reads_now(self, pending: Sequence[PendingRead]) -> list[ReadResult] | None:
        """`finish_reads` without a wait when every batch is in memory; None otherwise."""
        ...


class Transactions(Protocol):
    """The transaction coordinator (core/txn). Methods answer Kafka error codes; those
    that commit raise StoreError when the metadata store fails."""

    def coordinates(self, transactional_id: str) -> bool:
        """This node coordinates the id (else NOT_COORDINATOR: the client finds the one)."""
        ...

    def describe(self, transactional_id: str) -> TxnRecord | None: ...

    def list_transactions(self) -> list[TxnRecord]: ...

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """An open transaction holds a TxnOffsetCommit for this group's partition."""
        ...

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch)."""
        ...

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]: ...

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> int: ...

    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        offsets: list[CommittedOffset],
        implicit: bool = False,
    ) -> int:
        """`implicit` (TxnOffsetCommit v5, transactions v2): opens the transaction if needed,
        without AddOffsetsToTxn."""
        ...

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> int: ...

    async def end_txn_v2(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> tuple[int, int, int]:
        """EndTxn v5 (transactions v2): (error, producer id, epoch) with the epoch bumped by
        every ending transaction."""
        ...

    def check_produce(
        self,
        transactional_id: str,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        abortable: bool = False,
        implicit: bool = False,
    ) -> int:
        """Error code for a transactional Produce to this partition (NONE: go on).
        `abortable`: the client knows TRANSACTION_ABORTABLE (Produce v11+); `implicit`: a
        partition outside the open transaction is added by the write (Produce v12+)."""
        ...

    def verified_append(
        self,
        transactional_id: str,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        abortable: bool,
        start: Callable[[], AppendResult | PendingAppend],
        implicit: bool = False,
    ) -> PendingAppend | None:
        """Several nodes: `start` deferred until the transactional id's committed record
        admits the write; one node with `implicit`: until the partition is added to the open
        transaction (None: start it now)."""
        ...

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        abortable: bool,
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn v4+ with verify_only: per partition, is it in the open
        transaction of this producer id and epoch? Nothing is added."""
        ...


_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def validate_topic_name(name: str | None) -> None:
    """Kafka's rule for topic names; TopicError (INVALID_TOPIC_EXCEPTION) otherwise."""
    if not name or name in (".", "..") or not _LEGAL_TOPIC.match(name):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name {name!r}")
