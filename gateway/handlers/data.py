"""Produce, Fetch and ListOffsets: the data path."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import trio

from core.acl.model import Operation, ResourceType
from core.api import (
    AppendResult,
    PartitionView,
    PendingAppend,
    PendingRead,
    ReadResult,
    StoreError,
    Topic,
    TopicError,
)
from core.cluster.view import CLUSTER
from core.configs.produce_rules import Rewritten, apply_rules, rules_for
from core.configs.topic import max_message_bytes
from core.errors import ErrorCode
from gateway.errors import log_store_error
from kafkawire.codec import RequestHeader
from kafkawire.fetch_response import PartitionData, encode_fetch_response

from .authz import allowed
from .context import GatewayContext

_VALID_ACKS = (-1, 0, 1)
# ListOffsets special timestamps; -3 (max timestamp) is resolved by Topic.offset_for_timestamp.
_EARLIEST, _LATEST = -2, -1
_EARLIEST_LOCAL = -4  # v8 (KIP-405): the first offset still in tier 1
_LATEST_TIERED = -5  # v9 (KIP-1005): the last offset only in tier 2, -1 if none
_READ_COMMITTED = 1  # isolation_level of Fetch and ListOffsets


def produce(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> Awaitable[dict[str, Any] | None]:
    """Queue every partition's batches now, synchronously; the returned awaitable waits for
    durability and builds the response.

    The server calls this in request order on each connection, so pipelined Produce requests
    are appended in the order they were sent, whatever order their tasks later run in.
    """
    acks = body.acks
    started: dict[tuple[str, int], AppendResult | PendingAppend] = {}
    extras: dict[tuple[str, int], Rewritten] = {}
    with ctx.store.appends_sent_together():
        _start_appends(ctx, header, body, started, extras)
    return ProduceOutcome(body, acks, started, extras)


def _start_appends(
    ctx: GatewayContext,
    header: RequestHeader,
    body: Any,
    started: dict[tuple[str, int], AppendResult | PendingAppend],
    extras: dict[tuple[str, int], Rewritten],
) -> None:
    """`produce`'s appends, partition by partition, each result into `started`."""
    acks = body.acks
    txn_id = body.transactional_id
    for topic in body.topic_data:
        stream: Topic | None = None
        error: int = ErrorCode.NONE
        if acks not in _VALID_ACKS:
            error = ErrorCode.INVALID_REQUIRED_ACKS
        elif txn_id is not None and ctx.transactions is None:
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            try:
                stream = ctx.store.get_or_create(topic.name)
            except TopicError as exc:
                error = exc.error_code
            if stream is None and not error:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        limit = ctx.max_message_bytes
        rules = None
        if stream is not None:  # the topic's max.message.bytes overrides the gateway's
            limit = max_message_bytes(stream.configs, limit)
            rules = rules_for(stream.configs)
        for part in topic.partition_data:
            key = (topic.name, part.index)
            records = part.records
            if stream is None:
                started[key] = AppendResult(error)
            elif records is not None and len(records) > limit:
                started[key] = AppendResult(ErrorCode.MESSAGE_TOO_LARGE)
            elif txn_id is not None and (
                txn_error := _check_transactional(
                    ctx, txn_id, topic.name, part.index, records, header.api_version
                )
            ):
                started[key] = AppendResult(txn_error)
            else:
                if rules is not None:  # compression.type, LogAppendTime, compact
                    rewritten = apply_rules(rules, records, topic.name, part.index, _now_ms())
                    extras[key] = rewritten
                    if rewritten.error:
                        started[key] = AppendResult(rewritten.error, message=rewritten.message)
                        continue
                    records = rewritten.records
                if txn_id is not None and (
                    deferred := _verified_append(
                        ctx, header, txn_id, stream, part.index, records, acks
                    )
                ):
                    started[key] = deferred
                    continue
                # acks=0 is never answered, yet the request settles only once durable:
                # a later request on the connection must see these records (as on Kafka).
                started[key] = stream.start_append(
                    part.index, records, acks or -1, transactional=txn_id is not None
                )


def _check_transactional(
    ctx: GatewayContext, txn_id: str, topic: str, index: int, records: Any, version: int
) -> int:
    """The transaction coordinator's word on a transactional Produce to this partition
    (v11+ clients know TRANSACTION_ABORTABLE; v12 adds the partition to the transaction)."""
    assert ctx.transactions is not None
    return ctx.transactions.check_produce(
        txn_id, topic, index, records, version >= 11, implicit=version >= 12
    )


