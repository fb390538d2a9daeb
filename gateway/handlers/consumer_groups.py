"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: the next-generation consumer group
protocol (`group.protocol=consumer`), over `core.groups.consumer_coordinator`.

Handlers translate topic ids, timeouts and nullable "unchanged" fields between the wire and
the coordinator, which decides everything synchronously.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from core.acl.model import Operation, ResourceType
from core.errors import ErrorCode
from core.groups.assignors import TopicPartitions
from core.groups.consumer_coordinator import HeartbeatRequest
from kafkawire.codec import RequestHeader

from .authz import allowed
from .context import CLIENT_HOST, PRINCIPAL, GatewayContext

# AclOperation bits of a group (READ 3, DELETE 6, DESCRIBE 8), as Kafka reports them
# when there is no authorizer.
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_OPERATIONS_NOT_REQUESTED = -(2**31)


async def consumer_group_heartbeat(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    timeout = body.rebalance_timeout.total_seconds()
    host = CLIENT_HOST.get()
    # As Kafka: a member may subscribe to (and its regex resolve to) topics it may DESCRIBE only.
    if body.subscribed_topic_names and not all(
        allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name)
        for name in body.subscribed_topic_names
    ):
        return {
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "error_message": "Topic authorization failed.",
            "member_id": body.member_id,
            "member_epoch": body.member_epoch,
        }
    owned = None
    if body.topic_partitions is not None:
        owned = {
            t.topic_id: frozenset(t.partitions)
            for t in body.topic_partitions
            if t.topic_id is not None and t.partitions
        }
    result = ctx.groups.consumer.heartbeat(
        HeartbeatRequest(
            group_id=body.group_id,
            member_id=body.member_id,
            member_epoch=body.member_epoch,
            instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout=timeout if timeout >= 0 else None,
            subscribed_names=(
                tuple(body.subscribed_topic_names)
                if body.subscribed_topic_names is not None
                else None
            ),
            subscribed_regex=getattr(body, "subscribed_topic_regex", None),  # v1+
            server_assignor=body.server_assignor,
            owned=owned,
            client_id=header.client_id or "",
            client_host=f"/{host}" if host else "",
            can_describe=_describe_check(ctx),
        ),
        ctx.store,
    )
    response: dict[str, Any] = {
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
    }
    if result.assignment is not None:
        response["assignment"] = {"topic_partitions": _wire_partitions(result.assignment)}
    return response


async def consumer_group_describe(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    operations = (
        _GROUP_OPERATIONS if body.include_authorized_operations else _OPERATIONS_NOT_REQUESTED
    )
    return {"groups": [_describe(ctx, group_id, operations) for group_id in body.group_ids]}


def _describe(ctx: GatewayContext, group_id: str, operations: int) -> dict[str, Any]:
    coordinator = ctx.groups.consumer
    group = coordinator.groups.get(group_id)
    if group is None:
        error = ErrorCode.GROUP_ID_NOT_FOUND
        message = (
            f"Group {group_id} is not a consumer group."
            if ctx.groups.group(group_id) is not None
            else f"Group {group_id} not found."
        )
        return {
            "error_code": error,
            "error_message": message,
            "group_id": group_id,
            "group_state": "Dead",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": "",
            "authorized_operations": operations,
        }
    _members, _counts, names = coordinator.subscriptions(group, ctx.store)
    if ctx.authorizer is not None and not all(
        allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name)
        for name in _topics_of(ctx, group, names)
    ):
        return {
            "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "error_message": "The group has described topic(s) that the client is not "
            "authorized to describe.",
            "group_id": group_id,
            "group_state": "",
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": "",
            "authorized_operations": operations,
        }
    return {
        "error_code": ErrorCode.NONE,
        "group_id": group_id,
        "group_state": group.state().value,
        "group_epoch": group.epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": coordinator.assignor_of(group),
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_names),
                "subscribed_topic_regex": m.subscribed_regex,
                "assignment": {"topic_partitions": _described(ctx, m.assigned, names)},
                "target_assignment": {
                    "topic_partitions": _described(ctx, group.target.get(m.member_id, {}), names)
                },
                "member_type": 1,  # consumer protocol (0 would be classic)
            }
            for m in group.members.values()
        ],
        "authorized_operations": operations,
    }


def _describe_check(ctx: GatewayContext) -> Callable[[str], bool] | None:
    """The requesting principal's DESCRIBE on a topic, asked again at each resolution (so a
    revoked ACL takes the topic out of the member's regex at its next heartbeat)."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return None
    principal, host = PRINCIPAL.get(), CLIENT_HOST.get()
    return lambda name: authorizer.authorize(
        principal, host, Operation.DESCRIBE, ResourceType.TOPIC, name
    )


def _topics_of(ctx: GatewayContext, group: Any, names: dict[uuid.UUID, str]) -> set[str]:
    """Every topic a description of the group would name: subscriptions and assignments."""
    out = set(names.values())
    for member in group.members.values():
        out.update(member.subscribed_names)
        for parts in (member.assigned, group.target.get(member.member_id, {})):
            for topic_id in parts:
                name = names.get(topic_id)
                if name is None:
                    topic = ctx.store.topic_by_id(topic_id)
                    name = topic.name if topic is not None else None
                if name is not None:
                    out.add(name)
    return out


def _wire_partitions(parts: TopicPartitions) -> list[dict[str, Any]]:
    return [
        {"topic_id": topic_id, "partitions": sorted(ps)}
        for topic_id, ps in sorted(parts.items(), key=lambda item: str(item[0]))
    ]


def _described(
    ctx: GatewayContext, parts: TopicPartitions, names: dict[uuid.UUID, str]
) -> list[dict[str, Any]]:
    out = []
    for topic_id, ps in sorted(parts.items(), key=lambda item: str(item[0])):
        name = names.get(topic_id)
        if name is None:
            topic = ctx.store.topic_by_id(topic_id)
            name = topic.name if topic is not None else ""
        out.append({"topic_id": topic_id, "topic_name": name, "partitions": sorted(ps)})
    return out
