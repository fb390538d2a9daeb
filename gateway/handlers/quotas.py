"""DescribeClientQuotas, AlterClientQuotas: user / client-id quotas (core/acl/quotas.py).

`kafka-configs.sh --entity-type users --entity-name alice --alter --add-config
producer_byte_rate=1024` ends here. Enforcement (throttle_time_ms on Produce and Fetch) is in
the quota guard (gateway/limits).
"""

from __future__ import annotations

import logging
from typing import Any

from core.acl.quotas import ENTITY_TYPES, Entity, InvalidQuota, make_entity
from core.api import StoreError
from core.errors import ErrorCode
from kafkawire.codec import RequestHeader

from .context import GatewayContext

log = logging.getLogger(__name__)

_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2


def _matches(entity: Entity, components: Any, strict: bool) -> bool:
    names = dict(entity)
    for component in components:
        if component.entity_type not in names:
            return False
        name = names[component.entity_type]
        if component.match_type == _EXACT and name != component.match:
            return False
        if component.match_type == _DEFAULT and name is not None:
            return False
        if component.match_type == _SPECIFIED and name is None:
            return False
    return not strict or len(names) == len(components)


async def describe_client_quotas(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    for component in body.components:
        problem = None
        if component.entity_type not in ENTITY_TYPES:
            problem = f"unsupported entity type {component.entity_type!r}"
        elif component.match_type not in (_EXACT, _DEFAULT, _SPECIFIED):
            problem = f"unknown match type {component.match_type}"
        if problem:
            return {
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": problem,
                "entries": None,
            }
    quotas = ctx.quotas.quotas if ctx.quotas is not None else {}
    entries = [
        {
            "entity": [{"entity_type": k, "entity_name": n} for k, n in entity],
            "values": [{"key": key, "value": value} for key, value in sorted(values.items())],
        }
        for entity, values in sorted(quotas.items(), key=lambda item: repr(item[0]))
        if _matches(entity, body.components, body.strict)
    ]
    return {"error_code": ErrorCode.NONE, "error_message": None, "entries": entries}


async def alter_client_quotas(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    results = []
    changes = []
    for entry in body.entries:
        entity_out = [
            {"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity
        ]
        result: dict[str, Any] = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "entity": entity_out,
        }
        results.append(result)
        parts = {e.entity_type: e.entity_name for e in entry.entity}
        if len(parts) != len(entry.entity):
            result.update(
                error_code=ErrorCode.INVALID_REQUEST, error_message="duplicate entity type"
            )
            continue
        entity = make_entity(parts)
        ops: dict[str, float | None] = {
            op.key: None if op.remove else float(op.value) for op in entry.ops
        }
        if ctx.quotas is None:
            result.update(error_code=ErrorCode.INVALID_REQUEST, error_message="quotas are off")
            continue
        try:
            await ctx.quotas.alter([(entity, ops)], body.validate_only)
        except InvalidQuota as exc:
            result.update(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
            continue
        except StoreError as exc:
            log.error("storing client quotas failed: %s", exc)
            result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc))
            continue
        changes.append((entity, ops))
    if not body.validate_only:
        for entity, ops in changes:
            log.info("client quota %s: %s", dict(entity), ops)
    return {"entries": results}