def _verified_append(
    ctx: GatewayContext,
    header: RequestHeader,
    txn_id: str,
    stream: Topic,
    index: int,
    records: Any,
    acks: int,
) -> PendingAppend | None:
    """A transactional write the coordinator must admit (several nodes) or add to the
    transaction (Produce v12) first, deferred; None to append now."""
    assert ctx.transactions is not None
    return ctx.transactions.verified_append(
        txn_id,
        stream.name,
        index,
        records,
        header.api_version >= 11,
        lambda: stream.start_append(index, records, acks or -1, transactional=True),
        implicit=header.api_version >= 12,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


class ProduceOutcome:
    """A Produce request's answer once its appends are durable: awaitable, and readable
    without awaiting (`result_now`) once a group commit has finished them, so the server
    can answer several pipelined Produce requests in one pass of the event loop."""

    __slots__ = ("body", "acks", "started", "extras")

    def __init__(
        self,
        body: Any,
        acks: int,
        started: dict[tuple[str, int], AppendResult | PendingAppend],
        extras: dict[tuple[str, int], Rewritten],
    ) -> None:
        self.body = body
        self.acks = acks
        self.started = started
        self.extras = extras

    def result_now(self) -> tuple[bool, dict[str, Any] | None]:
        """(True, response) when every append's result is known; (False, None) if not."""
        results: dict[tuple[str, int], AppendResult] = {}
        for key, value in self.started.items():
            if isinstance(value, AppendResult):
                results[key] = value
                continue
            result = value.result_now()
            if result is None:
                return False, None
            results[key] = result
        return True, _produce_response(self.body, self.acks, results, self.extras)

    def __await__(self) -> Generator[Any, None, dict[str, Any] | None]:
        return _finish_produce(self.body, self.acks, self.started, self.extras).__await__()

    def notify_each_done(self, callback: Callable[[], None]) -> int:
        """Have `callback` called by the task that finishes each append still pending (it
        must not raise): how many calls to expect, all of them made once `result_now` is
        ready; -1 when some append cannot say (some calls may still come: the caller
        ignores them and awaits this outcome instead)."""
        count = 0
        for value in self.started.values():
            if isinstance(value, AppendResult) or value.result_now() is not None:
                continue
            if not value.notify_when_done(callback):
                return -1
            count += 1
        return count


async def _finish_produce(
    body: Any,
    acks: int,
    started: dict[tuple[str, int], AppendResult | PendingAppend],
    extras: dict[tuple[str, int], Rewritten],
) -> dict[str, Any] | None:
    # Every partition was queued before this first await: they share one group commit, so
    # once the first is durable most others are too. Those are read without awaiting: an
    # await on a set event is still a pass through the scheduler, one per partition.
    results: dict[tuple[str, int], AppendResult] = {}
    for key, value in started.items():
        if isinstance(value, AppendResult):
            results[key] = value
            continue
        result = value.result_now()
        results[key] = result if result is not None else await value.wait()
    return _produce_response(body, acks, results, extras)


def _produce_response(
    body: Any,
    acks: int,
    results: dict[tuple[str, int], AppendResult],
    extras: dict[tuple[str, int], Rewritten],
) -> dict[str, Any] | None:
    if acks == 0:
        return None
    return {
        "responses": [
            {
                "name": topic.name,
                "partition_responses": [
                    _with_extras(
                        _partition_response(part.index, results[(topic.name, part.index)]),
                        extras.get((topic.name, part.index)),
                    )
                    for part in topic.partition_data
                ],
            }
            for topic in body.topic_data
        ]
    }


def _partition_response(index: int, result: AppendResult) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": result.error,
        "base_offset": result.base_offset,
        "log_append_time": -1,
        "log_start_offset": result.log_start_offset,
        "error_message": result.message,
    }


def _with_extras(response: dict[str, Any], rewritten: Rewritten | None) -> dict[str, Any]:
    """Add what the topic's produce rules decided: KIP-467 record errors (v8+), the
    LogAppendTime stamp."""
    if rewritten is not None:
        response["record_errors"] = [
            {"batch_index": index, "batch_index_error_message": why}
            for index, why in rewritten.record_errors
        ]
        if response["error_code"] == ErrorCode.NONE:
            response["log_append_time"] = rewritten.log_append_time
    return response


