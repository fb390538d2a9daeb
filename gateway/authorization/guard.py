"""The authorizer on every API, as a layer around the handlers: each API's rule
(`rules.RULES`) applied by one guard, and the few APIs whose checks a row cannot say.

A guard runs synchronously where the handler would (so pipelined Produce keeps its order),
drops what the principal may not touch from the request, calls the handler with the rest,
and puts the denied items back into the response in request order, each with Kafka's error.
Requests refused as a whole are answered without calling the handler. Fetch and Metadata
check inside their handlers (their responses have their own encoders).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from core.acl.model import CLUSTER_NAME, Operation
from core.errors import ErrorCode
from gateway.handlers.authz import allowed, authorized_operations
from gateway.handlers.context import CLIENT_HOST, PRINCIPAL, GatewayContext, Handler, Response
from kafkawire.apis import ApiKey
from kafkawire.codec import RequestHeader
from kafkawire.error_response import Items, error_items, error_response

from .rules import CLUSTER, DENIED, GROUP, RULES, TOPIC, TOPIC_WRITE, TXN, TXN_WRITE, Check, Rule

log = logging.getLogger(__name__)

Guard = Callable[[GatewayContext, RequestHeader, Any, Handler], Awaitable[Response]]
_ANONYMOUS = "User:ANONYMOUS"

# Test-only: take the principal from the client id on unauthenticated connections, so ACL
# tests can run before SASL exists. Never set this in production.
TEST_PRINCIPAL_ENV = "STREAMGATE_TEST_PRINCIPAL_FROM_CLIENT_ID"


def test_principal_enabled() -> bool:
    return os.environ.get(TEST_PRINCIPAL_ENV) == "1"


def _done(value: Response) -> Awaitable[Response]:
    async def ready() -> Response:
        return value

    return ready()


def _then(
    pending: Awaitable[Response], change: Callable[[dict[str, Any]], Any]
) -> Awaitable[Response]:
    """The handler's response, changed in place by `change` when it is a dict."""

    async def changed() -> Response:
        response = await pending
        if isinstance(response, dict):
            change(response)
        return response

    return changed()


def denied(ctx: GatewayContext, check: Check, source: Any) -> int | None:
    """The error when the principal lacks `check` on what `source` names, else None."""
    rtype = check.resource if not callable(check.resource) else check.resource(source)
    if rtype is None:
        return None
    name = check.name
    if callable(name):
        named = name(ctx, source)
    elif name:
        named = _named(source, name)
    else:
        named = source  # the item is the name (a group id, a transactional id)
    if named is None or allowed(ctx, check.op, rtype, str(named)):
        return None
    return DENIED[rtype]


def _named(item: Any, attribute: str) -> Any:
    """A request item's attribute, or a handler's response item's field."""
    return item.get(attribute) if isinstance(item, dict) else getattr(item, attribute)


