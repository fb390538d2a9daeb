"""SaslHandshake/SaslAuthenticate once a connection is past authentication, and the SCRAM
credential APIs (Describe/AlterUserScramCredentials) that kafka-configs.sh uses.

The SASL exchange itself runs in the server before any other request (gateway/security/
sasl.py); a handshake reaching a handler came on a connection that needs none or already
did it, which Kafka answers with ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from core.credentials import (
    MAX_ITERATIONS,
    MECHANISM_BY_CODE,
    MECHANISMS,
    MIN_ITERATIONS,
    CredentialInfo,
    CredentialKey,
    UserCredential,
    credential_from_salted,
)
from core.errors import ErrorCode
from kafkawire.codec import RequestHeader

from .context import GatewayContext

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


async def sasl_handshake(ctx: GatewayContext, header: RequestHeader, body: Any) -> dict[str, Any]:
    return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}


async def sasl_authenticate(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    return {
        "error_code": ILLEGAL_SASL_STATE,
        "error_message": "SaslAuthenticate request received after successful authentication "
        "or on a listener without SASL",
        "auth_bytes": b"",
    }


async def describe_user_scram_credentials(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    if ctx.credentials is None:
        return {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": "no store"}
    names = None if not body.users else [user.name for user in body.users]
    found = await ctx.credentials.describe(names)
    results = []
    if names is None:
        for user, infos in found.items():
            results.append(_described(user, infos))
    else:
        counts = Counter(names)
        for name in dict.fromkeys(names):
            if counts[name] > 1:
                results.append(
                    _user_error(
                        name,
                        DUPLICATE_RESOURCE,
                        "Cannot describe SCRAM credentials for the same user twice in a "
                        "single request",
                    )
                )
            elif name not in found:
                results.append(
                    _user_error(
                        name,
                        RESOURCE_NOT_FOUND,
                        "Attempt to describe a user credential that does not exist",
                    )
                )
            else:
                results.append(_described(name, found[name]))
    return {"error_code": ErrorCode.NONE, "error_message": None, "results": results}


def _described(user: str, infos: list[CredentialInfo]) -> dict[str, Any]:
    return {
        "user": user,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "credential_infos": [
            {"mechanism": MECHANISMS[info.mechanism][0], "iterations": info.iterations}
            for info in infos
        ],
    }


def _user_error(user: str, code: int, message: str) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message}


async def alter_user_scram_credentials(
    ctx: GatewayContext, header: RequestHeader, body: Any
) -> dict[str, Any]:
    """Each user's changes apply all together or not at all, as Kafka does; the request
    carries salted passwords only."""
    errors: dict[str, tuple[int, str]] = {}
    order: list[str] = []
    seen: Counter[tuple[str, int]] = Counter()
    for item in (*body.deletions, *body.upsertions):
        order.append(item.name)
        seen[(item.name, item.mechanism)] += 1

    def fail(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    upserts: dict[str, list[UserCredential]] = defaultdict(list)
    deletions: dict[str, list[CredentialKey]] = defaultdict(list)
    for item in (*body.deletions, *body.upsertions):
        mechanism = MECHANISM_BY_CODE.get(item.mechanism)
        if not item.name:
            fail(item.name, UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism is None:
            fail(item.name, UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif seen[(item.name, item.mechanism)] > 1:
            fail(
                item.name,
                DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
        elif not hasattr(item, "iterations"):  # a deletion
            deletions[item.name].append(CredentialKey(item.name, mechanism))
        elif item.iterations < MIN_ITERATIONS:
            fail(item.name, UNACCEPTABLE_CREDENTIAL, f"Too few iterations: {item.iterations}")
        elif item.iterations > MAX_ITERATIONS:
            fail(item.name, UNACCEPTABLE_CREDENTIAL, f"Too many iterations: {item.iterations}")
        elif not item.salt or not item.salted_password:
            fail(item.name, UNACCEPTABLE_CREDENTIAL, "Salt and salted password are required")
        else:
            credential = credential_from_salted(
                mechanism, bytes(item.salt), item.iterations, bytes(item.salted_password)
            )
            upserts[item.name].append(UserCredential(item.name, mechanism, credential))
    if ctx.credentials is not None:
        existing = await ctx.credentials.describe(list(deletions)) if deletions else {}
        for user, keys in deletions.items():
            stored = {info.mechanism for info in existing.get(user, [])}
            if any(key.mechanism not in stored for key in keys):
                fail(
                    user,
                    RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                )
        ok_users = [user for user in dict.fromkeys(order) if user not in errors]
        await ctx.credentials.apply(
            [u for user in ok_users for u in upserts[user]],
            [d for user in ok_users for d in deletions[user]],
        )
    results = []
    for user in dict.fromkeys(order):
        code, message = errors.get(user, (ErrorCode.NONE, None))
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"results": results}
