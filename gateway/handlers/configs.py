"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topic and broker resources.

Topics (resource type 2) have the configs of core.topic_config; the broker (type 4, named
by its node id) has the gateway's settings, all read-only. Every resource gets its own error
code; one bad resource never fails the others. Alterations are validated completely before
anything is written, and `validate_only` writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core.api import Topic, TopicError
from core.errors import ErrorCode
from core.topic_config import ConfigEntry, ConfigError, apply_alter_ops, describe_topic_configs
from gateway.protocol.codec import RequestHeader

from .broker_configs import broker_configs, static_broker_values
from .context import GatewayContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


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
        "documentation": entry.doc if documentation else None,
    }


def topic_config_entries(ctx: GatewayContext, configs: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config of a topic whose own configs are `configs`."""
    return describe_topic_configs(configs, static_broker_values(ctx))


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
        return describe_topic_configs(stream.configs, static_broker_values(ctx), keys)
    if resource_type == RESOURCE_BROKER:
        if name == "":
            return []  # cluster-wide dynamic broker defaults: streamgate has none
        _check_broker_name(ctx, name)
        entries = broker_configs(ctx)
        if keys is None:
            return entries
        wanted = set(keys)
        return [e for e in entries if e.name in wanted]
    raise _ResourceError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {resource_type}")


def _check_broker_name(ctx: GatewayContext, name: str) -> None:
    try:
        node_id = int(name)
    except ValueError:
        node_id = None
    if node_id != ctx.node_id:
        raise _ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"unexpected broker id {name!r}: this gateway is node {ctx.node_id}",
        )


# --- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------


async def alter_configs(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    """Replace each topic's whole set of configs with the given ones."""
    responses = []
    for resource in body.resources:

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
    """SET / DELETE / APPEND / SUBTRACT individual configs of each topic."""
    responses = []
    for resource in body.resources:

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
        if resource.resource_type == RESOURCE_BROKER:
            raise _ResourceError(
                ErrorCode.INVALID_REQUEST,
                "broker configs are read-only: they are `streamgate serve` options",
            )
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