def apply(
    rule: Rule, ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """`inner` with `rule` enforced (see rules.py)."""
    for check in rule.whole:
        if (code := denied(ctx, check, body)) is not None:
            pairing = rule.items if rule.whole_items else None
            return _done(
                error_response(
                    header.api_key, header.api_version, body, code, rule.message, pairing
                )
            )
    each, items = rule.each, rule.items
    if each is None or items is None:
        return inner(ctx, header, body)
    if rule.unless is not None and allowed(ctx, rule.unless, CLUSTER, CLUSTER_NAME):
        return inner(ctx, header, body)
    if _requested(body, items) is None:  # a listing: only what the principal may see

        def cut(response: dict[str, Any]) -> None:
            response[items.response] = [
                item for item in response[items.response] if denied(ctx, each, item) is None
            ]

        return _then(inner(ctx, header, body), cut)
    return per_item(
        ctx, header, body, inner, items, lambda item: denied(ctx, each, item), rule.message
    )


def _requested(body: Any, items: Items) -> tuple[str, Any] | None:
    """The request collection of `items` the body has (versions differ), and its items."""
    field = next((f for f in items.request if hasattr(body, f)), None)
    if field is None or getattr(body, field) is None:
        return None
    return field, getattr(body, field)


def per_item(
    ctx: GatewayContext,
    header: RequestHeader,
    body: Any,
    inner: Handler,
    items: Items,
    code_of: Callable[[Any], int | None],
    message: str | None = None,
) -> Awaitable[Response]:
    """Call `inner` with the request items `code_of` finds no error for; answer the others
    in place, in request order, with their error."""
    requested = _requested(body, items)
    if requested is None:
        return inner(ctx, header, body)
    field, request_items = requested
    codes = [code_of(item) for item in request_items]
    if all(code is None for code in codes):
        return inner(ctx, header, body)
    kept = tuple(item for item, code in zip(request_items, codes, strict=True) if code is None)
    pending = inner(ctx, header, dataclasses.replace(body, **{field: kept}))

    def splice(response: dict[str, Any]) -> None:
        answered = iter(response.get(items.response) or [])
        response[items.response] = [
            next(answered) if code is None else _answer(header, items, item, code, message)
            for item, code in zip(request_items, codes, strict=True)
        ]

    return _then(pending, splice)


def _answer(
    header: RequestHeader, items: Items, item: Any, code: int, message: str | None
) -> dict[str, Any]:
    return error_items(header.api_key, header.api_version, items, [item], code, message)[0]


# --- the special cases ----------------------------------------------------------------

_PRODUCED = Items(
    ("topic_data",), "responses", nested=Items(("partition_data",), "partition_responses")
)


def _produce(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """WRITE on the transactional id (a denied one refuses every topic), then on each topic;
    a topic that does not exist yet also needs CREATE, as Produce auto-creates here (Kafka's
    does not): without it UNKNOWN_TOPIC_OR_PARTITION, as Metadata answers. acks=0: no
    answer at all."""
    txn = body.transactional_id
    if txn is not None and not allowed(ctx, Operation.WRITE, TXN, txn):
        refused = error_response(
            header.api_key, header.api_version, body, DENIED[TXN], None, _PRODUCED
        )
        return _done(refused if body.acks != 0 else None)

    def code(topic: Any) -> int | None:
        if not allowed(ctx, Operation.WRITE, TOPIC, topic.name):
            return DENIED[TOPIC]
        if ctx.store.get(topic.name) is None and not _may_create(ctx, topic.name):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None

    return per_item(ctx, header, body, inner, _PRODUCED, code)


def _may_create(ctx: GatewayContext, name: str) -> bool:
    return allowed(ctx, Operation.CREATE, CLUSTER, CLUSTER_NAME) or allowed(
        ctx, Operation.CREATE, TOPIC, name
    )


def _init_producer_id(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """WRITE on the transactional id; without one (an idempotent producer), Kafka 3.x
    (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on some topic."""
    if body.transactional_id is not None:
        return apply(Rule(whole=(TXN_WRITE,)), ctx, header, body, inner)
    authorizer = ctx.authorizer
    if allowed(ctx, Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or (
        authorizer is not None
        and authorizer.may_any(PRINCIPAL.get(), CLIENT_HOST.get(), Operation.WRITE, TOPIC)
    ):
        return inner(ctx, header, body)
    return _done(error_response(header.api_key, header.api_version, body, DENIED[CLUSTER]))


_TXN_TOPICS = Items(
    ("v3_and_below_topics",),
    "results_by_topic_v3_and_below",
    nested=Items(("partitions",), "results_by_partition"),
)


def _add_partitions_to_txn(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """WRITE on the transactional id and on every topic, all or nothing: Kafka answers the
    whole request, the topics it may write OPERATION_NOT_ATTEMPTED. v4+ is the brokers'
    batched form: CLUSTER_ACTION on the cluster, as Kafka asks."""
    if header.api_version >= 4:
        if allowed(ctx, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
            return inner(ctx, header, body)
        return _done(
            {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results_by_transaction": []}
        )
    topics = body.v3_and_below_topics
    codes: list[int]
    if not allowed(ctx, Operation.WRITE, TXN, body.v3_and_below_transactional_id):
        codes = [DENIED[TXN] for _ in topics]
    else:
        found = [denied(ctx, TOPIC_WRITE, t) for t in topics]
        if all(code is None for code in found):
            return inner(ctx, header, body)
        codes = [ErrorCode.OPERATION_NOT_ATTEMPTED if c is None else c for c in found]
    return _done(
        {
            _TXN_TOPICS.response: [
                _answer(header, _TXN_TOPICS, topic, code, None)
                for topic, code in zip(topics, codes, strict=True)
            ]
        }
    )


def _after(inner: Handler, change: Callable[[Any, dict[str, Any]], None]) -> Handler:
    """`inner` with its answer changed by `change(body, response)`."""

    def handler(ctx: GatewayContext, header: RequestHeader, body: Any) -> Awaitable[Response]:
        return _then(inner(ctx, header, body), lambda response: change(body, response))

    return handler


def _describe_groups(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """The rule, then KIP-430: the principal's operations on each group described."""

    def operations(body: Any, response: dict[str, Any]) -> None:
        if getattr(body, "include_authorized_operations", False):
            for group in response["groups"]:
                if group["error_code"] != ErrorCode.NONE:
                    continue
                ops = authorized_operations(ctx, GROUP, group["group_id"])
                if ops is not None:
                    group["authorized_operations"] = ops

    rule = RULES[ApiKey.DESCRIBE_GROUPS]
    return apply(rule, ctx, header, body, _after(inner, operations))


def _offset_fetch(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """Before v8 the rule. v8+ (several groups): a group the principal may not DESCRIBE is
    answered GROUP_AUTHORIZATION_FAILED and not fetched; in the others, topics it may not
    DESCRIBE are left out of an "all topics" answer and refused per partition otherwise."""
    if header.api_version < 8:
        return apply(RULES[ApiKey.OFFSET_FETCH], ctx, header, body, inner)
    refused = {
        g.group_id for g in body.groups if not allowed(ctx, Operation.DESCRIBE, GROUP, g.group_id)
    }
    kept = tuple(g for g in body.groups if g.group_id not in refused)

    async def guarded_fetch() -> Response:
        response: Any = (
            await inner(ctx, header, dataclasses.replace(body, groups=kept)) if kept else None
        )
        answered = {g["group_id"]: g for g in (response or {}).get("groups", [])}
        for group in answered.values():
            topics = []
            for topic in group["topics"]:
                if allowed(ctx, Operation.DESCRIBE, TOPIC, topic["name"]):
                    topics.append(topic)
                    continue
                for part in topic["partitions"]:
                    part.update(
                        committed_offset=-1,
                        metadata="",
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    )
                topics.append(topic)
            group["topics"] = topics
        requested = {g.group_id: g for g in body.groups}
        for group in answered.values():  # "all topics": drop what may not be seen
            if requested[group["group_id"]].topics is None:
                group["topics"] = [
                    t for t in group["topics"] if allowed(ctx, Operation.DESCRIBE, TOPIC, t["name"])
                ]
        return {
            "groups": [
                answered.get(g.group_id)
                or {
                    "group_id": g.group_id,
                    "topics": [],
                    "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                }
                for g in body.groups
            ]
        }

    return guarded_fetch()


def _find_coordinator(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """Before v4 the rule. v4+ (several keys): each key the principal may not DESCRIBE (a
    group, or a transactional id) is answered with the authorization error, not looked up."""
    if header.api_version < 4:
        return apply(RULES[ApiKey.FIND_COORDINATOR], ctx, header, body, inner)
    rtype = TXN if body.key_type == 1 else GROUP
    refused = {k for k in body.coordinator_keys if not allowed(ctx, Operation.DESCRIBE, rtype, k)}
    kept = tuple(k for k in body.coordinator_keys if k not in refused)

    async def guarded_find() -> Response:
        response: Any = (
            await inner(ctx, header, dataclasses.replace(body, coordinator_keys=kept))
            if kept
            else None
        )
        answered = {c["key"]: c for c in (response or {}).get("coordinators", [])}
        return {
            "coordinators": [
                answered.get(key)
                or {
                    "key": key,
                    "node_id": -1,
                    "host": "",
                    "port": -1,
                    "error_code": DENIED[rtype],
                    "error_message": None,
                }
                for key in body.coordinator_keys
            ]
        }

    return guarded_find()


def _describe_cluster(
    ctx: GatewayContext, header: RequestHeader, body: Any, inner: Handler
) -> Awaitable[Response]:
    """The rule, then KIP-430: the principal's operations on the cluster."""

    def operations(body: Any, response: dict[str, Any]) -> None:
        if body.include_cluster_authorized_operations:
            ops = authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
            if ops is not None:
                response["cluster_authorized_operations"] = ops

    rule = RULES[ApiKey.DESCRIBE_CLUSTER]
    return apply(rule, ctx, header, body, _after(inner, operations))


GUARDS: dict[int, Guard] = {key: partial(apply, rule) for key, rule in RULES.items()} | {
    ApiKey.PRODUCE: _produce,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
}
# Fetch, Metadata and DescribeTopicPartitions check inside their handlers (per topic, READ;
# DESCRIBE, CREATE for auto-creation, KIP-430 fields); ApiVersions needs nothing; the SASL
# exchange comes before any principal exists (gateway/security/sasl.py refuses everything
# else until it is done).
UNGUARDED = {
    ApiKey.FETCH,
    ApiKey.METADATA,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS,
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
