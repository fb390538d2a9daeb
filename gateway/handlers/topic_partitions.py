"""DescribeTopicPartitions (KIP-966): the Java admin client's describeTopics (3.9+).

Topics come sorted by name, their partitions in order, at most `response_partition_limit`
partitions per response; `next_cursor` names the first partition left out, and a request's
`cursor` resumes there. No topic is created. Authorization is checked here, per topic, as
for Metadata: an explicitly named topic the principal may not describe gets
TOPIC_AUTHORIZATION_FAILED, and a listing of every topic leaves such topics out.
"""

from __future__ import annotations

from typing import Any

from core.acl.model import SUPPORTED_OPERATIONS, Operation, ResourceType
from core.api import Topic
from core.cluster.view import CLUSTER
from core.errors import ErrorCode
from kafkawire.codec import RequestHeader

from .authz import allowed, authorized_operations
from .context import GatewayContext

_MAX_LIMIT = 2000  # Kafka's max.request.partition.size.limit default


def _leader(ctx: GatewayContext, topic: Topic, index: int) -> int:
    """The partition's leader: this node, or on several nodes the one leading its range."""
    for first, last, node in CLUSTER.leader_ranges(topic.name, topic.partition_count) or ():
        if first <= index <= last:
            return ctx.node_id if node < 0 else node
    owner = CLUSTER.leader(topic.name)
    return ctx.node_id if owner is None or owner < 0 else owner


def _operations(ctx: GatewayContext, name: str) -> int:
    ops = authorized_operations(ctx, ResourceType.TOPIC, name)
    if ops is None:  # no authorizer: every topic operation, as Kafka reports
        ops = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    return ops


def _error_topic(name: str, code: int) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": None, "partitions": []}


async def describe_topic_partitions(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    store = ctx.store
    cursor = body.cursor
    limit = max(1, min(body.response_partition_limit, _MAX_LIMIT))
    if body.topics:
        names = sorted({t.name for t in body.topics})
    else:
        names = sorted(
            t.name
            for t in store.topics()
            if allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        )
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        if limit == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
            topics.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        topic = store.get(name)
        if topic is None:
            topics.append(_error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        first = cursor.partition_index if cursor is not None and cursor.topic_name == name else 0
        last = min(topic.partition_count, first + limit)
        partitions = []
        for index in range(first, last):
            leader = _leader(ctx, topic, index)
            partitions.append(
                {
                    "error_code": ErrorCode.NONE,
                    "partition_index": index,
                    "leader_id": leader,
                    "leader_epoch": 0,
                    "replica_nodes": [leader],
                    "isr_nodes": [leader],
                    "eligible_leader_replicas": [],
                    "last_known_elr": [],
                    "offline_replicas": [],
                }
            )
        limit -= len(partitions)
        topics.append(
            {
                "error_code": ErrorCode.NONE,
                "name": name,
                "topic_id": topic.topic_id,
                "is_internal": False,
                "partitions": partitions,
                "topic_authorized_operations": _operations(ctx, name),
            }
        )
        if last < topic.partition_count:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
    response: dict[str, Any] = {"topics": topics}
    if next_cursor is not None:  # absent: the spec's null
        response["next_cursor"] = next_cursor
    return response
