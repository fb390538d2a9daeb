"""Manual replica assignments (CreateTopics, CreatePartitions) checked as Kafka checks them.

There is one node, so the only valid replica list is [this node]; an assignment naming any
other broker is refused with INVALID_REPLICA_ASSIGNMENT and the message Kafka's KRaft
controller gives ("... no broker with that ID is registered.").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.api import TopicError
from core.errors import ErrorCode

from .context import GatewayContext


def check_replicas(ctx: GatewayContext, broker_ids: Iterable[int]) -> None:
    """One partition's replica list: non-empty, no duplicates, only this node."""
    ids = list(broker_ids)
    if not ids:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    seen: set[int] = set()
    for broker in ids:
        if broker in seen:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {broker} more than once.",
            )
        seen.add(broker)
        if broker != ctx.node_id:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker}, but no broker "
                "with that ID is registered.",
            )


def check_create_assignments(ctx: GatewayContext, topic: Any) -> None:
    """CreateTopics with `assignments`: Kafka wants num_partitions and factor -1, and
    partition indexes 0..n-1."""
    if topic.num_partitions != -1:
        raise TopicError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    if topic.replication_factor != -1:
        raise TopicError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but replicationFactor was not set to -1.",
        )
    indexes = sorted(a.partition_index for a in topic.assignments)
    if indexes != list(range(len(indexes))):
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    for assignment in topic.assignments:
        check_replicas(ctx, assignment.broker_ids)


def check_new_partition_assignments(ctx: GatewayContext, topic: Any) -> None:
    """CreatePartitions with `assignments`: one replica list per new partition."""
    stream = ctx.store.get(topic.name)
    if stream is None:
        return  # the store answers UNKNOWN_TOPIC_OR_PARTITION
    added = topic.count - stream.partition_count
    if added > 0 and len(topic.assignments) != added:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(topic.assignments)} assignment(s) were specified.",
        )
    for assignment in topic.assignments:
        check_replicas(ctx, assignment.broker_ids)
