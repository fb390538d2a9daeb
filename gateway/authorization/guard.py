"""The authorizer on every API, with Kafka's error codes, as a layer around the handlers.

Each guard runs synchronously where the handler would (so pipelined Produce keeps its
order), drops what the principal may not touch from the request, calls the handler with the
rest, and puts the denied items back into the response in request order, each with Kafka's
error (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Requests that need a
permission on the cluster or on a group as a whole are answered without calling the handler.
Fetch and Metadata check inside their handlers (their responses have their own encoders).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from core.acl.model import CLUSTER_NAME, Operation, ResourceType
from core.errors import ErrorCode
from gateway.handlers.authz import NOT_REQUESTED, allowed, authorized_operations
from gateway.handlers.context import CLIENT_HOST, PRINCIPAL, GatewayContext
from gateway.handlers.txn import no_transaction_state
from kafkawire.apis import ApiKey
from kafkawire.codec import RequestHeader

log = logging.getLogger(__name__)

# A handler's answer: fields for the encoder, an encoded body, or an encoded body in
# pieces (Fetch: record batches are sent from where they are, not joined), or no answer.
Response = dict[str, Any] | bytes | list[bytes | memoryview] | None
Handler = Callable[[GatewayContext, RequestHeader, Any], Awaitable[Response]]
Guard = Callable[[GatewayContext, RequestHeader, Any, Handler], Awaitable[Response]]

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
_ANONYMOUS = "User:ANONYMOUS"

# Test-only: take the principal from the client id on unauthenticated connections, so ACL
# tests can run before SASL exists. Never set this in production.
TEST_PRINCIPAL_ENV = "STREAMGATE_TEST_PRINCIPAL_FROM_CLIENT_ID"


def test_principal_enabled() -> bool:
    return os.environ.get(TEST_PRINCIPAL_ENV) == "1"


def _cluster(ctx: GatewayContext, op: Operation) -> bool:
    return allowed(ctx, op, CLUSTER, CLUSTER_NAME)


def _done(value: Response) -> Awaitable[Response]:
    async def ready() -> Response:
        return value

    return ready()


def _split(items: Iterable[Any], is_allowed: Callable[[Any], bool]) -> tuple[list[Any], list[bool]]:
    kept, mask = [], []
    for item in items:
        ok = is_allowed(item)
        mask.append(ok)
        if ok:
            kept.append(item)
    return kept, mask


def _per_item(
    ctx: GatewayContext,
    header: RequestHeader,
    body: Any,
    inner: Handler,
    request_field: str,
    response_field: str,
    is_allowed: Callable[[Any], bool],
    denied: Callable[[Any], dict[str, Any]],
) -> Awaitable[Response]:
    """Call `inner` with the allowed items of `body.<request_field>`; splice the denied ones
    into `response[<response_field>]` (one response item per request item, in order)."""
    items = getattr(body, request_field)
    if items is None:
        return inner(ctx, header, body)
    kept, mask = _split(items, is_allowed)
    if all(mask):
        return inner(ctx, header, body)
    pending = inner(ctx, header, dataclasses.replace(body, **{request_field: tuple(kept)}))

    async def merge() -> Response:
        response = await pending
        if not isinstance(response, dict):
            return response
        answered = iter(response.get(response_field) or [])
        response[response_field] = [
            next(answered) if ok else denied(item) for item, ok in zip(items, mask, strict=True)
        ]
        return response

    return merge()


def _whole(
    check: bool,
    inner: Handler,
    ctx: GatewayContext,
    header: RequestHeader,
    body: Any,
    refusal: Callable[[], dict[str, Any]],
) -> Awaitable[Response]:
    return inner(ctx, header, body) if check else _done(refusal())


def _each(
    request_field: str,
    response_field: str,
    op: Operation,
    resource: ResourceType,
    denied: Callable[[Any], dict[str, Any]],
    name: Callable[[Any], str] = lambda item: str(item.name),
) -> Guard:
    """A guard checking `op` on each item of `body.<request_field>` (named by `name`);
    the denied items are answered with `denied(item)` in `response[<response_field>]`."""
    return _per_item_guard(
        request_field,
        response_field,
        lambda ctx: lambda item: allowed(ctx, op, resource, name(item)),
        denied,
    )


def _per_item_guard(
    request_field: str,
    response_field: str,
    check: Callable[[GatewayContext], Callable[[Any], bool]],
    denied: Callable[[Any], dict[str, Any]],
) -> Guard:
    """`_per_item` as a guard; `check(ctx)` says which items are allowed."""

    def guard(
        ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
    ) -> Awaitable[Response]:
        return _per_item(
            ctx, header, body, inner, request_field, response_field, check(ctx), denied
        )

    return guard


def _as_is(item: Any) -> str:
    return str(item)


def _partitions_denied(topic: Any, code: int, **extra: Any) -> dict[str, Any]:
    """A topic's response item with `code` on each of its `partitions`."""
    return {
        "name": topic.name,
        "partitions": [
            {"partition_index": p.partition_index, "error_code": code, **extra}
            for p in topic.partitions
        ],
    }


