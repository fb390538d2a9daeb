"""The transaction coordinator: Kafka's transaction state machine over the stream store.

Per transactional id: its producer id and epoch, state, timeout, the partitions and the
consumer-group offsets of the open transaction. Every state change is committed to SQLite
(through the metadata worker) before it is answered, so a restart resumes where it was:
PrepareCommit / PrepareAbort write their markers again (a repeated marker is harmless:
partitions ignore a marker for a producer without an open transaction) and Ongoing ones
abort when their timeout runs out.

Ending a transaction: PrepareX is durable, then a marker is appended to every partition
the transaction touched through the normal append path (they take an offset and are
fsync'd), then the offsets (on commit) go to the group coordinator, then CompleteX is
durable, and only then is EndTxn answered; so a client that saw its commit succeed reads
it back, and a crash at any point leaves every transaction whole either way.

Requests for one transactional id are serialised by a lock; the timeout of an open
transaction is a trio task that sleeps until its deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import trio

from ..api import AppendResult, PendingAppend, StoreError, StoreUnavailable
from ..cluster.fencing import FENCE
from ..cluster.view import CLUSTER
from ..errors import ErrorCode
from ..metadata import (
    AbortedTxn,
    CommittedOffset,
    MetadataStore,
    PendingTxnOffset,
    TxnMarker,
    TxnPartition,
    TxnRecord,
)
from ..metadata_worker import MetadataWorker
from ..recordbatch import RecordBatchError, build_control_batch, read_batch_header
from .partition_state import PartitionTxns
from .state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    MAX_EPOCH,
    MAX_TIMEOUT_MS,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
)
from .verified_append import VerifiedAppend

log = logging.getLogger(__name__)

OffsetSink = Callable[[list[CommittedOffset]], Awaitable[None]]
_MARKER_RETRY_S = 0.5
# Several nodes: how often a node looks for markers left for it, and for transactions that
# became its own (their coordinator died or the live nodes changed).
_MARKER_POLL_S = 0.05
_ADOPT_EVERY_S = 1.0
_OPEN = (ONGOING, PREPARE_COMMIT, PREPARE_ABORT)


class _Partition(Protocol):
    @property
    def txns(self) -> PartitionTxns | None: ...


class _Stream(Protocol):
    def has_partition(self, index: int) -> bool: ...
    def partition(self, index: int) -> _Partition: ...
    def start_marker(self, index: int, marker: bytes) -> AppendResult | PendingAppend: ...


class TxnStore(Protocol):
    """What the coordinator uses of the stream store (`core.store.StreamStore`): its open
    streams, to write markers, and producer ids. Transactions sit below the stream (each
    partition keeps its own transactions), so the coordinator never imports the store."""

    @property
    def streams(self) -> Mapping[str, _Stream]: ...
    async def allocate_producer_id(self) -> int: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(
        self,
        store: TxnStore,
        metadata: MetadataStore,
        worker: MetadataWorker,
        commit_offsets: OffsetSink,
        max_timeout_ms: int = MAX_TIMEOUT_MS,
    ) -> None:
        """`commit_offsets` makes a committed transaction's group offsets durable and
        visible (the group coordinator's offset store)."""
        self._store = store
        self._metadata = metadata
        self._worker = worker
        self._commit_offsets = commit_offsets
        self.max_timeout_ms = max_timeout_ms
        self._txns: dict[str, TxnRecord] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._timers: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._stopping = trio.Event()
        # (topic, partition, producer id) -> set once its last deferred write has started
        self._verifying: dict[tuple[str, int, int], trio.Event] = {}
        # Transactions v2: id -> (producer id, epoch) its last ending ran out of epochs with
        # (a retried EndTxn still names them); in memory only.
        self._rolled_over: dict[str, tuple[int, int]] = {}

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load every transactional id, finish or time out what was in flight, then keep
        the timeout tasks running until `stop`."""
        records = await self._worker.call(self._metadata.load_transactions)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for record in records:
                self._txns[record.transactional_id] = record
                if record.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    nursery.start_soon(self._resume, record.transactional_id)
                elif record.state == ONGOING:
                    self._start_timer(record)
            log.info("transaction coordinator up: %d transactional ids", len(records))
            nursery.start_soon(self._cluster_loops)
            task_status.started()
            await self._stopping.wait()
            nursery.cancel_scope.cancel()

    def stop(self) -> None:
        self._stopping.set()

    # --- lookups ---------------------------------------------------------------------------

    def coordinates(self, transactional_id: str) -> bool:
        """This node coordinates the id (several nodes spread ids as they spread groups)."""
        node = CLUSTER.coordinator(transactional_id)
        return node is None or node[0] == CLUSTER.node_id

    def describe(self, transactional_id: str) -> TxnRecord | None:
        return self._txns.get(transactional_id)

    def list_transactions(self) -> list[TxnRecord]:
        return [t for t in self._txns.values() if self.coordinates(t.transactional_id)]

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """An open transaction has a TxnOffsetCommit for this group's partition."""
        return any(
            (o.group_id, o.topic, o.partition) == (group_id, topic, partition)
            for txn in self._txns.values()
            if txn.state in (ONGOING, PREPARE_COMMIT)
            for o in txn.offsets
        )

    # --- the requests ----------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch): the id's producer id with a new epoch; an open
        transaction of an older epoch is aborted first (the zombie is fenced)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        if not self.coordinates(transactional_id):
            return ErrorCode.NOT_COORDINATOR, -1, -1
        async with self._lock(transactional_id):
            await self._refresh(transactional_id)
            txn = self._txns.get(transactional_id)
            if txn is None:
                txn = TxnRecord(
                    transactional_id,
                    await self._store.allocate_producer_id(),
                    0,
                    EMPTY,
                    timeout_ms,
                    update_ms=_now_ms(),
                )
                await self._save(txn)
                return ErrorCode.NONE, txn.producer_id, txn.epoch
            if producer_id >= 0 and (producer_id, epoch) != (txn.producer_id, txn.epoch):
                # KIP-360: only the current producer may re-initialise with its id.
                return ErrorCode.PRODUCER_FENCED, -1, -1
            if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
                await self._complete(txn)
            if txn.state == ONGOING:
                log.info(
                    "transactional id %s: epoch %d fenced, aborting its open transaction",
                    transactional_id,
                    txn.epoch,
                )
                await self._end(txn, commit=False, bump_epoch=True)
            else:
                await self._bump_epoch(txn)
            txn.state, txn.timeout_ms, txn.update_ms = EMPTY, timeout_ms, _now_ms()
            await self._save(txn)
            return ErrorCode.NONE, txn.producer_id, txn.epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], int]:
        """Add partitions to the open transaction (opening one if needed); per partition
        an error code. Unknown partitions fail the whole request, as in Kafka."""
        if not self.coordinates(transactional_id):
            return dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
        unknown = {tp for tp in partitions if not self._partition_exists(*tp)}
        if unknown:
            return {
                tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in partitions
            }
        async with self._lock(transactional_id):
            await self._refresh(transactional_id)
            txn = self._txns.get(transactional_id)
            error = self._check(txn, producer_id, epoch)
            if error or txn is None:
                return {tp: error for tp in partitions}
            new = [tp for tp in partitions if tp not in txn.partitions]
            if new or txn.state != ONGOING:
                self._begin(txn)
                txn.partitions.extend(TxnPartition(*tp) for tp in new)
                await self._save(txn)
                self._start_timer(txn)
            return {tp: ErrorCode.NONE for tp in partitions}

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> int:
        """The group's offsets will be committed by this transaction (it opens one)."""
        if not self.coordinates(transactional_id):
            return ErrorCode.NOT_COORDINATOR
        async with self._lock(transactional_id):
            await self._refresh(transactional_id)
            txn = self._txns.get(transactional_id)
            error = self._check(txn, producer_id, epoch)
            if error or txn is None:
                return error
            if txn.state != ONGOING:
                self._begin(txn)
                await self._save(txn)
                self._start_timer(txn)
            return ErrorCode.NONE

    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        offsets: list[CommittedOffset],
        implicit: bool = False,
    ) -> int:
        """Remember offsets until the transaction ends: committed with it, or dropped.
        `implicit` (v5, transactions v2): the group joins the transaction here, opening one
        if none is, instead of through AddOffsetsToTxn."""
        if not self.coordinates(transactional_id):
            return ErrorCode.NOT_COORDINATOR
        async with self._lock(transactional_id):
            await self._refresh(transactional_id)
            txn = self._txns.get(transactional_id)
            error = self._check(txn, producer_id, epoch)
            if error or txn is None:
                return error
            opened = False
            if txn.state != ONGOING:
                if not implicit:
                    return ErrorCode.INVALID_TXN_STATE
                self._begin(txn)
                opened = True
            keep = {(o.group_id, o.topic, o.partition) for o in offsets}
            txn.offsets = [o for o in txn.offsets if (o.group_id, o.topic, o.partition) not in keep]
            txn.offsets.extend(
                PendingTxnOffset(
                    o.group_id, o.topic, o.partition, o.offset, o.leader_epoch, o.metadata
                )
                for o in offsets
            )
            await self._save(txn)
            if opened:
                self._start_timer(txn)
            return ErrorCode.NONE

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> int:
        if not self.coordinates(transactional_id):
            return ErrorCode.NOT_COORDINATOR
        async with self._lock(transactional_id):
            await self._refresh(transactional_id)
            txn = self._txns.get(transactional_id)
            error = self._check(txn, producer_id, epoch, ending=True)
            if error or txn is None:
                return error
            if txn.state == ONGOING:
                await self._end(txn, commit)
                return ErrorCode.NONE
            done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            if txn.state == done:  # a retry of the EndTxn that finished it
                return ErrorCode.NONE
            return ErrorCode.INVALID_TXN_STATE

    async def end_txn_v2(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> tuple[int, int, int]:
        """EndTxn v5 (transactions v2, KIP-890 part 2): (error, producer id, epoch). Every
        ending bumps the epoch (the markers carry the new one, so a write of the ended
        transaction arriving late is fenced); past the last epoch the id gets a new producer
        id. A retry of the EndTxn that ended it (the old epoch, the same outcome) is answered
        NONE with the current pair. An abort with nothing open still bumps the epoch (a v2
        client cannot know whether its writes opened a transaction); a commit is
        INVALID_TXN_STATE."""
        if not self.coordinates(transactional_id):
            return ErrorCode.NOT_COORDINATOR, -1, -1
        async with self._lock(transactional_id):
            await self._refresh(transactional_id)
            txn = self._txns.get(transactional_id)
            if txn is not None and self._is_end_retry(txn, producer_id, epoch, commit):
                return ErrorCode.NONE, txn.producer_id, txn.epoch
            error = self._check(txn, producer_id, epoch)
            if error or txn is None:
                return error, -1, -1
            if txn.state == ONGOING:
                await self._end(txn, commit, bump_epoch=True)
            elif commit:
                return ErrorCode.INVALID_TXN_STATE, -1, -1
            else:
                txn.epoch += 1
                txn.state, txn.update_ms = COMPLETE_ABORT, _now_ms()
                await self._roll_over(txn)
                await self._save(txn)
            return ErrorCode.NONE, txn.producer_id, txn.epoch

    def _is_end_retry(self, txn: TxnRecord, producer_id: int, epoch: int, commit: bool) -> bool:
        """A v2 EndTxn that already ended the transaction, sent again. The bumped pair is
        enough to tell: no other path leaves CompleteCommit one epoch ahead (v1's bumps end
        in Empty or CompleteAbort, and an abort's retry answered NONE is harmless)."""
        if txn.state != (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return False
        if producer_id == txn.producer_id and epoch + 1 == txn.epoch:
            return True
        return self._rolled_over.get(txn.transactional_id) == (producer_id, epoch)

    def check_produce(
        self,
        transactional_id: str,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        abortable: bool = False,
        implicit: bool = False,
    ) -> int:
        """May this transactional Produce append to the partition? KIP-890 part 1: only if
        its batches' producer id and epoch are the id's current ones and the partition is in
        the open transaction, so a write that lands after its transaction ended (a delayed
        retry) is refused instead of opening a transaction nobody will end. The answer is
        Kafka 3.8+'s: INVALID_PRODUCER_EPOCH for another epoch, and for a partition outside
        the transaction TRANSACTION_ABORTABLE to clients that know it (`abortable`),
        INVALID_TXN_STATE to older ones. With `implicit` (Produce v12, transactions v2) such a
        partition passes: `verified_append` adds it before the write starts.
        Several nodes: `verified_append` checks against the committed record instead (this
        node's copy may be a moment behind when the id has just come back to it)."""
        if CLUSTER.enabled:
            return ErrorCode.NONE
        try:
            header = read_batch_header(records or b"")
        except RecordBatchError:
            return ErrorCode.NONE  # the append path answers a malformed batch
        error = self._verify(
            self._txns.get(transactional_id),
            header.producer_id,
            header.producer_epoch,
            (topic, partition),
            True,
        )
        if implicit and error == ErrorCode.TRANSACTION_ABORTABLE:  # outside the transaction
            return ErrorCode.NONE
        if error == ErrorCode.TRANSACTION_ABORTABLE and not abortable:
            error = ErrorCode.INVALID_TXN_STATE
        return self._produce_error(error, abortable)

    @staticmethod
    def _produce_error(error: int, abortable: bool) -> int:
        """The coordinator's verdict as a partition leader answers the Produce."""
        if error == ErrorCode.PRODUCER_FENCED:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if error == ErrorCode.CONCURRENT_TRANSACTIONS:  # being ended: this write is too late
            return ErrorCode.TRANSACTION_ABORTABLE if abortable else ErrorCode.INVALID_TXN_STATE
        return error

    def verified_append(
        self,
        transactional_id: str,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        abortable: bool,
        start: Callable[[], AppendResult | PendingAppend],
        implicit: bool = False,
    ) -> VerifiedAppend | None:
        """Several nodes: the append `start` begins, deferred until the id's committed record
        (the metadata store is the arbiter, whichever node coordinates the id) shows the
        partition in its open transaction. None where no deferral is needed (one node:
        `check_produce` decided; the producer's transaction is already open on the
        partition, checked when it began; an unreadable batch, which the append refuses).
        One node with `implicit` (Produce v12): a write to a partition outside the open
        transaction is deferred until the coordinator has added it (durably), as Kafka's
        leader asks its coordinator. Several nodes add nothing (transactions v2 is not
        offered there): such a write is refused as in v1."""
        if not CLUSTER.enabled:
            if not implicit:
                return None
            return self._implicit_add(transactional_id, topic, partition, records, start)
        try:
            header = read_batch_header(records or b"")
        except RecordBatchError:
            return None
        producer_id, epoch = header.producer_id, header.producer_epoch
        if self._holds_open(topic, partition, producer_id):
            return None
        key = (topic, partition, producer_id)
        previous = self._verifying.get(key)
        done = self._verifying[key] = trio.Event()

        async def verify() -> int:
            try:
                if self._holds_open(topic, partition, producer_id):
                    return ErrorCode.NONE  # the write before this one began it, verified
                try:
                    record = await self._worker.call(
                        self._metadata.load_transaction, transactional_id
                    )
                except StoreError as exc:  # retriable for every client, as Kafka answers
                    log.debug("verifying a write of %s: %s", transactional_id, exc)
                    return ErrorCode.NOT_ENOUGH_REPLICAS
                error = self._verify(record, producer_id, epoch, (topic, partition), abortable)
                return self._produce_error(error, abortable)
            finally:
                if self._verifying.get(key) is done:
                    del self._verifying[key]

        return VerifiedAppend(verify, start, previous, done)

    def _implicit_add(
        self,
        transactional_id: str,
        topic: str,
        partition: int,
        records: bytes | memoryview | None,
        start: Callable[[], AppendResult | PendingAppend],
    ) -> VerifiedAppend | None:
        try:
            header = read_batch_header(records or b"")
        except RecordBatchError:
            return None
        producer_id, epoch = header.producer_id, header.producer_epoch
        tp = (topic, partition)
        txn = self._txns.get(transactional_id)
        if self._verify(txn, producer_id, epoch, tp, True) == ErrorCode.NONE:
            return None  # already in the open transaction
        key = (topic, partition, producer_id)
        previous = self._verifying.get(key)
        done = self._verifying[key] = trio.Event()

        async def add() -> int:
            try:
                txn = self._txns.get(transactional_id)
                if self._verify(txn, producer_id, epoch, tp, True) == ErrorCode.NONE:
                    return ErrorCode.NONE  # the write before this one added it
                try:
                    errors = await self.add_partitions(transactional_id, producer_id, epoch, [tp])
                except StoreError as exc:  # retriable for every client
                    log.debug("adding %s to %s: %s", tp, transactional_id, exc)
                    return ErrorCode.NOT_ENOUGH_REPLICAS
                return self._produce_error(errors[tp], True)
            finally:
                if self._verifying.get(key) is done:
                    del self._verifying[key]

        return VerifiedAppend(add, start, previous, done)

    def _holds_open(self, topic: str, partition: int, producer_id: int) -> bool:
        stream = self._store.streams.get(topic)
        if stream is None or not stream.has_partition(partition):
            return False
        txns = stream.partition(partition).txns
        return txns is not None and producer_id in txns.ongoing

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        abortable: bool,
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn v4+ with verify_only: each partition's standing in the open
        transaction (nothing is added), as Kafka's coordinator answers a leader."""
        if not self.coordinates(transactional_id):
            return dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
        txn = self._txns.get(transactional_id)
        return {tp: self._verify(txn, producer_id, epoch, tp, abortable) for tp in partitions}

    def _verify(
        self,
        txn: TxnRecord | None,
        producer_id: int,
        epoch: int,
        partition: tuple[str, int],
        abortable: bool,
    ) -> int:
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != txn.epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if txn.state != ONGOING or partition not in txn.partitions:
            return ErrorCode.TRANSACTION_ABORTABLE if abortable else ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # --- state machine ---------------------------------------------------------------------

    def _check(
        self, txn: TxnRecord | None, producer_id: int, epoch: int, ending: bool = False
    ) -> int:
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != txn.epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if ending and txn.state == EMPTY:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def _begin(self, txn: TxnRecord) -> None:
        if txn.state != ONGOING:
            txn.state = ONGOING
            txn.start_ms = _now_ms()
            txn.partitions, txn.offsets = [], []
        txn.update_ms = _now_ms()

    async def _bump_epoch(self, txn: TxnRecord) -> None:
        if txn.epoch + 1 >= MAX_EPOCH:  # epochs are int16: go on with a new producer id
            txn.producer_id = await self._store.allocate_producer_id()
            txn.epoch = 0
        else:
            txn.epoch += 1

    async def _roll_over(self, txn: TxnRecord) -> None:
        """An epoch bumped to MAX_EPOCH (the markers used it) is the producer id's last: the
        id goes on with a new producer id at epoch 0."""
        if txn.epoch >= MAX_EPOCH:
            self._rolled_over[txn.transactional_id] = (txn.producer_id, txn.epoch - 1)
            txn.producer_id = await self._store.allocate_producer_id()
            txn.epoch = 0

    async def _end(self, txn: TxnRecord, commit: bool, bump_epoch: bool = False) -> None:
        """Ongoing -> PrepareX (durable) -> markers, offsets -> CompleteX (durable).
        `bump_epoch` fences the producer: its markers carry the new epoch."""
        self._cancel_timer(txn.transactional_id)
        if bump_epoch:  # the markers carry it: up to MAX_EPOCH, then `_complete` rolls over
            txn.epoch += 1
        txn.state = PREPARE_COMMIT if commit else PREPARE_ABORT
        txn.update_ms = _now_ms()
        await self._save(txn)
        await self._complete(txn)

    async def _complete(self, txn: TxnRecord) -> None:
        """Write PrepareX's markers and offsets, then make CompleteX durable."""
        commit = txn.state == PREPARE_COMMIT
        await self._write_markers(txn, commit)
        if commit and txn.offsets:
            now = _now_ms()
            await self._commit_offsets(
                [CommittedOffset(g, t, p, off, le, md, now) for g, t, p, off, le, md in txn.offsets]
            )
        txn.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        txn.partitions, txn.offsets = [], []
        txn.update_ms = _now_ms()  # start_ms stays: Kafka describes the last one
        await self._roll_over(txn)
        await self._save(txn)
        log.debug("transactional id %s: %s", txn.transactional_id, txn.state)

    async def _write_markers(self, txn: TxnRecord, commit: bool) -> None:
        """Append a marker to every partition of the transaction and wait until they are
        durable; retried until they are (a transaction must end). Several nodes: a
        partition another node leads gets its marker from that node, through a row in the
        metadata store (the node leading it when it reads the row writes it)."""
        remaining = [TxnMarker(t, i, txn.producer_id, txn.epoch, commit) for t, i in txn.partitions]
        elsewhere: list[TxnMarker] = []
        while remaining:
            there = [m for m in remaining if not CLUSTER.is_local(m.topic, m.partition)]
            if there:
                try:
                    await self._worker.call(self._metadata.add_txn_markers, there)
                except StoreError as exc:
                    log.warning(
                        "transactional id %s: leaving markers failed: %s", txn.transactional_id, exc
                    )
                    await trio.sleep(_MARKER_RETRY_S)
                    continue
                elsewhere.extend(there)
            remaining = await self._append_here([m for m in remaining if m not in there])
            if remaining:
                log.warning(
                    "transactional id %s: markers failed on %d partitions, retrying",
                    txn.transactional_id,
                    len(remaining),
                )
                await trio.sleep(_MARKER_RETRY_S)
        while elsewhere:
            await trio.sleep(_MARKER_POLL_S)
            try:
                left = set(await self._worker.call(self._metadata.txn_markers))
            except StoreError:
                continue
            elsewhere = [m for m in elsewhere if m in left]

    async def _append_here(self, markers: list[TxnMarker]) -> list[TxnMarker]:
        """Append markers to partitions of this node and wait until they are durable;
        returns those that failed. Aborts are also kept in the metadata store (data only in
        tier 2 stays hidden)."""
        waits = []
        for m in markers:
            stream = self._store.streams.get(m.topic)
            if stream is None or not stream.has_partition(m.partition):
                continue  # the topic was deleted meanwhile: nothing to mark
            batch = build_control_batch(m.producer_id, m.epoch, m.commit)
            waits.append((m, stream.start_marker(m.partition, batch)))
        failed: list[TxnMarker] = []
        aborted: dict[str, list[AbortedTxn]] = {}
        for m, started in waits:
            result = started if isinstance(started, AppendResult) else await started.wait()
            if result.error:
                failed.append(m)
                continue
            if not m.commit:
                entry = self._aborted_at(m.topic, m.partition, result.base_offset)
                if entry is not None:
                    aborted.setdefault(m.topic, []).append(entry)
        for topic, rows in aborted.items():  # kept for data that will live in tier 2 only
            try:
                await self._worker.call(self._metadata.add_aborted_txns, topic, rows)
            except StoreError as exc:
                log.warning("topic %s: saving aborted transactions failed: %s", topic, exc)
        return failed

    # --- several nodes ---------------------------------------------------------------------

    async def _cluster_loops(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._markers_for_me)
            nursery.start_soon(self._adopt_loop)

    async def _markers_for_me(self) -> None:
        """Write the markers other nodes' coordinators left for partitions this node leads."""
        while True:
            await trio.sleep(_MARKER_POLL_S)
            if not CLUSTER.enabled:
                continue
            try:
                rows = await self._worker.call(self._metadata.txn_markers)
                here = [m for m in rows if CLUSTER.is_local(m.topic, m.partition)]
                if not here:
                    continue
                failed = await self._append_here(here)
                done = [m for m in here if m not in failed]
                if done:
                    await self._worker.call(self._metadata.forget_txn_markers, done)
            except StoreError as exc:  # the database is away: next round
                log.debug("transaction markers: %s", exc)

    async def _adopt_loop(self) -> None:
        """Transactions whose coordinator is now this node (the node that had them died,
        or the live nodes changed) are loaded: their timeout runs here, a PrepareX one is
        finished here. Those now another node's are forgotten."""
        while True:
            await trio.sleep(_ADOPT_EVERY_S)
            if not CLUSTER.enabled or self._nursery is None:
                continue
            for tid in [t for t in self._txns if not self.coordinates(t)]:
                if not self._lock(tid).locked():
                    self._cancel_timer(tid)
                    del self._txns[tid]
            try:
                records = await self._worker.call(self._metadata.load_open_transactions)
            except StoreError:
                continue
            for record in records:
                tid = record.transactional_id
                fresh = self._txns.get(tid) == record
                if self.coordinates(tid) and not fresh and not self._lock(tid).locked():
                    self._nursery.start_soon(self._adopt, tid)

    async def _adopt(self, transactional_id: str) -> None:
        async with self._lock(transactional_id):
            if self.coordinates(transactional_id):
                try:
                    await self._refresh(transactional_id)
                except StoreError as exc:  # the next round tries again
                    log.warning(
                        "transactional id %s: taking it over failed: %s", transactional_id, exc
                    )

    async def _refresh(self, transactional_id: str) -> None:
        """Several nodes: take the id's record as committed, since another node may have
        coordinated it since this one last did; finish what it left half done."""
        if not CLUSTER.enabled:
            return
        record = await self._worker.call(self._metadata.load_transaction, transactional_id)
        if record is None or self._txns.get(transactional_id) == record:
            return
        self._cancel_timer(transactional_id)
        self._txns[transactional_id] = record
        if record.state == ONGOING:
            self._start_timer(record)
        elif record.state in (PREPARE_COMMIT, PREPARE_ABORT):
            log.info("transactional id %s: finishing %s", transactional_id, record.state)
            await self._complete(record)

    def _aborted_at(self, topic: str, index: int, marker_offset: int) -> AbortedTxn | None:
        stream = self._store.streams.get(topic)
        if stream is None:
            return None
        txns = stream.partition(index).txns
        for entry in reversed(txns.aborted if txns is not None else []):
            if entry.last_offset == marker_offset:
                return AbortedTxn(index, entry.producer_id, entry.first_offset, entry.last_offset)
        return None

    async def _resume(self, transactional_id: str) -> None:
        """After a restart: finish a transaction that was being committed or aborted."""
        async with self._lock(transactional_id):
            txn = self._txns[transactional_id]
            if txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
                log.info("transactional id %s: finishing %s", transactional_id, txn.state)
                await self._complete(txn)

    # --- timeouts --------------------------------------------------------------------------

    def _start_timer(self, txn: TxnRecord) -> None:
        if self._nursery is None or txn.transactional_id in self._timers:
            return
        scope = trio.CancelScope()
        self._timers[txn.transactional_id] = scope
        deadline_s = (txn.start_ms + txn.timeout_ms - _now_ms()) / 1000
        self._nursery.start_soon(self._timeout, txn.transactional_id, scope, deadline_s)

    def _cancel_timer(self, transactional_id: str) -> None:
        scope = self._timers.pop(transactional_id, None)
        if scope is not None:
            scope.cancel()

    async def _timeout(self, transactional_id: str, scope: trio.CancelScope, delay: float) -> None:
        with scope:
            await trio.sleep(max(0.0, delay))
            self._timers.pop(transactional_id, None)
            async with self._lock(transactional_id):
                txn = self._txns.get(transactional_id)
                if txn is not None and txn.state == ONGOING and self.coordinates(transactional_id):
                    log.info(
                        "transactional id %s: timed out after %d ms, aborting",
                        transactional_id,
                        txn.timeout_ms,
                    )
                    with trio.CancelScope(shield=True):  # never half-done
                        try:
                            await self._end(txn, commit=False, bump_epoch=True)
                        except StoreError as exc:  # the next coordinator (or start) ends it
                            log.warning(
                                "transactional id %s: abort failed: %s", transactional_id, exc
                            )

    # --- helpers ---------------------------------------------------------------------------

    def _lock(self, transactional_id: str) -> trio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = trio.Lock()
        return lock

    def _partition_exists(self, topic: str, index: int) -> bool:
        stream = self._store.streams.get(topic)
        return stream is not None and stream.has_partition(index)

    async def _save(self, txn: TxnRecord) -> None:
        if not FENCE.valid():  # a node frozen past its lease: another coordinates now
            raise StoreUnavailable("this node's lease has lapsed: it coordinates nothing")
        await self._worker.call(self._metadata.save_transaction, _copy(txn))
        self._txns[txn.transactional_id] = txn


def _copy(txn: TxnRecord) -> TxnRecord:
    """A snapshot for the worker thread (the loop may change the record meanwhile)."""
    return TxnRecord(
        txn.transactional_id,
        txn.producer_id,
        txn.epoch,
        txn.state,
        txn.timeout_ms,
        txn.start_ms,
        txn.update_ms,
        list(txn.partitions),
        list(txn.offsets),
    )
