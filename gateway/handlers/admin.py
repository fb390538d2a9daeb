"""ApiVersions, Metadata, CreateTopics, DeleteTopics, InitProducerId."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from core.acl.model import CLUSTER_NAME, SUPPORTED_OPERATIONS, Operation, ResourceType
from core.api import ZERO_UUID, Topic, TopicError, validate_topic_name
from core.cluster.view import CLUSTER
from core.errors import ErrorCode
from kafkawire.apis import (
    FINALIZED_FEATURES,
    SINGLE_NODE_FEATURES,
    SUPPORTED_APIS,
    SUPPORTED_FEATURES,
)
from kafkawire.codec import RequestHeader
from kafkawire.metadata_response import TopicMetadata, encode_metadata_response

from . import txn
from .assignments import check_create_assignments
from .authz import NOT_REQUESTED, allowed, authorized_operations
from .cluster import cluster_authorized_operations
from .configs import topic_config_entries
from .context import GatewayContext, advertised_endpoint

log = logging.getLogger(__name__)

# Producer epochs are int16; past this a re-initialising producer gets a fresh id.
_MAX_PRODUCER_EPOCH = 32767


def api_versions_body(error_code: int = ErrorCode.NONE, version: int = 0) -> dict[str, Any]:
    """The APIs and, from v3, the features: supported ranges (before v4 without those whose
    minimum is 0, which older clients cannot read) and the finalized levels (on several
    nodes without the one-node ones)."""
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": key, "min_version": s.advertised_min, "max_version": s.max_version}
            for key, s in sorted(SUPPORTED_APIS.items())
        ],
        "supported_features": [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in sorted(SUPPORTED_FEATURES.items())
            if low > 0 or version >= 4
        ],
        "finalized_features_epoch": 0,
        "finalized_features": [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in sorted(FINALIZED_FEATURES.items())
            if not (CLUSTER.enabled and name in SINGLE_NODE_FEATURES)
        ],
    }


async def api_versions(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    return api_versions_body(version=header.api_version)


async def metadata(ctx: GatewayContext, header: RequestHeader, body: Any) -> bytes:
    """Metadata, encoded by the hand-written encoder (topics may have thousands of partitions;
    kio would cost ~19 us per partition)."""
    store = ctx.store
    # v0 sends [] for "all topics"; v1+ sends null.
    requested = body.topics
    auto_create = getattr(body, "allow_auto_topic_creation", True)
    topics: list[TopicMetadata] = []
    if requested is None or (header.api_version == 0 and not requested):
        # With an authorizer, only the topics the principal may describe are listed.
        topics.extend(
            _topic_metadata(t)
            for t in store.topics()
            if allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.name)
        )
    else:
        for item in requested:
            name = item.name
            if name is None:  # v10+: a topic asked for by id
                topics.append(_topic_metadata_by_id(ctx, getattr(item, "topic_id", None)))
                continue
            if not allowed(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(TopicMetadata(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name, 0))
                continue
            try:
                validate_topic_name(name)
                stream = store.get(name)
                if stream is None and auto_create:
                    if not _may_create(ctx, name):
                        raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
                    stream = store.get_or_create(name)
            except TopicError as exc:
                topics.append(TopicMetadata(exc.error_code, name, 0))
                continue
            if stream is None:
                topics.append(TopicMetadata(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, 0))
            else:
                topics.append(_topic_metadata(stream))
    if getattr(body, "include_topic_authorized_operations", False):
        topics = [_with_topic_operations(ctx, t) for t in topics]
    cluster_ops = cluster_authorized_operations(
        getattr(body, "include_cluster_authorized_operations", False)
    )
    if cluster_ops != NOT_REQUESTED:
        ops = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
        cluster_ops = cluster_ops if ops is None else ops
    return encode_metadata_response(
        header.correlation_id,
        header.api_version,
        CLUSTER.brokers or [(ctx.node_id, *advertised_endpoint(ctx))],
        store.cluster_id,
        ctx.node_id,
        topics,
        ctx.node_id,
        cluster_ops,  # v8-10; librdkafka's DescribeCluster asks through Metadata
    )


def _may_create(ctx: GatewayContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic, as in Kafka."""
    return allowed(ctx, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or allowed(
        ctx, Operation.CREATE, ResourceType.TOPIC, name
    )


def _with_topic_operations(ctx: GatewayContext, topic: TopicMetadata) -> TopicMetadata:
    if topic.error_code != ErrorCode.NONE or topic.name is None:
        return topic
    ops = authorized_operations(ctx, ResourceType.TOPIC, topic.name)
    # Without an authorizer, every topic operation (as Kafka reports with no ACLs enforced).
    if ops is None:
        ops = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    return dataclasses.replace(topic, authorized_operations=ops)


def _topic_metadata(topic: Topic) -> TopicMetadata:
    if not CLUSTER.knows_leaders(topic.name):
        # Opened here from another node's creation, its leaders not read yet: naming this
        # node would send clients to a node that refuses them (clients retry this code).
        return TopicMetadata(ErrorCode.LEADER_NOT_AVAILABLE, topic.name, 0, topic.topic_id)
    leader = CLUSTER.leader(topic.name)  # several nodes: the owner of its segments
    ranges = CLUSTER.leader_ranges(topic.name, topic.partition_count)  # per-partition leaders
    return TopicMetadata(
        ErrorCode.NONE,
        topic.name,
        topic.partition_count,
        topic.topic_id,
        leader=-1 if leader is None else leader,
        leader_ranges=tuple(ranges) if ranges else None,
    )


def _topic_metadata_by_id(ctx: GatewayContext, topic_id: uuid.UUID | None) -> TopicMetadata:
    topic = ctx.store.topic_by_id(topic_id or ZERO_UUID)
    if topic is None:
        return TopicMetadata(ErrorCode.UNKNOWN_TOPIC_ID, None, 0, topic_id or ZERO_UUID)
    return _topic_metadata(topic)


async def create_topics(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    results = []
    for topic in body.topics:
        partitions = len(topic.assignments) if topic.assignments else topic.num_partitions
        configs = {c.name: c.value for c in topic.configs}
        result: dict[str, Any] = {
            "name": topic.name,
            "error_code": ErrorCode.NONE,
            "num_partitions": -1,
            "replication_factor": -1,
        }
        try:
            if topic.assignments:
                check_create_assignments(ctx, topic)
            # Durability comes from fsync and tier 2, not replicas: any factor is accepted.
            elif topic.replication_factor == 0 or topic.replication_factor < -1:
                raise TopicError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "replication factor must be -1 or positive",
                )
            if getattr(body, "validate_only", False):
                count, checked = ctx.store.check_new_topic(topic.name, partitions, configs)
            else:
                stream = ctx.store.create_topic(topic.name, partitions, configs)
                count, checked = stream.partition_count, stream.configs
                result["topic_id"] = stream.topic_id  # v7+
            result["num_partitions"] = count
            result["replication_factor"] = 1
            result["configs"] = [  # v5+: every config of the new topic, with its source
                {
                    "name": e.name,
                    "value": e.value,
                    "read_only": e.read_only,
                    "config_source": int(e.source),
                    "is_sensitive": e.is_sensitive,
                }
                for e in topic_config_entries(ctx, checked)
            ]
        except TopicError as exc:
            result["error_code"] = exc.error_code
            result["error_message"] = str(exc)
        results.append(result)
    return {"topics": results}


async def delete_topics(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    # v6+ names topics by name or by id (`topics`); older versions by name (`topic_names`).
    wanted: list[tuple[str | None, uuid.UUID | None]] = (
        [(t.name, t.topic_id) for t in body.topics]
        if hasattr(body, "topics")
        else [(name, None) for name in body.topic_names]
    )
    responses = []
    for name, topic_id in wanted:
        response: dict[str, Any] = {"name": name, "topic_id": topic_id or ZERO_UUID}
        try:
            if name is None:
                found = ctx.store.topic_by_id(topic_id or ZERO_UUID)
                if found is None:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic with id {topic_id}")
                name = response["name"] = found.name
            existing = ctx.store.get(name)
            if existing is not None:
                response["topic_id"] = existing.topic_id
            await ctx.store.delete_topic(name)
            response["error_code"] = ErrorCode.NONE
        except TopicError as exc:
            response.update(error_code=exc.error_code, error_message=str(exc))
        responses.append(response)
    return {"responses": responses}


async def init_producer_id(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    if body.transactional_id is not None:
        return await txn.init_transactional_producer(ctx, body)
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < _MAX_PRODUCER_EPOCH:
        # KIP-360: an idempotent producer re-initialising after an error keeps its id.
        return {
            "error_code": ErrorCode.NONE,
            "producer_id": producer_id,
            "producer_epoch": epoch + 1,
        }
    return {
        "error_code": ErrorCode.NONE,
        "producer_id": await ctx.store.allocate_producer_id(),
        "producer_epoch": 0,
    }