_DENIED_MESSAGE = "Authorization failed."

# READ on each of `body.topics`; the denied ones answered per partition in place.
_topics_read = _each(
    "topics", "topics", Operation.READ, TOPIC, lambda t: _partitions_denied(t, _TOPIC_DENIED)
)


def _filtered(
    pending: Awaitable[Response], field: str, keep: Callable[[Any], bool]
) -> Awaitable[Response]:
    """The handler's response with `response[field]` cut to the items `keep` allows."""

    async def filtered() -> Response:
        response = await pending
        if isinstance(response, dict):
            response[field] = [item for item in response[field] if keep(item)]
        return response

    return filtered()


# --- per API ------------------------------------------------------------------------------


def _produce(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    if body.transactional_id is not None and not allowed(
        ctx, Operation.WRITE, TXN, body.transactional_id
    ):
        return _done(
            {
                "responses": [
                    {
                        "name": t.name,
                        "partition_responses": [
                            _produce_denied(p, _TXN_DENIED) for p in t.partition_data
                        ],
                    }
                    for t in body.topic_data
                ]
            }
            if body.acks != 0
            else None
        )

    def may_write(topic: Any) -> bool:
        return allowed(ctx, Operation.WRITE, TOPIC, topic.name)

    def may_produce(topic: Any) -> bool:
        # Produce auto-creates here (Kafka's does not): that needs CREATE, as in Metadata.
        exists = ctx.store.get(topic.name) is not None
        return may_write(topic) and (exists or _may_create(ctx, topic.name))

    def refused(topic: Any) -> dict[str, Any]:
        code = _TOPIC_DENIED if not may_write(topic) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return {
            "name": topic.name,
            "partition_responses": [_produce_denied(p, code) for p in topic.partition_data],
        }

    return _per_item(ctx, header, body, inner, "topic_data", "responses", may_produce, refused)


def _may_create(ctx: GatewayContext, name: str) -> bool:
    return _cluster(ctx, Operation.CREATE) or allowed(ctx, Operation.CREATE, TOPIC, name)


def _produce_denied(partition: Any, code: ErrorCode) -> dict[str, Any]:
    return {
        "index": partition.index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
    }


_list_offsets = _each(
    "topics",
    "topics",
    Operation.DESCRIBE,
    TOPIC,
    lambda t: _partitions_denied(t, _TOPIC_DENIED, timestamp=-1, offset=-1, leader_epoch=-1),
)


def _offset_commit(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    if not allowed(ctx, Operation.READ, GROUP, body.group_id):
        return _done({"topics": [_partitions_denied(t, _GROUP_DENIED) for t in body.topics]})
    return _topics_read(ctx, header, body, inner)


def _offset_fetch(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    def denied_partitions(indexes: Iterable[int], code: ErrorCode) -> list[dict[str, Any]]:
        return [
            {
                "partition_index": i,
                "committed_offset": -1,
                "committed_leader_epoch": -1,
                "metadata": "",
                "error_code": code,
            }
            for i in indexes
        ]

    if not allowed(ctx, Operation.DESCRIBE, GROUP, body.group_id):
        return _done(
            {
                "error_code": _GROUP_DENIED,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": denied_partitions(t.partition_indexes, _GROUP_DENIED),
                    }
                    for t in body.topics or ()
                ],
            }
        )
    if body.topics is None:  # every committed partition: only topics it may describe
        return _filtered(
            inner(ctx, header, body),
            "topics",
            lambda t: allowed(ctx, Operation.DESCRIBE, TOPIC, t["name"]),
        )
    return _per_item(
        ctx,
        header,
        body,
        inner,
        "topics",
        "topics",
        lambda t: allowed(ctx, Operation.DESCRIBE, TOPIC, t.name),
        lambda t: {
            "name": t.name,
            "partitions": denied_partitions(t.partition_indexes, _TOPIC_DENIED),
        },
    )


def _find_coordinator(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    key_type = getattr(body, "key_type", 0)
    rtype, code = (TXN, _TXN_DENIED) if key_type == 1 else (GROUP, _GROUP_DENIED)
    return _whole(
        allowed(ctx, Operation.DESCRIBE, rtype, body.key),
        inner,
        ctx,
        header,
        body,
        lambda: {"error_code": code, "error_message": None, "node_id": -1, "host": "", "port": -1},
    )


def _group_member(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group."""
    return _whole(
        allowed(ctx, Operation.READ, GROUP, body.group_id),
        inner,
        ctx,
        header,
        body,
        lambda: {"error_code": _GROUP_DENIED, "generation_id": -1, "member_id": ""},
    )


_describe_each_group = _each(
    "groups",
    "groups",
    Operation.DESCRIBE,
    GROUP,
    lambda g: {
        "error_code": _GROUP_DENIED,
        "group_id": g,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": NOT_REQUESTED,
    },
    name=_as_is,
)


def _describe_groups(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    wanted = getattr(body, "include_authorized_operations", False)
    pending = _describe_each_group(ctx, header, body, inner)

    async def with_operations() -> Response:
        response = await pending
        if wanted and isinstance(response, dict):
            for group in response["groups"]:
                if group["error_code"] == ErrorCode.NONE:
                    ops = authorized_operations(ctx, GROUP, group["group_id"])
                    group["authorized_operations"] = (
                        ops if ops is not None else group["authorized_operations"]
                    )
        return response

    return with_operations()


def _list_groups(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    if _cluster(ctx, Operation.DESCRIBE):
        return inner(ctx, header, body)
    return _filtered(
        inner(ctx, header, body),
        "groups",
        lambda g: allowed(ctx, Operation.DESCRIBE, GROUP, g["group_id"]),
    )


def _create_topics(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    on_cluster = _cluster(ctx, Operation.CREATE)
    return _per_item(
        ctx,
        header,
        body,
        inner,
        "topics",
        "topics",
        lambda t: on_cluster or allowed(ctx, Operation.CREATE, TOPIC, t.name),
        lambda t: _topic_denied(
            t.name, num_partitions=-1, replication_factor=-1, topic_config_error_code=_TOPIC_DENIED
        ),
    )


def _delete_topics(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    if hasattr(body, "topic_names"):  # v1-5
        return _per_item(
            ctx,
            header,
            body,
            inner,
            "topic_names",
            "responses",
            lambda name: allowed(ctx, Operation.DELETE, TOPIC, name),
            _topic_denied,
        )

    def name_of(item: Any) -> str | None:
        if item.name is not None:
            return str(item.name)
        topic = ctx.store.topic_by_id(item.topic_id) if item.topic_id is not None else None
        return None if topic is None else topic.name  # unknown ids: the handler answers

    return _per_item(
        ctx,
        header,
        body,
        inner,
        "topics",
        "responses",
        lambda t: (n := name_of(t)) is None or allowed(ctx, Operation.DELETE, TOPIC, n),
        lambda t: _topic_denied(t.name, topic_id=t.topic_id),
    )


_delete_records = _each(
    "topics",
    "topics",
    Operation.DELETE,
    TOPIC,
    lambda t: _partitions_denied(t, _TOPIC_DENIED, low_watermark=-1),
)


def _init_producer_id(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    txn = body.transactional_id
    if txn is not None:
        ok, code = allowed(ctx, Operation.WRITE, TXN, txn), _TXN_DENIED
    else:
        # Kafka 3.x (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
        authorizer = ctx.authorizer
        ok = _cluster(ctx, Operation.IDEMPOTENT_WRITE) or (
            authorizer is not None
            and authorizer.may_any(PRINCIPAL.get(), CLIENT_HOST.get(), Operation.WRITE, TOPIC)
        )
        code = _CLUSTER_DENIED
    return _whole(
        ok,
        inner,
        ctx,
        header,
        body,
        lambda: {"error_code": code, "producer_id": -1, "producer_epoch": -1},
    )


# --- transactions (gateway/handlers/txn.py): WRITE on the transactional id, as Kafka --------


def _txn_id_denied(ctx: GatewayContext, transactional_id: str) -> bool:
    return not allowed(ctx, Operation.WRITE, TXN, transactional_id)


def _add_partitions_to_txn(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    topics = body.v3_and_below_topics
    txn_denied = _txn_id_denied(ctx, body.v3_and_below_transactional_id)
    denied = {t.name for t in topics if not allowed(ctx, Operation.WRITE, TOPIC, t.name)}
    if not txn_denied and not denied:
        return inner(ctx, header, body)

    def code(name: str) -> int:
        if txn_denied:
            return _TXN_DENIED
        # Kafka answers the whole request: the topics it may write are not attempted.
        return _TOPIC_DENIED if name in denied else ErrorCode.OPERATION_NOT_ATTEMPTED

    return _done(
        {
            "results_by_topic_v3_and_below": [
                {
                    "name": t.name,
                    "results_by_partition": [
                        {"partition_index": i, "partition_error_code": code(t.name)}
                        for i in t.partitions
                    ],
                }
                for t in topics
            ]
        }
    )


def _add_offsets_to_txn(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    if _txn_id_denied(ctx, body.transactional_id):
        return _done({"error_code": _TXN_DENIED})
    if not allowed(ctx, Operation.READ, GROUP, body.group_id):
        return _done({"error_code": _GROUP_DENIED})
    return inner(ctx, header, body)


def _end_txn(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    return _whole(
        not _txn_id_denied(ctx, body.transactional_id),
        inner,
        ctx,
        header,
        body,
        lambda: {"error_code": _TXN_DENIED},
    )


def _txn_offset_commit(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    def every(code: int) -> Awaitable[Response]:
        return _done({"topics": [_partitions_denied(t, code) for t in body.topics]})

    if _txn_id_denied(ctx, body.transactional_id):
        return every(_TXN_DENIED)
    if not allowed(ctx, Operation.READ, GROUP, body.group_id):
        return every(_GROUP_DENIED)
    return _topics_read(ctx, header, body, inner)


_describe_transactions = _each(
    "transactional_ids",
    "transaction_states",
    Operation.DESCRIBE,
    TXN,
    lambda txn_id: no_transaction_state(txn_id, _TXN_DENIED),
    name=_as_is,
)


def _list_transactions(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    # Kafka lists only the ids the principal may describe
    return _filtered(
        inner(ctx, header, body),
        "transaction_states",
        lambda t: allowed(ctx, Operation.DESCRIBE, TXN, t["transactional_id"]),
    )


_RESOURCE_TOPIC, _RESOURCE_BROKER, _RESOURCE_BROKER_LOGGER = 2, 4, 8


def _config_resource_allowed(ctx: GatewayContext, op: Operation) -> Callable[[Any], bool]:
    def check(resource: Any) -> bool:
        if resource.resource_type == _RESOURCE_TOPIC:
            return allowed(ctx, op, TOPIC, resource.resource_name)
        if resource.resource_type in (_RESOURCE_BROKER, _RESOURCE_BROKER_LOGGER):
            return _cluster(ctx, op)
        return True  # the handler refuses other types

    return check


def _config_denied(resource: Any, **extra: Any) -> dict[str, Any]:
    code = _TOPIC_DENIED if resource.resource_type == _RESOURCE_TOPIC else _CLUSTER_DENIED
    return {
        "error_code": code,
        "error_message": _DENIED_MESSAGE,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        **extra,
    }


_describe_configs = _per_item_guard(
    "resources",
    "results",
    lambda ctx: _config_resource_allowed(ctx, Operation.DESCRIBE_CONFIGS),
    lambda r: _config_denied(r, configs=[]),
)


_alter_configs = _per_item_guard(
    "resources",
    "responses",
    lambda ctx: _config_resource_allowed(ctx, Operation.ALTER_CONFIGS),
    _config_denied,
)


def _topic_denied(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "error_code": _TOPIC_DENIED, "error_message": _DENIED_MESSAGE, **extra}


_create_partitions = _each(
    "topics", "results", Operation.ALTER, TOPIC, lambda t: _topic_denied(t.name)
)
_delete_groups = _each(
    "groups_names",
    "results",
    Operation.DELETE,
    GROUP,
    lambda g: {"group_id": g, "error_code": _GROUP_DENIED},
    name=_as_is,
)


def _offset_delete(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    if not allowed(ctx, Operation.DELETE, GROUP, body.group_id):
        return _done({"error_code": _GROUP_DENIED})
    return _topics_read(ctx, header, body, inner)


def _describe_cluster(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    if not _cluster(ctx, Operation.DESCRIBE):
        return _done(
            {
                "error_code": _CLUSTER_DENIED,
                "error_message": "Cluster authorization failed.",
                "cluster_id": "",
                "controller_id": -1,
                "brokers": [],
                "cluster_authorized_operations": NOT_REQUESTED,
            }
        )
    pending = inner(ctx, header, body)

    async def with_operations() -> Response:
        response = await pending
        if isinstance(response, dict) and body.include_cluster_authorized_operations:
            ops = authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
            if ops is not None:
                response["cluster_authorized_operations"] = ops
        return response

    return with_operations()


def _on_cluster(op: Operation, refusal: Callable[[Any], dict[str, Any]]) -> Guard:
    def guard(
        ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
    ) -> Awaitable[Response]:
        return _whole(_cluster(ctx, op), inner, ctx, header, body, lambda: refusal(body))

    return guard


_MESSAGE = "Cluster authorization failed."
_CLUSTER_ERROR = {"error_code": _CLUSTER_DENIED, "error_message": _MESSAGE}

GUARDS: dict[int, Guard] = {
    # SCRAM credentials are cluster resources in Kafka: DESCRIBE and ALTER on the cluster.
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _on_cluster(
        Operation.DESCRIBE, lambda b: dict(_CLUSTER_ERROR, results=[])
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _on_cluster(
        Operation.ALTER,
        lambda b: {
            "results": [
                dict(_CLUSTER_ERROR, user=u.name)
                for u in (*(b.deletions or ()), *(b.upsertions or ()))
            ]
        },
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
    ApiKey.END_TXN: _end_txn,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
    ApiKey.PRODUCE: _produce,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group_member,
    ApiKey.HEARTBEAT: _group_member,
    ApiKey.LEAVE_GROUP: _group_member,
    ApiKey.SYNC_GROUP: _group_member,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _on_cluster(
        Operation.ALTER,
        lambda b: {
            "results": [
                {
                    "topic_name": t.name,
                    "partitions": [
                        {"partition_index": p, "error_code": _CLUSTER_DENIED} for p in t.partitions
                    ],
                }
                for d in b.dirs
                for t in d.topics
            ]
        },
    ),
    ApiKey.DESCRIBE_LOG_DIRS: _on_cluster(
        Operation.DESCRIBE, lambda b: {"error_code": _CLUSTER_DENIED, "results": []}
    ),
    ApiKey.ELECT_LEADERS: _on_cluster(
        Operation.ALTER, lambda b: {"error_code": _CLUSTER_DENIED, "replica_election_results": []}
    ),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _on_cluster(
        Operation.ALTER, lambda b: dict(_CLUSTER_ERROR, responses=[])
    ),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _on_cluster(
        Operation.DESCRIBE, lambda b: dict(_CLUSTER_ERROR, topics=[])
    ),
    ApiKey.DESCRIBE_ACLS: _on_cluster(
        Operation.DESCRIBE, lambda b: dict(_CLUSTER_ERROR, resources=[])
    ),
    ApiKey.CREATE_ACLS: _on_cluster(
        Operation.ALTER, lambda b: {"results": [dict(_CLUSTER_ERROR) for _ in b.creations]}
    ),
    ApiKey.DELETE_ACLS: _on_cluster(
        Operation.ALTER,
        lambda b: {"filter_results": [dict(_CLUSTER_ERROR, matching_acls=[]) for _ in b.filters]},
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _on_cluster(
        Operation.DESCRIBE_CONFIGS, lambda b: dict(_CLUSTER_ERROR, entries=None)
    ),
    ApiKey.ALTER_CLIENT_QUOTAS: _on_cluster(
        Operation.ALTER_CONFIGS,
        lambda b: {
            "entries": [
                dict(
                    _CLUSTER_ERROR,
                    entity=[
                        {"entity_type": e.entity_type, "entity_name": e.entity_name}
                        for e in entry.entity
                    ],
                )
                for entry in b.entries
            ]
        },
    ),
}
# Checked inside their handlers: Fetch (per topic, READ), Metadata (DESCRIBE, CREATE for
# auto-creation, KIP-430 fields). ApiVersions needs nothing.
# Fetch and Metadata check inside their handlers; the SASL exchange comes before any
# principal exists (gateway/security/sasl.py refuses everything else until it is done).
UNGUARDED = {
    ApiKey.FETCH,
    ApiKey.METADATA,
    ApiKey.API_VERSIONS,
    ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE,
}


def _with_guard(inner: Handler, guard: Guard) -> Handler:
    def handler(ctx: GatewayContext, header: RequestHeader, body: Any) -> Awaitable[Response]:
        return guard(ctx, header, body, inner)

    return handler


def _with_test_principal(inner: Handler) -> Handler:
    def handler(ctx: GatewayContext, header: RequestHeader, body: Any) -> Awaitable[Response]:
        # Set in the connection's context (the reader calls handlers synchronously), so it
        # stays for the connection, as an authenticated principal would.
        if PRINCIPAL.get() == _ANONYMOUS and header.client_id:
            PRINCIPAL.set(f"User:{header.client_id}")
        return inner(ctx, header, body)

    return handler


def guarded(handlers: dict[int, Handler], test_principal: bool = False) -> dict[int, Handler]:
    """The handlers with their ACL guards (for a gateway with an authorizer)."""
    missing = set(handlers) - set(GUARDS) - UNGUARDED
    assert not missing, f"APIs without an authorization rule: {sorted(missing)}"
    table = {
        key: _with_guard(h, GUARDS[key]) if key in GUARDS else h for key, h in handlers.items()
    }
    if test_principal:
        log.warning(
            "%s=1: TEST ONLY, principals are taken from client ids (User:<client.id>) on "
            "unauthenticated connections",
            TEST_PRINCIPAL_ENV,
        )
        table = {key: _with_test_principal(h) for key, h in table.items()}
    return table
