"""Transactions: AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
DescribeTransactions, ListTransactions, and InitProducerId with a transactional id.

Handlers translate request bodies to the coordinator (`core.api.Transactions`, implemented
by `core.txn`), which owns the state machine; store failures become Kafka codes here
through `gateway.errors`.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from core.api import StoreError, Transactions
from core.errors import ErrorCode
from core.metadata import CommittedOffset
from core.txn import STATES
from gateway.errors import log_store_error
from kafkawire.codec import RequestHeader

from .context import GatewayContext

log = logging.getLogger(__name__)


def _coordinator(ctx: GatewayContext) -> Transactions | None:
    return ctx.transactions


def no_transaction_state(transactional_id: str, code: int) -> dict[str, Any]:
    """A DescribeTransactions item that describes nothing, with `code`."""
    return {
        "error_code": code,
        "transactional_id": transactional_id,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": 0,
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }


async def init_transactional_producer(ctx: GatewayContext, body: Any) -> dict[str, Any]:
    txns = _coordinator(ctx)
    if txns is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
    try:
        error, producer_id, epoch = await txns.init_producer_id(
            body.transactional_id,
            timeout_ms,
            getattr(body, "producer_id", -1),
            getattr(body, "producer_epoch", -1),
        )
    except StoreError as exc:
        error = log_store_error(f"InitProducerId {body.transactional_id}", exc)
        producer_id = epoch = -1
    return {"error_code": error, "producer_id": producer_id, "producer_epoch": epoch}


async def add_partitions_to_txn(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    if header.api_version >= 4:
        return await _add_partitions_batched(ctx, body, abortable=header.api_version >= 5)
    wanted = [
        (topic.name, index) for topic in body.v3_and_below_topics for index in topic.partitions
    ]
    txns = _coordinator(ctx)
    results: dict[tuple[str, int], int]
    if txns is None:
        results = {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in wanted}
    else:
        try:
            results = await txns.add_partitions(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                wanted,
            )
        except StoreError as exc:
            error = log_store_error("AddPartitionsToTxn", exc)
            results = {tp: error for tp in wanted}
    return {
        "results_by_topic_v3_and_below": [
            {
                "name": topic.name,
                "results_by_partition": [
                    {"partition_index": i, "partition_error_code": results[(topic.name, i)]}
                    for i in topic.partitions
                ],
            }
            for topic in body.v3_and_below_topics
        ]
    }


async def _add_partitions_batched(
    ctx: GatewayContext, body: Any, abortable: bool
) -> dict[str, Any]:
    """AddPartitionsToTxn v4+ (KIP-890): several transactions in one request, each either
    added to (as v3) or, with verify_only, only checked (a partition leader asking whether a
    transactional write belongs to the open transaction). v5 clients know
    TRANSACTION_ABORTABLE; v4 ones get INVALID_TXN_STATE instead."""
    txns = _coordinator(ctx)
    results = []
    for item in body.transactions:
        wanted = [(topic.name, index) for topic in item.topics for index in topic.partitions]
        codes: dict[tuple[str, int], int]
        if txns is None:
            codes = dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        elif item.verify_only:
            codes = txns.verify_partitions(
                item.transactional_id, item.producer_id, item.producer_epoch, wanted, abortable
            )
        else:
            try:
                codes = await txns.add_partitions(
                    item.transactional_id, item.producer_id, item.producer_epoch, wanted
                )
            except StoreError as exc:
                codes = dict.fromkeys(wanted, log_store_error("AddPartitionsToTxn", exc))
        results.append(
            {
                "transactional_id": item.transactional_id,
                "topic_results": [
                    {
                        "name": topic.name,
                        "results_by_partition": [
                            {"partition_index": i, "partition_error_code": codes[(topic.name, i)]}
                            for i in topic.partitions
                        ],
                    }
                    for topic in item.topics
                ],
            }
        )
    return {"error_code": ErrorCode.NONE, "results_by_transaction": results}


async def add_offsets_to_txn(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    txns = _coordinator(ctx)
    if txns is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    if not body.group_id:
        return {"error_code": ErrorCode.INVALID_GROUP_ID}
    try:
        error = await txns.add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id
        )
    except StoreError as exc:
        error = log_store_error("AddOffsetsToTxn", exc)
    return {"error_code": error}


async def txn_offset_commit(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    txns = _coordinator(ctx)
    errors: dict[tuple[str, int], int] = {}
    offsets: list[CommittedOffset] = []
    for topic in body.topics:
        stream = ctx.store.get(topic.name)
        for part in topic.partitions:
            key = (topic.name, part.partition_index)
            if stream is None or not stream.has_partition(part.partition_index):
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets.append(
                    CommittedOffset(
                        body.group_id,
                        topic.name,
                        part.partition_index,
                        part.committed_offset,
                        getattr(part, "committed_leader_epoch", -1),
                        part.committed_metadata or "",
                    )
                )
    if offsets:
        error: int
        if txns is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            try:
                error = await txns.txn_offset_commit(
                    body.transactional_id,
                    body.producer_id,
                    body.producer_epoch,
                    offsets,
                    implicit=header.api_version >= 5,  # transactions v2: no AddOffsetsToTxn
                )
            except StoreError as exc:
                error = log_store_error("TxnOffsetCommit", exc)
        for offset in offsets:
            errors[(offset.topic, offset.partition)] = error
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": errors[(topic.name, p.partition_index)],
                    }
                    for p in topic.partitions
                ],
            }
            for topic in body.topics
        ]
    }


async def end_txn(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    txns = _coordinator(ctx)
    if txns is None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    if header.api_version >= 5:  # transactions v2: the epoch is bumped, answered back
        try:
            error, producer_id, epoch = await txns.end_txn_v2(
                body.transactional_id, body.producer_id, body.producer_epoch, body.committed
            )
        except StoreError as exc:
            error, producer_id, epoch = log_store_error("EndTxn", exc), -1, -1
        return {"error_code": error, "producer_id": producer_id, "producer_epoch": epoch}
    try:
        error = await txns.end_txn(
            body.transactional_id, body.producer_id, body.producer_epoch, body.committed
        )
    except StoreError as exc:
        error = log_store_error("EndTxn", exc)
    return {"error_code": error}


async def describe_transactions(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    txns = _coordinator(ctx)
    states = []
    for transactional_id in body.transactional_ids:
        if txns is not None and not txns.coordinates(transactional_id):
            states.append(no_transaction_state(transactional_id, ErrorCode.NOT_COORDINATOR))
            continue
        txn = txns.describe(transactional_id) if txns is not None else None
        if txn is None:
            states.append(
                no_transaction_state(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in txn.partitions:
            by_topic.setdefault(topic, []).append(index)
        states.append(
            {
                "error_code": ErrorCode.NONE,
                "transactional_id": transactional_id,
                "transaction_state": txn.state,
                "transaction_timeout": txn.timeout_ms,
                # Kafka's -1 (never started) does not fit kio's timestamp type: 0 instead.
                "transaction_start_time": max(txn.start_ms, 0),
                "producer_id": txn.producer_id,
                "producer_epoch": txn.epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return {"transaction_states": states}


async def list_transactions(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    """v1: only transactions open longer than `duration_filter` ms (when >= 0); v2: only
    ids that match `transactional_id_pattern` whole (a Java regular expression; the common
    subset Python's `re` shares with it)."""
    txns = _coordinator(ctx)
    wanted_states = set(body.state_filters)
    wanted_ids = set(body.producer_id_filters)
    min_duration = getattr(body, "duration_filter", -1)
    pattern: re.Pattern[str] | None = None
    if getattr(body, "transactional_id_pattern", None):
        try:
            pattern = re.compile(body.transactional_id_pattern)
        except re.error:
            return {
                "error_code": ErrorCode.INVALID_REGULAR_EXPRESSION,
                "unknown_state_filters": [],
                "transaction_states": [],
            }
    now = int(time.time() * 1000)
    listed = []
    for txn in txns.list_transactions() if txns is not None else []:
        if wanted_states and txn.state not in wanted_states:
            continue
        if wanted_ids and txn.producer_id not in wanted_ids:
            continue
        if min_duration >= 0 and (txn.start_ms < 0 or now - txn.start_ms <= min_duration):
            continue
        if pattern is not None and not pattern.fullmatch(txn.transactional_id):
            continue
        listed.append(
            {
                "transactional_id": txn.transactional_id,
                "producer_id": txn.producer_id,
                "transaction_state": txn.state,
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "unknown_state_filters": sorted(wanted_states - set(STATES)),
        "transaction_states": listed,
    }
