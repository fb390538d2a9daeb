"""CreatePartitions and DescribeCluster.

CreatePartitions grows a topic's virtual partition count; the stream's tail segment takes
over the new partitions (core.store.StreamStore.grow_partitions). Replica assignments are
checked like Kafka's (only this node may be named), then ignored: there is one node, and
durability comes from fsync.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from core.api import TopicError
from core.cluster.view import CLUSTER
from core.errors import ErrorCode
from kafkawire.codec import RequestHeader

from .assignments import check_new_partition_assignments
from .context import GatewayContext, advertised_endpoint

_ENDPOINT_BROKERS = 1
_AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# Kafka AclOperation codes a client may use on the cluster resource (no authorizer here).
_CREATE, _DESCRIBE, _DESCRIBE_CONFIGS, _IDEMPOTENT_WRITE = 5, 8, 10, 12
CLUSTER_AUTHORIZED_OPERATIONS = sum(
    1 << op for op in (_CREATE, _DESCRIBE, _DESCRIBE_CONFIGS, _IDEMPOTENT_WRITE)
)


def cluster_authorized_operations(requested: bool) -> int:
    """The cluster's authorized-operations bit field, or Kafka's "omitted" value."""
    return CLUSTER_AUTHORIZED_OPERATIONS if requested else _AUTHORIZED_OPERATIONS_OMITTED


async def create_partitions(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    counts = Counter(topic.name for topic in body.topics)
    results = []
    for topic in body.topics:
        result: dict[str, Any] = {
            "name": topic.name,
            "error_code": ErrorCode.NONE,
            "error_message": None,
        }
        try:
            if counts[topic.name] > 1:
                raise TopicError(ErrorCode.INVALID_REQUEST, "topic listed more than once")
            if topic.assignments is not None:
                check_new_partition_assignments(ctx, topic)
            ctx.store.grow_partitions(topic.name, topic.count, body.validate_only)
        except TopicError as exc:
            result["error_code"] = exc.error_code
            result["error_message"] = str(exc)
        results.append(result)
    return {"results": results}


async def describe_cluster(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    host, port = advertised_endpoint(ctx)
    response: dict[str, Any] = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": _ENDPOINT_BROKERS,
        "cluster_id": ctx.store.cluster_id,
        # each node names itself, as KRaft brokers name a random live broker: any serves
        "controller_id": ctx.node_id,
        "brokers": [
            {"broker_id": node_id, "host": h, "port": p, "rack": None}
            for node_id, h, p in (CLUSTER.brokers or [(ctx.node_id, host, port)])
        ],
        "cluster_authorized_operations": cluster_authorized_operations(
            body.include_cluster_authorized_operations
        ),
    }
    endpoint_type = getattr(body, "endpoint_type", _ENDPOINT_BROKERS)
    if endpoint_type != _ENDPOINT_BROKERS:
        response.update(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"endpoint type {endpoint_type}: this gateway only lists brokers",
            brokers=[],
        )
    return response
