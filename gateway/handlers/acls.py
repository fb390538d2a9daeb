"""DescribeAcls, CreateAcls, DeleteAcls: answered as a Kafka broker without an authorizer.

streamgate has no authentication or authorization, so like Kafka with no `authorizer.class.name`
it answers every ACL request with SECURITY_DISABLED and a message, instead of closing the
connection (UNSUPPORTED_VERSION), so `kafka-acls.sh` and admin clients report why.
"""

from __future__ import annotations

from typing import Any

from core.errors import ErrorCode
from gateway.protocol.codec import RequestHeader

from .context import GatewayContext

MESSAGE = "No Authorizer is configured on the broker: streamgate has no ACLs"


async def describe_acls(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    return {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": MESSAGE, "resources": []}


async def create_acls(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    result = {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": MESSAGE}
    return {"results": [dict(result) for _ in body.creations]}


async def delete_acls(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    result = {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": MESSAGE}
    return {"filter_results": [dict(result, matching_acls=[]) for _ in body.filters]}