class Answered:
    """A response known when the handler returned (a Fetch whose batches were at hand): the
    server sends it without a task of its own. Awaitable too, for wrappers of the handler."""

    __slots__ = ("response",)

    def __init__(self, response: list[bytes | memoryview]) -> None:
        self.response = response

    def __await__(self) -> Generator[Any, None, list[bytes | memoryview]]:
        return _at_once(self.response).__await__()


async def _at_once(response: list[bytes | memoryview]) -> list[bytes | memoryview]:
    return response


_Read = tuple[list[tuple[str | uuid.UUID, list[PartitionData]]], int, bool]
_Watch = tuple[trio.Event, list[PartitionView]]


def fetch(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> Answered | Awaitable[list[bytes | memoryview]]:
    """Read whole batches; long-poll until min_bytes arrive or max_wait passes. The answer
    is the encoded response in pieces, the batches among them as read (no join).

    The first read is tried now, synchronously: when it is enough (or the wait is zero) and
    its batches are all in memory, the answer is returned `Answered`, with no task or
    thread hop. When it is not enough, the waiters go on the partitions in the same step,
    so data that arrives before the returned coroutine starts still wakes it. A long poll
    whose partitions are all at their ends (a consumer at the tail) skips that first read.
    """
    max_wait_s = body.max_wait.total_seconds()
    max_bytes = getattr(body, "max_bytes", 0x7FFFFFFF)
    read_committed = getattr(body, "isolation_level", 0) == _READ_COMMITTED
    deadline = trio.current_time() + max(0.0, max_wait_s)
    at_end = _at_end(ctx, body, read_committed) if max_wait_s > 0 and body.min_bytes > 0 else None
    if at_end is not None:
        # A consumer at the tail (the usual long poll): a first read would find nothing,
        # so the waiters go on at once and the only read is the one after the wake-up.
        at_tail = _watch_on(at_end)
        return _LongPoll(
            _fetch(ctx, header, body, max_bytes, read_committed, deadline, at_tail), at_tail
        )
    first = _read_fetch_now(ctx, body, max_bytes, read_committed)
    watching: _Watch | None = None
    if first is not None:
        topics, total, has_error = first
        if total >= body.min_bytes or has_error or trio.current_time() >= deadline:
            version = header.api_version
            return Answered(encode_fetch_response(header.correlation_id, version, topics))
        watching = _watch(ctx, body)
        return _LongPoll(
            _fetch(ctx, header, body, max_bytes, read_committed, deadline, watching), watching
        )
    return _fetch(ctx, header, body, max_bytes, read_committed, deadline, watching)


class _LongPoll:
    """The waiting part of a Fetch whose waiters are on its partitions already. Awaited
    once; or closed, never awaited (its connection went away first), which takes the
    waiters off again."""

    __slots__ = ("_coroutine", "_watching")

    def __init__(
        self, coroutine: Coroutine[Any, Any, list[bytes | memoryview]], watching: _Watch
    ) -> None:
        self._coroutine = coroutine
        self._watching = watching

    def __await__(self) -> Generator[Any, None, list[bytes | memoryview]]:
        return self._coroutine.__await__()

    def close(self) -> None:
        self._coroutine.close()
        event, watched = self._watching
        for partition in watched:
            partition.remove_waiter(event)


async def _fetch(
    ctx: GatewayContext,
    header: RequestHeader,
    body: Any,
    max_bytes: int,
    read_committed: bool,
    deadline: float,
    watching: _Watch | None,
) -> list[bytes | memoryview]:
    """The rest of `fetch`; `watching`: a first read found too little, its waiters set."""
    # After a wake the new batches are most likely in memory: read them without awaits.
    # (Not before the first wait: where there is none, `fetch` found that they are not.)
    read_now = watching is not None
    while True:
        if watching is None:
            topics, total, has_error = await _read_preferring_memory(
                ctx, body, max_bytes, read_committed, read_now
            )
            if total >= body.min_bytes or has_error or trio.current_time() >= deadline:
                break
            watching = _watch(ctx, body)
        woken = await _wait_for_data(watching, deadline)
        watching = None
        read_now = True
        if not woken:
            topics, total, has_error = await _read_preferring_memory(
                ctx, body, max_bytes, read_committed, True
            )
            break
    return encode_fetch_response(header.correlation_id, header.api_version, topics)


async def _read_preferring_memory(
    ctx: GatewayContext, body: Any, max_bytes: int, read_committed: bool, try_now: bool
) -> _Read:
    """`_read_fetch`, without an await where `try_now` and every batch is at hand."""
    read = _read_fetch_now(ctx, body, max_bytes, read_committed) if try_now else None
    return read if read is not None else await _read_fetch(ctx, body, max_bytes, read_committed)


def _read_fetch_now(
    ctx: GatewayContext, body: Any, max_bytes: int, read_committed: bool
) -> _Read | None:
    """`_read_fetch` when it needs no wait: None if a batch is in tier 2 or only in a file."""
    planned: list[tuple[PartitionData, PendingRead]] = []
    read = _plan_fetch(ctx, body, max_bytes, read_committed, planned)
    if read is None:
        return None
    topics, total, has_error = read
    if planned:
        results = ctx.store.finish_reads_now([pending for _, pending in planned])
        if results is None:
            return None
        for (data, _), result in zip(planned, results, strict=True):
            _fill(data, result, read_committed)
            has_error = has_error or result.error != ErrorCode.NONE
    return topics, total, has_error


def _plan_fetch(
    ctx: GatewayContext,
    body: Any,
    max_bytes: int,
    read_committed: bool,
    planned: list[tuple[PartitionData, PendingRead]],
) -> _Read | None:
    """Every partition's answer where it is known without reading, the tier-1 reads put in
    `planned` (their sizes counted in the total); None if one needs a tier-2 read."""
    topics = []
    total = 0
    has_error = False
    for topic in body.topics:
        key, stream = _fetch_topic(ctx, topic)
        unknown = (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if isinstance(key, str)
            else (ErrorCode.UNKNOWN_TOPIC_ID)
        )
        partitions = []
        if stream is not None and not allowed(ctx, Operation.READ, ResourceType.TOPIC, stream.name):
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics.append((key, [PartitionData(p.partition, denied) for p in topic.partitions]))
            has_error = True
            continue
        for part in topic.partitions:
            if stream is None:
                partitions.append(PartitionData(part.partition, unknown))
                has_error = True
                continue
            if not CLUSTER.is_local(stream.name, part.partition):  # another node leads it
                partitions.append(PartitionData(part.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER))
                has_error = True
                continue
            budget = max(min(part.partition_max_bytes, max_bytes - total), 0)
            args = (part.partition, part.fetch_offset, budget, total == 0, read_committed)
            started = stream.plan_read(*args)
            if started is None:
                return None
            data = PartitionData(part.partition)
            partitions.append(data)
            if not isinstance(started, ReadResult):
                planned.append((data, started))
                total += started.size
                continue
            _fill(data, started, read_committed)
            has_error = has_error or started.error != ErrorCode.NONE
            total += data.records_size
        topics.append((key, partitions))
    return topics, total, has_error


async def _read_fetch(
    ctx: GatewayContext, body: Any, max_bytes: int, read_committed: bool = False
) -> tuple[list[tuple[str | uuid.UUID, list[PartitionData]]], int, bool]:
    """Every partition's batches. Tier-1 reads are planned in request order (their sizes
    are known without reading, so max_bytes is shared out as before) and read together
    at the end in one thread hop; tier-2 reads are awaited in place."""
    topics = []
    total = 0
    has_error = False
    planned: list[tuple[PartitionData, PendingRead]] = []
    for topic in body.topics:
        key, stream = _fetch_topic(ctx, topic)
        unknown = (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if isinstance(key, str)
            else (ErrorCode.UNKNOWN_TOPIC_ID)
        )
        partitions = []
        if stream is not None and not allowed(ctx, Operation.READ, ResourceType.TOPIC, stream.name):
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics.append((key, [PartitionData(p.partition, denied) for p in topic.partitions]))
            has_error = True
            continue
        for part in topic.partitions:
            if stream is None:
                partitions.append(PartitionData(part.partition, unknown))
                has_error = True
                continue
            if not CLUSTER.is_local(stream.name, part.partition):  # another node leads it
                partitions.append(PartitionData(part.partition, ErrorCode.NOT_LEADER_OR_FOLLOWER))
                has_error = True
                continue
            budget = max(min(part.partition_max_bytes, max_bytes - total), 0)
            args = (part.partition, part.fetch_offset, budget, total == 0, read_committed)
            started = stream.plan_read(*args)
            data = PartitionData(part.partition)
            partitions.append(data)
            if started is not None and not isinstance(started, ReadResult):
                planned.append((data, started))
                total += started.size
                continue
            result = started if started is not None else await stream.read(*args)
            _fill(data, result, read_committed)
            has_error = has_error or result.error != ErrorCode.NONE
            total += data.records_size
        topics.append((key, partitions))
    if planned:
        results = await ctx.store.finish_reads([pending for _, pending in planned])
        for (data, _), result in zip(planned, results, strict=True):
            _fill(data, result, read_committed)
            has_error = has_error or result.error != ErrorCode.NONE
    return topics, total, has_error


def _fill(data: PartitionData, result: ReadResult, read_committed: bool) -> None:
    data.error_code = result.error
    data.high_watermark = result.high_watermark
    data.log_start_offset = result.log_start_offset
    data.batches = result.batches or []
    data.last_stable_offset = result.last_stable_offset
    data.aborted = result.aborted if read_committed else None


def _fetch_topic(ctx: GatewayContext, topic: Any) -> tuple[str | uuid.UUID, Topic | None]:
    """A fetched topic's key (its name, or its id from v13 on) and its stream."""
    if hasattr(topic, "topic_id"):  # kio reads the zero id as None
        topic_id = topic.topic_id or uuid.UUID(int=0)
        return topic_id, ctx.store.topic_by_id(topic_id)
    return topic.topic, ctx.store.get(topic.topic)


def _at_end(ctx: GatewayContext, body: Any, read_committed: bool) -> list[PartitionView] | None:
    """The fetched partitions when every one is known, led here and at the end of what it
    may read, so that a read now would answer nothing new and no error; else None (and
    whenever in doubt: with an authorizer too, whose checks stay with the read)."""
    if ctx.authorizer is not None:
        return None
    found = []
    for topic in body.topics:
        _, stream = _fetch_topic(ctx, topic)
        if stream is None:
            return None
        name = stream.name
        for part in topic.partitions:
            index = part.partition
            if not stream.has_partition(index) or not CLUSTER.is_local(name, index):
                return None
            partition = stream.partition(index)
            end = partition.last_stable_offset if read_committed else partition.high_watermark
            if part.fetch_offset != end or end < partition.log_start_offset:
                return None
            found.append(partition)
    return found


def _watch(ctx: GatewayContext, body: Any) -> _Watch:
    """An event set when any fetched partition gets new data, its waiters in place."""
    partitions = []
    for topic in body.topics:
        _, stream = _fetch_topic(ctx, topic)
        if stream is None:
            continue
        for part in topic.partitions:
            if stream.has_partition(part.partition):
                partitions.append(stream.partition(part.partition))
    return _watch_on(partitions)


def _watch_on(partitions: list[PartitionView]) -> _Watch:
    """An event set when any of `partitions` gets new data, its waiters in place."""
    event = trio.Event()
    for partition in partitions:
        partition.add_waiter(event)
    return event, partitions


async def _wait_for_data(watching: _Watch, deadline: float) -> bool:
    """Wait until the watched partitions get new data; False if the deadline passed."""
    event, watched = watching
    try:
        with trio.move_on_at(deadline):
            await event.wait()
            return True
        return False
    finally:
        for partition in watched:
            partition.remove_waiter(event)


async def list_offsets(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    topics = []
    for topic in body.topics:
        stream = ctx.store.get(topic.name)
        partitions = []
        for part in topic.partitions:
            result: dict[str, Any] = {
                "partition_index": part.partition_index,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": 0,
            }
            if stream is None or not stream.has_partition(part.partition_index):
                result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not CLUSTER.is_local(stream.name, part.partition_index):
                result["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                partition = stream.partition(part.partition_index)
                if part.timestamp == _EARLIEST:
                    result["offset"] = partition.log_start_offset
                elif part.timestamp == _LATEST:
                    committed = getattr(body, "isolation_level", 0) == _READ_COMMITTED
                    result["offset"] = (
                        partition.last_stable_offset if committed else partition.high_watermark
                    )
                elif part.timestamp == _EARLIEST_LOCAL:
                    local = max(partition.local_start_offset, partition.log_start_offset)
                    result["offset"] = min(local, partition.high_watermark)
                elif part.timestamp == _LATEST_TIERED:
                    tiered = partition.local_start_offset - 1
                    result["offset"] = tiered if tiered >= partition.log_start_offset else -1
                else:
                    try:
                        offset, timestamp = await stream.offset_for_timestamp(
                            part.partition_index, part.timestamp
                        )
                    except StoreError as exc:
                        what = f"topic {topic.name}: timestamp lookup"
                        result["error_code"] = log_store_error(what, exc)
                    else:
                        result["offset"], result["timestamp"] = offset, timestamp
            partitions.append(result)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}
