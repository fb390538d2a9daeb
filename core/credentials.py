"""SCRAM credentials (RFC 5802 / 7677) in the metadata database, never a password.

Each row keeps what a SCRAM server needs, as Kafka's ScramCredential does: the salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
ServerKey = HMAC(SaltedPassword, "Server Key"). Kafka's AlterUserScramCredentials sends the
salted password, so the server never sees a plain one; `streamgate users add` salts locally.

The rows are kept by the metadata layer (`core.metadata`: `CredentialStore`, blocking, on
SQLite or PostgreSQL); `Credentials` runs it through the store's metadata worker so the
event loop never waits on the database.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .metadata import (
    CredentialInfo,
    CredentialKey,
    CredentialStore,
    ScramCredential,
    UserCredential,
)

__all__ = [
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MECHANISM_BY_CODE",
    "MIN_ITERATIONS",
    "CredentialInfo",
    "CredentialKey",
    "CredentialStore",
    "Credentials",
    "ScramCredential",
    "UserCredential",
    "credential_from_salted",
    "hash_name",
    "new_credential",
    "password_matches",
    "salt_password",
]

T = TypeVar("T")

# Kafka's ScramMechanism type codes and hash functions.
MECHANISMS: dict[str, tuple[int, str]] = {
    "SCRAM-SHA-256": (1, "sha256"),
    "SCRAM-SHA-512": (2, "sha512"),
}
MECHANISM_BY_CODE = {code: name for name, (code, _) in MECHANISMS.items()}
MIN_ITERATIONS = 4096  # Kafka's bounds for both mechanisms
MAX_ITERATIONS = 16384


def hash_name(mechanism: str) -> str:
    return MECHANISMS[mechanism][1]


def credential_from_salted(
    mechanism: str, salt: bytes, iterations: int, salted_password: bytes
) -> ScramCredential:
    """The stored form of a salted password (RFC 5802 section 3)."""
    name = hash_name(mechanism)
    client_key = hmac.digest(salted_password, b"Client Key", name)
    stored_key = hashlib.new(name, client_key).digest()
    server_key = hmac.digest(salted_password, b"Server Key", name)
    return ScramCredential(salt, iterations, stored_key, server_key)


def salt_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = Hi(password, salt, i), i.e. PBKDF2 (CPU bound: call off the loop)."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode(), salt, iterations)


def new_credential(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    salt = os.urandom(32)
    return credential_from_salted(
        mechanism, salt, iterations, salt_password(mechanism, password, salt, iterations)
    )


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """SASL/PLAIN against a SCRAM credential: derive with the stored salt and compare."""
    salted = salt_password(mechanism, password, credential.salt, credential.iterations)
    candidate = credential_from_salted(mechanism, credential.salt, credential.iterations, salted)
    return hmac.compare_digest(candidate.stored_key, credential.stored_key)


class Credentials:
    """The credential store for the event loop: every call runs in the metadata worker."""

    def __init__(
        self,
        backend: CredentialStore,
        offload: Callable[..., Awaitable[Any]],
    ) -> None:
        self.backend = backend
        self._offload = offload

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        result: ScramCredential | None = await self._offload(self.backend.get, user, mechanism)
        return result

    async def apply(
        self, upserts: list[UserCredential], deletions: list[CredentialKey]
    ) -> set[CredentialKey]:
        result: set[CredentialKey] = await self._offload(self.backend.apply, upserts, deletions)
        return result

    async def describe(self, users: list[str] | None) -> dict[str, list[CredentialInfo]]:
        result: dict[str, list[CredentialInfo]] = await self._offload(self.backend.describe, users)
        return result
