"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups and DeleteGroups: the classic group protocol, over `core.groups`.

Handlers only translate between request bodies (every version's fields) and the
coordinator; the group logic lives in `core.groups.coordinator`. JoinGroup and SyncGroup
may wait for a long time: the server runs each request as its own task, so a waiting
request holds up only the responses queued behind it on the same connection.
"""

from __future__ import annotations

from typing import Any

from core.cluster.view import CLUSTER
from core.errors import ErrorCode
from core.groups import GroupState, JoinRequest, SyncRequest
from kafkawire.codec import RequestHeader

from .context import CLIENT_HOST, GatewayContext, advertised_endpoint

_KEY_TYPE_GROUP, _KEY_TYPE_TRANSACTION = 0, 1
# AclOperation bits a group supports (READ 3, DELETE 6, DESCRIBE 8), as Kafka reports them
# when there is no authorizer.
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_OPERATIONS_NOT_REQUESTED = -(2**31)
# ListGroups v5 group types
_CLASSIC, _CONSUMER = "classic", "consumer"


async def find_coordinator(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    """One node, or a stable hash over the live nodes, coordinates a group or a
    transactional id. v4+ asks for several keys at once."""
    key_type = getattr(body, "key_type", _KEY_TYPE_GROUP)
    if header.api_version >= 4:
        return {
            "coordinators": [
                {"key": key, **_coordinator(ctx, key_type, key)} for key in body.coordinator_keys
            ]
        }
    return _coordinator(ctx, key_type, getattr(body, "key", "") or "")


def _coordinator(ctx: GatewayContext, key_type: int, key: str) -> dict[str, Any]:
    if key_type == _KEY_TYPE_GROUP or (
        key_type == _KEY_TYPE_TRANSACTION and ctx.transactions is not None
    ):
        other = CLUSTER.coordinator(key)
        if other is not None:  # several nodes: groups and ids are spread over the live nodes
            return {
                "error_code": ErrorCode.NONE,
                "node_id": other[0],
                "host": other[1],
                "port": other[2],
            }
    if key_type == _KEY_TYPE_GROUP or (
        key_type == _KEY_TYPE_TRANSACTION and ctx.transactions is not None
    ):
        host, port = advertised_endpoint(ctx)
        return {
            "error_code": ErrorCode.NONE,
            "node_id": ctx.node_id,
            "host": host,
            "port": port,
        }
    error, message = ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}"
    return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}


async def join_group(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    session_timeout = body.session_timeout.total_seconds()
    rebalance_timeout = getattr(body, "rebalance_timeout", None)  # v1+; v0 uses the session's
    result = await ctx.groups.join_group(
        JoinRequest(
            group_id=body.group_id,
            member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            client_id=header.client_id or "",
            client_host=_client_host(),
            session_timeout=session_timeout,
            rebalance_timeout=(
                rebalance_timeout.total_seconds()
                if rebalance_timeout is not None and rebalance_timeout.total_seconds() > 0
                else session_timeout
            ),
            protocol_type=body.protocol_type,
            protocols=[(p.name, p.metadata) for p in body.protocols],
            require_known_member_id=header.api_version >= 4,
        )
    )
    protocol_name = result.protocol_name
    if protocol_name is None and header.api_version < 7:
        protocol_name = ""  # nullable only from v7
    return {
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in result.members
        ],
    }


async def sync_group(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    result = await ctx.groups.sync_group(
        SyncRequest(
            group_id=body.group_id,
            generation_id=body.generation_id,
            member_id=body.member_id,
            group_instance_id=getattr(body, "group_instance_id", None),
            protocol_type=getattr(body, "protocol_type", None),
            protocol_name=getattr(body, "protocol_name", None),
            assignments={a.member_id: a.assignment for a in body.assignments},
        )
    )
    return {
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


async def heartbeat(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    error = ctx.groups.heartbeat(
        body.group_id,
        body.generation_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
    )
    return {"error_code": error}


async def leave_group(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    if header.api_version < 3:
        error, errors = ctx.groups.leave_group(body.group_id, [(body.member_id, None)])
        return {"error_code": error or (errors[0] if errors else ErrorCode.NONE)}
    leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    error, errors = ctx.groups.leave_group(body.group_id, leaving)
    return {
        "error_code": error,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
            for (member_id, instance_id), member_error in zip(leaving, errors, strict=False)
        ],
    }


async def list_groups(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    """Classic groups and consumer groups (protocol type "consumer", group type "consumer"
    from v5), filtered by state (v4+) and type (v5+), case-insensitively as Kafka does."""
    wanted = getattr(body, "states_filter", ())
    states = {s.lower() for s in wanted} if wanted else None
    wanted_types = {t.lower() for t in getattr(body, "types_filter", ())}
    groups: list[dict[str, Any]] = []
    if not wanted_types or _CLASSIC in wanted_types:
        groups.extend(
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type or "",
                "group_state": g.state.value,
                "group_type": _CLASSIC,
            }
            for g in ctx.groups.list_groups(states)
        )
    if not wanted_types or _CONSUMER in wanted_types:
        for group in ctx.groups.consumer.groups.values():
            state = group.state().value
            if states is None or state.lower() in states:
                groups.append(
                    {
                        "group_id": group.group_id,
                        "protocol_type": _CONSUMER,
                        "group_state": state,
                        "group_type": _CONSUMER,
                    }
                )
    return {"error_code": ErrorCode.NONE, "groups": groups}


async def describe_groups(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    operations = (
        _GROUP_OPERATIONS
        if getattr(body, "include_authorized_operations", False)
        else _OPERATIONS_NOT_REQUESTED
    )
    return {
        "groups": [
            _describe(ctx, group_id, operations, header.api_version) for group_id in body.groups
        ]
    }


def _describe(ctx: GatewayContext, group_id: str, operations: int, version: int) -> dict[str, Any]:
    group = ctx.groups.group(group_id)
    if group is None:
        # What Kafka answers for a group it does not know, or one of the consumer group
        # protocol: state Dead, no error before v6, GROUP_ID_NOT_FOUND from v6.
        consumer = group_id in ctx.groups.consumer.groups
        return {
            "error_code": ErrorCode.GROUP_ID_NOT_FOUND if version >= 6 else ErrorCode.NONE,
            "error_message": (
                f"Group {group_id} is not a classic group."
                if consumer
                else f"Group {group_id} not found."
            )
            if version >= 6
            else None,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "authorized_operations": operations,
        }
    # Like Kafka, metadata and assignments (and the protocol) only once the group is Stable.
    stable = group.state is GroupState.STABLE
    return {
        "error_code": ErrorCode.NONE,
        "group_id": group_id,
        "group_state": group.state.value,
        "protocol_type": group.protocol_type or "",
        "protocol_data": (group.protocol_name or "") if stable else "",
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata_for(group.protocol_name) if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in group.members.values()
        ],
        "authorized_operations": operations,
    }


async def delete_groups(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    names = list(body.groups_names)
    errors = await ctx.groups.delete_groups(names)
    return {
        "results": [
            {"group_id": name, "error_code": error}
            for name, error in zip(names, errors, strict=True)
        ]
    }


def _client_host() -> str:
    # Kafka shows the address the way Java prints an InetAddress: "/127.0.0.1".
    host = CLIENT_HOST.get()
    return f"/{host}" if host else ""
