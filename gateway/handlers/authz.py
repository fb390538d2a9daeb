"""The authorization questions handlers ask: the connection's principal and host against
the authorizer (everything is allowed when the gateway runs without one)."""

from __future__ import annotations

from core.acl.model import Operation, ResourceType

from .context import CLIENT_HOST, PRINCIPAL, GatewayContext

NOT_REQUESTED = -(2**31)  # KIP-430's "authorized operations omitted"


def allowed(ctx: GatewayContext, operation: Operation, rtype: ResourceType, name: str) -> bool:
    authorizer = ctx.authorizer
    if authorizer is None:
        return True
    return authorizer.authorize(PRINCIPAL.get(), CLIENT_HOST.get(), operation, rtype, name)


def authorized_operations(ctx: GatewayContext, rtype: ResourceType, name: str) -> int | None:
    """The principal's KIP-430 bit field; None without an authorizer (callers keep theirs)."""
    authorizer = ctx.authorizer
    if authorizer is None:
        return None
    return authorizer.authorized_operations(PRINCIPAL.get(), CLIENT_HOST.get(), rtype, name)
