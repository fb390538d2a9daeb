"""Who may use the admin endpoint: HTTP Basic with the gateway's SASL users, then its ACLs.

When the gateway has a SASL listener, every admin request needs `Authorization: Basic`
with a user and password that pass as a SASL/PLAIN login would (the same stored SCRAM
credentials). The principal is then `User:NAME`; with an authorizer, reads need DESCRIBE
(on the topic, or on the cluster for gateway-wide figures) and changes need ALTER on the
cluster or on the topic. Without SASL listeners the endpoint is open, as the Kafka
listeners are (`serve` refuses a non-loopback address then, unless told otherwise).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request

from core.acl.authorizer import Authorizer
from core.acl.model import CLUSTER_NAME, Operation, ResourceType
from core.credentials import Credentials
from gateway.security.sasl import check_password

ANONYMOUS = "User:ANONYMOUS"
CHALLENGE = {"WWW-Authenticate": 'Basic realm="streamgate", charset="UTF-8"'}


@dataclass(slots=True)
class AdminSecurity:
    """`required`: Basic authentication is needed; `authorizer`: the gateway's ACLs (the
    same object the Kafka listeners use, so ACL changes apply here at once)."""

    credentials: Credentials | None = None
    required: bool = False
    authorizer: Authorizer | None = None

    async def principal(self, request: Request) -> str:
        """The request's principal; HTTPException 401 when credentials are needed and
        missing or wrong."""
        if not self.required:
            return ANONYMOUS
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token:
            raise HTTPException(401, "authentication required (HTTP Basic)", CHALLENGE)
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise HTTPException(401, "malformed Basic credentials", CHALLENGE) from None
        if not sep or not await check_password(self.credentials, user, password):
            raise HTTPException(401, "invalid username or password", CHALLENGE)
        return f"User:{user}"

    def allowed(
        self, request: Request, principal: str, operation: Operation, rtype: ResourceType, name: str
    ) -> bool:
        if self.authorizer is None:
            return True
        host = request.client.host if request.client else ""
        return self.authorizer.authorize(principal, host, operation, rtype, name)

    async def require(
        self, request: Request, operation: Operation, topic: str | None = None
    ) -> str:
        """Authenticate, then check `operation` on the topic (or the cluster when `topic` is
        None). ALTER on a topic is also granted by ALTER on the cluster. HTTPException 403
        when refused; returns the principal."""
        principal = await self.principal(request)
        checks = [(ResourceType.CLUSTER, CLUSTER_NAME)]
        if topic is not None:
            checks = [(ResourceType.TOPIC, topic)]
            if operation == Operation.ALTER:
                checks.append((ResourceType.CLUSTER, CLUSTER_NAME))
        if not any(self.allowed(request, principal, operation, *check) for check in checks):
            target = "the cluster" if topic is None else f"topic {topic!r}"
            raise HTTPException(403, f"{principal} may not {operation.name} {target}")
        return principal

    def may_describe(self, request: Request, principal: str, topic: str) -> bool:
        return self.allowed(request, principal, Operation.DESCRIBE, ResourceType.TOPIC, topic)
