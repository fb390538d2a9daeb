"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topic, broker and group
resources.

Topics (resource type 2) have the configs of core.configs.topic; the broker (type 4, named
by its node id, or "" for the cluster-wide default) has the gateway's settings and the
dynamic broker configs of core/configs/broker.py, which AlterConfigs (the resource's whole
set) and IncrementalAlterConfigs change. Every resource gets its own error code; one bad
resource never fails the others. Alterations are validated completely before anything is
written, and `validate_only` writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core.api import StoreError, Topic, TopicError
from core.configs.broker import DEFAULT_RESOURCE, altered_set, replaced_set
from core.configs.topic import apply_alter_ops, describe_topic_configs
from core.configs.topic_defs import ConfigEntry, ConfigError
from core.errors import ErrorCode
from gateway.errors import log_store_error
from kafkawire.codec import RequestHeader

from .broker_configs import described_broker_configs, dynamic_topic_defaults, static_broker_values
from .context import GatewayContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32  # per-group configs (core/configs/group.py)


class _ResourceError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def config_entry(entry: ConfigEntry, synonyms: bool, documentation: bool) -> dict[str, Any]:
    """A DescribeConfigs result entry (fields a version lacks are dropped by the codec)."""
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": int(entry.source),
        "is_sensitive": entry.is_sensitive,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": int(s.source)} for s in entry.synonyms
        ]
        if synonyms
        else [],
        "config_type": int(entry.type),
        "documentation": (entry.doc or None) if documentation else None,
    }


