"""DescribeAcls, CreateAcls, DeleteAcls over the authorizer (core/acl).

Without `--authorizer` the gateway answers like Kafka with no `authorizer.class.name`:
SECURITY_DISABLED with a message, so `kafka-acls.sh` and admin clients report why.
The cluster-level permission these APIs need (DESCRIBE / ALTER on the cluster) is checked by
the ACL guard (gateway/authorization) before they run.
"""

from __future__ import annotations

import logging
from typing import Any

from core.acl.model import (
    AclBinding,
    AclFilter,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from core.api import StoreError
from core.errors import ErrorCode
from kafkawire.codec import RequestHeader

from .context import GatewayContext

log = logging.getLogger(__name__)

MESSAGE = "No Authorizer is configured on the broker (start streamgate with --authorizer)"


def _enum(kind: type[Any], value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN: refused by validation with a message


def _filter(item: Any) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, item.resource_type_filter),
        item.resource_name_filter,
        _enum(PatternType, item.pattern_type_filter),
        item.principal_filter,
        item.host_filter,
        _enum(Operation, item.operation),
        _enum(Permission, item.permission_type),
    )


async def describe_acls(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    if ctx.authorizer is None:
        return {
            "error_code": ErrorCode.SECURITY_DISABLED,
            "error_message": MESSAGE,
            "resources": [],
        }
    acl_filter = _filter(body)
    try:
        acl_filter.validate()
    except InvalidAcl as exc:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc), "resources": []}
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for acl in ctx.authorizer.matching(acl_filter):
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        resources.setdefault(key, []).append(
            {
                "principal": acl.principal,
                "host": acl.host,
                "operation": acl.operation,
                "permission_type": acl.permission,
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()
        ],
    }


async def create_acls(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    if ctx.authorizer is None:
        result = {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": MESSAGE}
        return {"results": [dict(result) for _ in body.creations]}
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for item in body.creations:
        binding = AclBinding(
            _enum(ResourceType, item.resource_type),
            item.resource_name,
            _enum(PatternType, item.resource_pattern_type),
            item.principal,
            item.host,
            _enum(Operation, item.operation),
            _enum(Permission, item.permission_type),
        )
        try:
            binding.validate()
        except InvalidAcl as exc:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)})
            continue
        valid.append(binding)
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
    try:
        await ctx.authorizer.create(valid)
    except StoreError as exc:
        log.error("storing ACLs failed: %s", exc)
        for result in results:
            if result["error_code"] == ErrorCode.NONE:
                result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc))
    else:
        for acl in valid:
            log.info("ACL added: %s", _describe(acl))
    return {"results": results}


async def delete_acls(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    if ctx.authorizer is None:
        result = {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": MESSAGE}
        return {"filter_results": [dict(result, matching_acls=[]) for _ in body.filters]}
    filters = [_filter(item) for item in body.filters]
    invalid: dict[int, str] = {}
    for index, acl_filter in enumerate(filters):
        try:
            acl_filter.validate()
        except InvalidAcl as exc:
            invalid[index] = str(exc)
    usable = [f for i, f in enumerate(filters) if i not in invalid]
    try:
        removed = iter(await ctx.authorizer.delete(usable))
    except StoreError as exc:
        log.error("deleting ACLs failed: %s", exc)
        failed = {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": str(exc)}
        return {"filter_results": [dict(failed, matching_acls=[]) for _ in filters]}
    results = []
    for index in range(len(filters)):
        if index in invalid:
            results.append(
                {
                    "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": invalid[index],
                    "matching_acls": [],
                }
            )
            continue
        matched = next(removed)
        for acl in matched:
            log.info("ACL removed: %s", _describe(acl))
        results.append(
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": ErrorCode.NONE,
                        "error_message": None,
                        "resource_type": acl.resource_type,
                        "resource_name": acl.resource_name,
                        "pattern_type": acl.pattern_type,
                        "principal": acl.principal,
                        "host": acl.host,
                        "operation": acl.operation,
                        "permission_type": acl.permission,
                    }
                    for acl in matched
                ],
            }
        )
    return {"filter_results": results}


def _describe(acl: AclBinding) -> str:
    return (
        f"{acl.permission.name} {acl.principal} from {acl.host} {acl.operation.name} on "
        f"{acl.resource_type.name}:{acl.pattern_type.name}:{acl.resource_name}"
    )
