"""The replica admin APIs, answered as a single-node Kafka answers them.

streamgate is one node with one log dir (`--data-dir`), the leader and only replica of every
partition. So:
- DescribeLogDirs lists that dir, each partition's size (tier-1 bytes plus tier-2 bytes
  not also held locally), and the disk's total/usable bytes;
- AlterReplicaLogDirs to that same dir is a no-op (NONE), to any other path
  LOG_DIR_NOT_FOUND, as Kafka answers for a dir it was not configured with (checked before
  the partition, as Kafka does);
- ElectLeaders: the leader is already the preferred (and only) replica, so every listed
  partition gets ELECTION_NOT_NEEDED, and a null list (all partitions) an empty result;
- AlterPartitionReassignments to [this node] succeeds at once; a list naming another broker
  gets INVALID_REPLICA_ASSIGNMENT; cancelling (null replicas) NO_REASSIGNMENT_IN_PROGRESS;
- ListPartitionReassignments never has anything in progress.
Unknown topics or partitions get UNKNOWN_TOPIC_OR_PARTITION everywhere.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from core.api import PartitionView, Topic, TopicError
from core.errors import ErrorCode
from kafkawire.codec import RequestHeader

from .assignments import check_replicas
from .context import GatewayContext

_PREFERRED, _UNCLEAN = 0, 1


def log_dir(ctx: GatewayContext) -> str:
    """The one log dir, absolute (what DescribeLogDirs reports and AlterReplicaLogDirs
    accepts)."""
    return os.path.abspath(ctx.store.settings.data_dir)


def _partition_of(ctx: GatewayContext, topic: str, index: int) -> tuple[Topic, PartitionView]:
    stream = ctx.store.get(topic)
    if stream is None or not stream.has_partition(index):
        raise TopicError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"The partition {topic}-{index} does not exist.",
        )
    return stream, stream.partition(index)


# --- DescribeLogDirs ---------------------------------------------------------------------


def _disk_usage(path: str) -> tuple[int, int]:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1, -1
    return usage.total, usage.free


async def describe_log_dirs(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    if body.topics is None:  # every partition
        wanted = [(s.name, range(s.partition_count)) for s in list(ctx.store.topics())]
    else:
        wanted = [(t.topic, t.partitions) for t in body.topics]
    topics = []
    for name, indexes in wanted:
        stream = ctx.store.get(name)
        if stream is None:
            continue  # Kafka leaves out partitions this broker does not host
        partitions = [
            {
                "partition_index": index,
                "partition_size": stream.partition(index).size_bytes(),
                "offset_lag": 0,
                "is_future_key": False,
            }
            for index in indexes
            if stream.has_partition(index)
        ]
        if partitions:
            topics.append({"name": name, "partitions": partitions})
    path = log_dir(ctx)
    total, usable = _disk_usage(path)
    return {
        "error_code": ErrorCode.NONE,
        "results": [
            {
                "error_code": ErrorCode.NONE,
                "log_dir": path,
                "topics": topics,
                "total_bytes": total,
                "usable_bytes": usable,
            }
        ],
    }


# --- AlterReplicaLogDirs -----------------------------------------------------------------


async def alter_replica_log_dirs(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    here = log_dir(ctx)
    results: dict[str, list[dict[str, Any]]] = {}
    for target in body.dirs:
        same_dir = os.path.abspath(target.path) == here
        for topic in target.topics:
            for index in topic.partitions:
                if not same_dir:
                    error = ErrorCode.LOG_DIR_NOT_FOUND
                else:
                    try:
                        _partition_of(ctx, topic.name, index)
                        error = ErrorCode.NONE  # already there: nothing to move
                    except TopicError as exc:
                        error = ErrorCode(exc.error_code)
                results.setdefault(topic.name, []).append(
                    {"partition_index": index, "error_code": error}
                )
    return {
        "results": [
            {"topic_name": name, "partitions": partitions} for name, partitions in results.items()
        ]
    }


# --- ElectLeaders ------------------------------------------------------------------------


async def elect_leaders(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    election_type = getattr(body, "election_type", _PREFERRED)
    response: dict[str, Any] = {"error_code": ErrorCode.NONE, "replica_election_results": []}
    if election_type not in (_PREFERRED, _UNCLEAN):
        response["error_code"] = ErrorCode.INVALID_REQUEST
        return response
    if body.topic_partitions is None:
        return response  # all partitions: none needs an election, and Kafka lists none
    results = []
    for topic in body.topic_partitions:
        partition_results = []
        for index in topic.partitions:
            try:
                _partition_of(ctx, topic.topic, index)
                error, message = (
                    ErrorCode.ELECTION_NOT_NEEDED,
                    f"Leader election not needed for topic partition {topic.topic}-{index}: "
                    f"node {ctx.node_id} is its only replica and already leads it",
                )
            except TopicError as exc:
                error, message = ErrorCode(exc.error_code), str(exc)
            partition_results.append(
                {"partition_id": index, "error_code": error, "error_message": message}
            )
        results.append({"topic": topic.topic, "partition_result": partition_results})
    response["replica_election_results"] = results
    return response


# --- partition reassignments -------------------------------------------------------------


async def alter_partition_reassignments(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    responses = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            error, message = ErrorCode.NONE, None
            try:
                _partition_of(ctx, topic.name, part.partition_index)
                if part.replicas is None:
                    raise TopicError(
                        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                        f"Unable to cancel reassignment of {topic.name}-{part.partition_index}: "
                        "no reassignment is in progress.",
                    )
                check_replicas(ctx, part.replicas)  # [this node]: done at once
            except TopicError as exc:
                error, message = ErrorCode(exc.error_code), str(exc)
            partitions.append(
                {
                    "partition_index": part.partition_index,
                    "error_code": error,
                    "error_message": message,
                }
            )
        responses.append({"name": topic.name, "partitions": partitions})
    return {"error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


async def list_partition_reassignments(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    # Reassignments complete within their request: nothing is ever in progress.
    return {"error_code": ErrorCode.NONE, "error_message": None, "topics": []}