def topic_config_entries(ctx: GatewayContext, configs: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config of a topic whose own configs are `configs`."""
    return describe_topic_configs(
        configs, static_broker_values(ctx), dynamic_broker_configs=dynamic_topic_defaults(ctx)
    )


# --- DescribeConfigs ---------------------------------------------------------------------


async def describe_configs(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for resource in body.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        # Like Kafka, null and empty key lists both ask for every config.
        keys = resource.configuration_keys or None
        try:
            entries = _describe_resource(ctx, resource.resource_type, resource.resource_name, keys)
        except _ResourceError as exc:
            result["error_code"] = exc.error_code
            result["error_message"] = str(exc)
        else:
            result["configs"] = [config_entry(e, synonyms, documentation) for e in entries]
        results.append(result)
    return {"results": results}


def _describe_resource(
    ctx: GatewayContext, resource_type: int, name: str, keys: Iterable[str] | None
) -> list[ConfigEntry]:
    if resource_type == RESOURCE_TOPIC:
        stream = ctx.store.get(name)
        if stream is None:
            raise _ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        return describe_topic_configs(
            stream.configs, static_broker_values(ctx), keys, dynamic_topic_defaults(ctx)
        )
    if resource_type == RESOURCE_BROKER:
        if name != DEFAULT_RESOURCE:
            _check_broker_name(ctx, name, describe=True)
        return described_broker_configs(ctx, name, keys)
    if resource_type == RESOURCE_GROUP and ctx.group_configs is not None:
        if not name:
            raise _ResourceError(ErrorCode.INVALID_REQUEST, "a group id is needed")
        return ctx.group_configs.describe(name, keys)
    raise _ResourceError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {resource_type}")


def _check_broker_name(ctx: GatewayContext, name: str, describe: bool) -> None:
    """A broker resource names this node (Kafka's messages, which differ by API)."""
    try:
        node_id = int(name)
    except ValueError:
        what = "Broker id" if describe else "Node id"
        raise _ResourceError(
            ErrorCode.INVALID_REQUEST, f"{what} must be an integer, but it is: {name}"
        ) from None
    if node_id != ctx.node_id:
        expected = f"{ctx.node_id} or empty string" if describe else str(ctx.node_id)
        raise _ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {expected}, but received {name}",
        )


# --- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------


async def alter_configs(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    """Replace each topic's (or broker resource's) whole set of configs with the given ones."""
    responses = []
    for resource in body.resources:
        if resource.resource_type == RESOURCE_BROKER:
            responses.append(await _alter_broker(ctx, resource, False, body.validate_only))
            continue

        def replacement(stream: Topic, resource: Any = resource) -> dict[str, str | None]:
            names = [c.name for c in resource.configs]
            if len(set(names)) != len(names):
                raise ConfigError("duplicate config names", ErrorCode.INVALID_REQUEST)
            return {c.name: c.value for c in resource.configs}

        responses.append(_alter_resource(ctx, resource, replacement, body.validate_only))
    return {"responses": responses}


async def incremental_alter_configs(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    """SET / DELETE / APPEND / SUBTRACT individual configs of each topic or broker resource."""
    responses = []
    for resource in body.resources:
        if resource.resource_type == RESOURCE_BROKER:
            responses.append(await _alter_broker(ctx, resource, True, body.validate_only))
            continue
        if resource.resource_type == RESOURCE_GROUP and ctx.group_configs is not None:
            responses.append(await _alter_group(ctx, resource, body.validate_only))
            continue

        def altered(stream: Topic, resource: Any = resource) -> dict[str, str]:
            ops = [(c.name, c.config_operation, c.value) for c in resource.configs]
            return apply_alter_ops(stream.configs, ops, stream.partition_count)

        responses.append(_alter_resource(ctx, resource, altered, body.validate_only))
    return {"responses": responses}


def _alter_resource(
    ctx: GatewayContext,
    resource: Any,
    new_configs: Callable[[Topic], Mapping[str, str | None]],
    validate_only: bool,
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }
    name = resource.resource_name
    try:
        if resource.resource_type != RESOURCE_TOPIC:
            raise _ResourceError(
                ErrorCode.INVALID_REQUEST, f"unsupported resource type {resource.resource_type}"
            )
        stream = ctx.store.get(name)
        if stream is None:
            raise _ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        ctx.store.update_topic_configs(name, new_configs(stream), validate_only)
    except (_ResourceError, ConfigError, TopicError) as exc:
        response["error_code"] = exc.error_code
        response["error_message"] = str(exc)
    return response


async def _alter_broker(
    ctx: GatewayContext, resource: Any, incremental: bool, validate_only: bool
) -> dict[str, Any]:
    """Alter the dynamic configs of this node ("1") or of the cluster default (""):
    IncrementalAlterConfigs operations, or AlterConfigs' replacement of the whole set."""
    response: dict[str, Any] = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }
    name = resource.resource_name
    try:
        if name != DEFAULT_RESOURCE:
            _check_broker_name(ctx, name, describe=False)
        dynamic = ctx.dynamic_configs
        if dynamic is None:
            raise _ResourceError(
                ErrorCode.INVALID_REQUEST,
                "broker configs are read-only: they are `streamgate serve` options",
            )
        if incremental:
            ops = [(c.name, c.config_operation, c.value) for c in resource.configs]
            configs = altered_set(dynamic.configs[name], ops)
        else:
            configs = replaced_set((c.name, c.value) for c in resource.configs)
        await dynamic.replace(name, configs, validate_only)
    except (_ResourceError, ConfigError) as exc:
        response["error_code"] = exc.error_code
        response["error_message"] = str(exc)
    except StoreError as exc:  # the metadata store failed the write: nothing changed
        response["error_code"] = log_store_error("broker configs", exc)
        response["error_message"] = str(exc)
    return response


async def _alter_group(ctx: GatewayContext, resource: Any, validate_only: bool) -> dict[str, Any]:
    """IncrementalAlterConfigs on one group id's configs."""
    assert ctx.group_configs is not None
    response: dict[str, Any] = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
    }
    try:
        if not resource.resource_name:
            raise _ResourceError(ErrorCode.INVALID_REQUEST, "a group id is needed")
        ops = [(c.name, c.config_operation, c.value) for c in resource.configs]
        await ctx.group_configs.alter(resource.resource_name, ops, validate_only)
    except (_ResourceError, ConfigError) as exc:
        response["error_code"] = exc.error_code
        response["error_message"] = str(exc)
    except StoreError as exc:  # the metadata store failed the write: nothing changed
        response["error_code"] = log_store_error("group configs", exc)
        response["error_message"] = str(exc)
    return response
