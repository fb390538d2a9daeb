"""DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, and share
groups in ListGroups: the admin side of share groups (`core.sharegroups`).

A share group's "offset" is each share partition's start offset (SPSO): everything below
it is done. Altering or deleting it is refused while the group has members, as on Kafka.
"""

from __future__ import annotations

import uuid
from typing import Any

from core.sharegroups import RecordState, ShareCoordinator, ShareError
from kafkawire.codec import RequestHeader

from . import groups as classic
from .context import GatewayContext

_NO_OFFSET = -1


def _topic_id(ctx: GatewayContext, topic: str) -> uuid.UUID:
    stream = ctx.store.get(topic)
    return stream.topic_id if stream is not None else uuid.UUID(int=0)


def _lag(ctx: GatewayContext, shares: ShareCoordinator, key: tuple[str, str, int]) -> int:
    """Records from the start offset to the high watermark not yet done."""
    stream = ctx.store.get(key[1])
    part = shares.partitions.get(key)
    if stream is None or part is None or not stream.has_partition(key[2]):
        return -1
    done = sum(
        1
        for r in part.records.values()
        if r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
    )
    return max(0, stream.partition(key[2]).high_watermark - part.start - done)


async def describe_share_group_offsets(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    shares = ctx.shares
    groups = []
    for request in body.groups:
        starts = shares.start_offsets(request.group_id) if shares is not None else {}
        wanted: dict[str, list[int] | None] = {}
        if request.topics is None:  # every topic the group has state for
            for topic, _ in starts:
                wanted[topic] = None
        else:
            for topic in request.topics:
                wanted[topic.topic_name] = list(topic.partitions)
        topics = []
        for name, indexes in wanted.items():
            if indexes is None:
                indexes = sorted(i for t, i in starts if t == name)
            partitions = []
            for index in indexes:
                start = starts.get((name, index))
                partitions.append(
                    {
                        "partition_index": index,
                        "start_offset": _NO_OFFSET if start is None else start,
                        "leader_epoch": -1,
                        "lag": -1
                        if start is None or shares is None
                        else _lag(ctx, shares, (request.group_id, name, index)),
                        "error_code": ShareError.NONE,
                    }
                )
            topics.append(
                {"topic_name": name, "topic_id": _topic_id(ctx, name), "partitions": partitions}
            )
        groups.append(
            {"group_id": request.group_id, "topics": topics, "error_code": ShareError.NONE}
        )
    return {"groups": groups}


async def alter_share_group_offsets(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    shares = ctx.shares
    if shares is None:
        return {"error_code": ShareError.NOT_COORDINATOR}
    if ctx.groups.group(body.group_id) is not None:
        return {"error_code": ShareError.GROUP_ID_NOT_FOUND, "error_message": "not a share group"}
    offsets: dict[tuple[str, int], int] = {}
    responses = []
    for topic in body.topics:
        stream = ctx.store.get(topic.topic_name)
        partitions = []
        for part in topic.partitions:
            error = ShareError.NONE
            if stream is None or not stream.has_partition(part.partition_index):
                error = ShareError.UNKNOWN_TOPIC_OR_PARTITION
            elif part.start_offset < 0:
                error = ShareError.INVALID_REQUEST
            else:
                offsets[(topic.topic_name, part.partition_index)] = part.start_offset
            partitions.append({"partition_index": part.partition_index, "error_code": error})
        responses.append(
            {
                "topic_name": topic.topic_name,
                "topic_id": _topic_id(ctx, topic.topic_name),
                "partitions": partitions,
            }
        )
    error = await shares.alter_start_offsets(body.group_id, offsets)
    if error:
        return {"error_code": error, "error_message": "the share group has members"}
    return {"error_code": ShareError.NONE, "responses": responses}


async def delete_share_group_offsets(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    shares = ctx.shares
    if shares is None:
        return {"error_code": ShareError.NOT_COORDINATOR}
    if shares.group(body.group_id) is None:
        return {"error_code": ShareError.GROUP_ID_NOT_FOUND}
    names = [t.topic_name for t in body.topics]
    error = await shares.delete_start_offsets(body.group_id, names)
    if error:
        return {"error_code": error, "error_message": "the share group has members"}
    return {
        "error_code": ShareError.NONE,
        "responses": [
            {"topic_name": n, "topic_id": _topic_id(ctx, n), "error_code": ShareError.NONE}
            for n in names
        ],
    }


async def list_groups(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    """The classic answer, then the share groups (protocol type "share", as Kafka lists
    them), filtered by state like the rest."""
    response = await classic.list_groups(ctx, header, body)
    shares = ctx.shares
    if shares is None:
        return response
    wanted = getattr(body, "states_filter", ())
    states = {s.lower() for s in wanted} if wanted else None
    known = {g["group_id"] for g in response["groups"]}
    for group_id in shares.group_ids():
        group = shares.group(group_id)
        if group is None or group_id in known:
            continue
        if states is not None and group.state.lower() not in states:
            continue
        response["groups"].append(
            {
                "group_id": group_id,
                "protocol_type": "share",
                "group_state": group.state,
                "group_type": "share",
            }
        )
    return response


async def delete_groups(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    """DeleteGroups: share groups are deleted here (when empty), the rest by the classic
    coordinator; the results in request order."""
    shares = ctx.shares
    names = list(body.groups_names)
    own = {
        n
        for n in names
        if shares is not None and shares.group(n) is not None and ctx.groups.group(n) is None
    }
    if not own:
        return await classic.delete_groups(ctx, header, body)
    errors: dict[str, int] = {}
    assert shares is not None
    for name in own:
        errors[name] = await shares.delete_group(name)
    rest = [n for n in names if n not in own]
    if rest:
        answer = await classic.delete_groups(ctx, header, _Names(tuple(rest)))
        errors.update({r["group_id"]: r["error_code"] for r in answer["results"]})
    return {"results": [{"group_id": n, "error_code": errors[n]} for n in names]}


class _Names:
    """A DeleteGroups body naming only the classic groups."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.groups_names = names
