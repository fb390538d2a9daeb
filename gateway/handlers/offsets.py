"""OffsetCommit, OffsetFetch and OffsetDelete: committed offsets of consumer groups.

Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION on commit; everything else is
decided by the group coordinator (generation and member checks) for the whole request, and
the accepted offsets are stored in one durable transaction before the response is sent.
Retention times (OffsetCommit v2-4) are accepted and ignored: offsets never expire.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.errors import ErrorCode
from core.metadata import CommittedOffset
from kafkawire.codec import RequestHeader

from .context import GatewayContext

_NO_OFFSET = -1


async def offset_commit(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    group_id = body.group_id
    errors: dict[tuple[str, int], ErrorCode] = {}
    accepted: list[CommittedOffset] = []
    max_metadata = ctx.groups.settings.max_metadata_bytes
    for topic in body.topics:
        stream = ctx.store.get(topic.name)
        for part in topic.partitions:
            key = (topic.name, part.partition_index)
            metadata = part.committed_metadata or ""
            if stream is None or not stream.has_partition(part.partition_index):
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > max_metadata:
                errors[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                accepted.append(
                    CommittedOffset(
                        group_id,
                        topic.name,
                        part.partition_index,
                        part.committed_offset,
                        getattr(part, "committed_leader_epoch", -1),
                        metadata,
                    )
                )
    if accepted:
        error = await ctx.groups.commit_offsets(
            group_id,
            body.generation_id_or_member_epoch,
            body.member_id,
            getattr(body, "group_instance_id", None),
            accepted,
        )
        for offset in accepted:
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


async def offset_fetch(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    """Committed offsets of the requested partitions (-1 where there is none), or of every
    partition the group has committed when topics is null (v2+); v8+ asks for several
    groups at once, v9+ as a member of a consumer group (its member id and epoch checked)."""
    require_stable = getattr(body, "require_stable", False)
    if header.api_version < 8:
        error, topics = await _fetch_group(ctx, body.group_id, body.topics, require_stable)
        return {"error_code": ErrorCode.NONE, "topics": topics}
    groups = []
    for group in body.groups:
        error = ctx.groups.validate_fetch(
            group.group_id, getattr(group, "member_id", None), getattr(group, "member_epoch", -1)
        )
        topics = []
        if not error:
            error, topics = await _fetch_group(ctx, group.group_id, group.topics, require_stable)
        groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
    return {"groups": groups}


async def _fetch_group(
    ctx: GatewayContext, group_id: str, requested: Any, require_stable: bool
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    await ctx.groups.offsets.load_fresh(group_id)  # several nodes: read the database
    topics: list[dict[str, Any]]
    if requested is None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for offset in ctx.groups.all_committed(group_id):
            by_topic.setdefault(offset.topic, []).append(_fetched(offset.partition, offset))
        topics = [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    else:
        topics = [
            {
                "name": topic.name,
                "partitions": [
                    _fetched(index, ctx.groups.committed(group_id, (topic.name, index)))
                    for index in topic.partition_indexes
                ],
            }
            for topic in requested
        ]
    txns = ctx.transactions
    if require_stable and txns is not None:
        # An open transaction's TxnOffsetCommit is pending for the partition (v7+).
        for t in topics:
            name: str = t["name"]
            parts: list[dict[str, Any]] = t["partitions"]
            for p in parts:
                if txns.has_pending_offsets(group_id, name, p["partition_index"]):
                    p["error_code"] = ErrorCode.UNSTABLE_OFFSET_COMMIT
                    p["committed_offset"] = _NO_OFFSET
    return ErrorCode.NONE, topics


def _fetched(index: int, offset: CommittedOffset | None) -> dict[str, Any]:
    if offset is None:
        return {
            "partition_index": index,
            "committed_offset": _NO_OFFSET,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": ErrorCode.NONE,
        }
    return {
        "partition_index": index,
        "committed_offset": offset.offset,
        "committed_leader_epoch": offset.leader_epoch,
        "metadata": offset.metadata if offset.metadata is not None else "",
        "error_code": ErrorCode.NONE,
    }


async def offset_delete(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    requested = list(_partitions(body.topics))
    known = [p for p in requested if _exists(ctx, *p)]
    error, results = await ctx.groups.delete_offsets(body.group_id, known)
    if error:
        return {"error_code": error}
    return {
        "error_code": ErrorCode.NONE,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": results.get(
                            (topic.name, p.partition_index), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        ),
                    }
                    for p in topic.partitions
                ],
            }
            for topic in body.topics
        ],
    }


def _partitions(topics: Iterable[Any]) -> Iterable[tuple[str, int]]:
    for topic in topics:
        for part in topic.partitions:
            yield topic.name, part.partition_index


def _exists(ctx: GatewayContext, topic: str, partition: int) -> bool:
    stream = ctx.store.get(topic)
    return stream is not None and stream.has_partition(partition)
