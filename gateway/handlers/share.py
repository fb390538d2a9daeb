"""ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and ShareAcknowledge: share groups
(Kafka's queues), over `core.sharegroups`.

Handlers translate between request bodies and the share coordinator; a ShareFetch applies
the acknowledgements it carries first, then acquires records, long-polling up to max_wait
when none are available. Every answer goes out after the state it reports is durable.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio

from core.acl.model import Operation, ResourceType
from core.cluster.view import CLUSTER
from core.sharegroups import AckBatch, ShareCoordinator, ShareError
from core.sharegroups.coordinator import FetchedPartition, PartitionKey
from kafkawire.codec import RequestHeader

from .authz import allowed
from .context import CLIENT_HOST, GatewayContext

_OPERATIONS_NOT_REQUESTED = -(2**31)
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE
_FINAL_EPOCH = -1


def _shares(ctx: GatewayContext) -> ShareCoordinator | None:
    return ctx.shares


def _leader(ctx: GatewayContext) -> dict[str, int]:
    return {"leader_id": ctx.node_id, "leader_epoch": 0}


async def share_group_heartbeat(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    shares = _shares(ctx)
    if shares is None:
        return {"error_code": ShareError.NOT_COORDINATOR, "member_epoch": -1}
    if ctx.groups.group(body.group_id) is not None:  # a classic group owns the id
        return {
            "error_code": ShareError.INCONSISTENT_GROUP_PROTOCOL,
            "error_message": f"group {body.group_id} is not a share group",
            "member_epoch": -1,
        }
    host = CLIENT_HOST.get()
    result = await shares.heartbeat(
        body.group_id,
        body.member_id,
        body.member_epoch,
        body.subscribed_topic_names,
        body.rack_id,
        header.client_id or "",
        f"/{host}" if host else "",
    )
    response: dict[str, Any] = {
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": shares.heartbeat_interval_ms(body.group_id),
    }
    if result.assignment is not None:
        response["assignment"] = {
            "topic_partitions": [
                {"topic_id": _topic_id(ctx, topic), "partitions": partitions}
                for topic, partitions in result.assignment.items()
                if _topic_id(ctx, topic) is not None
            ]
        }
    return response


def _topic_id(ctx: GatewayContext, topic: str) -> uuid.UUID | None:
    stream = ctx.store.get(topic)
    return stream.topic_id if stream is not None else None


async def share_group_describe(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    shares = _shares(ctx)
    operations = (
        _GROUP_OPERATIONS if body.include_authorized_operations else _OPERATIONS_NOT_REQUESTED
    )
    groups = []
    for group_id in body.group_ids:
        group = shares.group(group_id) if shares is not None else None
        if group is None:
            groups.append(
                {
                    "error_code": ShareError.GROUP_ID_NOT_FOUND,
                    "error_message": f"group {group_id} is not a share group",
                    "group_id": group_id,
                    "group_state": "Dead",
                    "authorized_operations": operations,
                }
            )
            continue
        members = []
        for member in group.members.values():
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(member.assignment):
                by_topic.setdefault(topic, []).append(index)
            members.append(
                {
                    "member_id": member.member_id,
                    "rack_id": member.rack_id,
                    "member_epoch": member.epoch,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "subscribed_topic_names": list(member.subscribed),
                    "assignment": {
                        "topic_partitions": [
                            {
                                "topic_id": _topic_id(ctx, topic) or uuid.UUID(int=0),
                                "topic_name": topic,
                                "partitions": parts,
                            }
                            for topic, parts in by_topic.items()
                        ]
                    },
                }
            )
        groups.append(
            {
                "error_code": ShareError.NONE,
                "group_id": group_id,
                "group_state": group.state,
                "group_epoch": group.epoch,
                "assignment_epoch": group.epoch,
                "assignor_name": "simple",
                "members": members,
                "authorized_operations": operations,
            }
        )
    return {"groups": groups}


def _ack_batches(partition: Any) -> list[AckBatch]:
    return [
        AckBatch(b.first_offset, b.last_offset, list(b.acknowledge_types))
        for b in partition.acknowledgement_batches
    ]


def _apply_acks(
    ctx: GatewayContext,
    shares: ShareCoordinator,
    group_id: str,
    member_id: str,
    topics: Any,
    changed: list[PartitionKey],
) -> dict[tuple[uuid.UUID, int], ShareError]:
    """Apply every partition's acknowledgements; each partition's outcome."""
    outcome: dict[tuple[uuid.UUID, int], ShareError] = {}
    for topic in topics:
        topic_id = topic.topic_id or uuid.UUID(int=0)
        stream = ctx.store.topic_by_id(topic_id)
        for part in topic.partitions:
            batches = _ack_batches(part)
            if not batches:
                continue
            if stream is None:
                outcome[(topic_id, part.partition_index)] = ShareError.UNKNOWN_TOPIC_ID
                continue
            outcome[(topic_id, part.partition_index)] = shares.acknowledge(
                group_id, member_id, stream.name, part.partition_index, batches, changed
            )
    return outcome


async def share_fetch(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    shares = _shares(ctx)
    group_id, member_id = body.group_id or "", body.member_id or ""
    if shares is None or not group_id or not member_id:
        return {"error_code": ShareError.INVALID_REQUEST, "error_message": "no group or member"}
    lock_ms = shares.settings.record_lock_ms
    changed: list[PartitionKey] = []
    acks = _apply_acks(ctx, shares, group_id, member_id, body.topics, changed)
    epoch = body.share_session_epoch
    if epoch == _FINAL_EPOCH:
        await shares.persist(changed)
        await shares.close_session(group_id, member_id)
        return _fetch_response(ctx, lock_ms, {}, acks)
    added = [
        (t.topic_id or uuid.UUID(int=0), p.partition_index)
        for t in body.topics
        for p in t.partitions
    ]
    forgotten = [
        (t.topic_id or uuid.UUID(int=0), index)
        for t in body.forgotten_topics_data
        for index in t.partitions
    ]
    error, session = shares.open_session(
        group_id, member_id, epoch, _named(ctx, added), _named(ctx, forgotten)
    )
    if session is None:
        await shares.persist(changed)
        return {
            "error_code": error,
            "error_message": "no share session: open one with epoch 0",
            "acquisition_lock_timeout": lock_ms,
        }
    fetched: dict[tuple[uuid.UUID, int], FetchedPartition] = {}
    for topic_id, index in added:  # unknown topics are answered as such
        if ctx.store.topic_by_id(topic_id) is None:
            fetched[(topic_id, index)] = FetchedPartition(ShareError.UNKNOWN_TOPIC_ID)
    deadline = trio.current_time() + max(0.0, body.max_wait.total_seconds())
    max_records = body.max_records if body.max_records > 0 else 500
    max_bytes = body.max_bytes if body.max_bytes > 0 else 2**31 - 1
    # Start at a different partition each request, so one busy partition does not take
    # every request's max_records from the others.
    order = sorted(session.partitions)
    if order:
        turn = max(epoch, 0) % len(order)
        order = order[turn:] + order[:turn]
    while True:
        watched = []
        got = False
        for topic_name, index in order:
            stream = ctx.store.get(topic_name)
            if stream is None or not stream.has_partition(index):
                continue
            key = (stream.topic_id, index)
            if not allowed(ctx, Operation.READ, ResourceType.TOPIC, stream.name):
                fetched[key] = FetchedPartition(ShareError.TOPIC_AUTHORIZATION_FAILED)
                continue
            if not CLUSTER.is_local(stream.name, index):
                continue
            data = await shares.acquire(group_id, member_id, stream, index, max_records, max_bytes)
            if data.acquired or data.error:
                fetched[key] = data
                changed.append((group_id, stream.name, index))
                got = True
                max_records -= sum(r.last - r.first + 1 for r in data.acquired)
                if max_records <= 0:
                    break
            watched.append(stream.partition(index))
        if got or trio.current_time() >= deadline or not watched:
            break
        await shares.wait_for_records(watched, deadline)
    await shares.persist(changed)
    return _fetch_response(ctx, lock_ms, fetched, acks)


def _named(ctx: GatewayContext, partitions: list[tuple[uuid.UUID, int]]) -> list[tuple[str, int]]:
    out = []
    for topic_id, index in partitions:
        stream = ctx.store.topic_by_id(topic_id)
        if stream is not None:
            out.append((stream.name, index))
    return out


def _fetch_response(
    ctx: GatewayContext,
    lock_ms: int,
    fetched: dict[tuple[uuid.UUID, int], FetchedPartition],
    acks: dict[tuple[uuid.UUID, int], ShareError],
) -> dict[str, Any]:
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for key in sorted(set(fetched) | set(acks)):
        data = fetched.get(key, FetchedPartition())
        by_topic.setdefault(key[0], []).append(
            {
                "partition_index": key[1],
                "error_code": data.error,
                "error_message": data.message,
                "acknowledge_error_code": acks.get(key, ShareError.NONE),
                "current_leader": _leader(ctx),
                "records": b"".join(data.batches),
                "acquired_records": [
                    {
                        "first_offset": r.first,
                        "last_offset": r.last,
                        "delivery_count": r.delivery_count,
                    }
                    for r in data.acquired
                ],
            }
        )
    return {
        "error_code": ShareError.NONE,
        "acquisition_lock_timeout": lock_ms,
        "responses": [
            {"topic_id": topic_id, "partitions": parts} for topic_id, parts in by_topic.items()
        ],
    }


async def share_acknowledge(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    shares = _shares(ctx)
    group_id, member_id = body.group_id or "", body.member_id or ""
    if shares is None or not group_id or not member_id:
        return {"error_code": ShareError.INVALID_REQUEST, "error_message": "no group or member"}
    if body.share_session_epoch not in (0, _FINAL_EPOCH) and not shares.has_session(
        group_id, member_id
    ):
        return {"error_code": ShareError.SHARE_SESSION_NOT_FOUND}
    changed: list[PartitionKey] = []
    acks = _apply_acks(ctx, shares, group_id, member_id, body.topics, changed)
    await shares.persist(changed)
    if body.share_session_epoch == _FINAL_EPOCH:
        await shares.close_session(group_id, member_id)
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (topic_id, index), error in sorted(acks.items()):
        by_topic.setdefault(topic_id, []).append(
            {"partition_index": index, "error_code": error, "current_leader": _leader(ctx)}
        )
    return {
        "error_code": ShareError.NONE,
        "responses": [{"topic_id": t, "partitions": p} for t, p in by_topic.items()],
    }
