"""SCRAM credentials (RFC 5802 / 7677) in the metadata database, never a password.

Each row keeps what a SCRAM server needs, as Kafka's ScramCredential does: the salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
ServerKey = HMAC(SaltedPassword, "Server Key"). Kafka's AlterUserScramCredentials sends the
salted password, so the server never sees a plain one; `streamgate users add` salts locally.

`SQLiteCredentialStore` is blocking (its own connection to metadata.db, a table of its
own); `Credentials` runs it through the store's metadata worker so the event loop never
waits on SQLite.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# Kafka's ScramMechanism type codes and hash functions.
MECHANISMS: dict[str, tuple[int, str]] = {
    "SCRAM-SHA-256": (1, "sha256"),
    "SCRAM-SHA-512": (2, "sha512"),
}
MECHANISM_BY_CODE = {code: name for name, (code, _) in MECHANISMS.items()}
MIN_ITERATIONS = 4096  # Kafka's bounds for both mechanisms
MAX_ITERATIONS = 16384

_SCHEMA = """
CREATE TABLE IF NOT EXISTS scram_credentials (
    user TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    salt BLOB NOT NULL,
    iterations INTEGER NOT NULL,
    stored_key BLOB NOT NULL,
    server_key BLOB NOT NULL,
    PRIMARY KEY (user, mechanism)
)
"""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


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


class CredentialStore(Protocol):
    """Blocking credential storage: SQLite here, PostgreSQL in credentials_pg.py."""

    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...
    def apply(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> set[tuple[str, str]]: ...
    def describe(self, users: list[str] | None) -> dict[str, list[tuple[str, int]]]: ...
    def close(self) -> None: ...


class SQLiteCredentialStore:
    """The scram_credentials table of metadata.db (blocking; one call at a time)."""

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            row = self._db.execute(
                "SELECT salt, iterations, stored_key, server_key FROM scram_credentials"
                " WHERE user = ? AND mechanism = ?",
                (user, mechanism),
            ).fetchone()
        return None if row is None else ScramCredential(bytes(row[0]), row[1], row[2], row[3])

    def apply(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> set[tuple[str, str]]:
        """Apply changes in one transaction; return the deletions that found nothing."""
        missing: set[tuple[str, str]] = set()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for user, mechanism in deletions:
                    cursor = self._db.execute(
                        "DELETE FROM scram_credentials WHERE user = ? AND mechanism = ?",
                        (user, mechanism),
                    )
                    if cursor.rowcount == 0:
                        missing.add((user, mechanism))
                for user, mechanism, c in upserts:
                    self._db.execute(
                        "INSERT OR REPLACE INTO scram_credentials VALUES (?, ?, ?, ?, ?, ?)",
                        (user, mechanism, c.salt, c.iterations, c.stored_key, c.server_key),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return missing

    def describe(self, users: list[str] | None) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)], for the given users (None: every user)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT user, mechanism, iterations FROM scram_credentials ORDER BY user, mechanism"
            ).fetchall()
        result: dict[str, list[tuple[str, int]]] = {}
        for user, mechanism, iterations in rows:
            if users is None or user in users:
                result.setdefault(user, []).append((mechanism, iterations))
        return result

    def close(self) -> None:
        with self._lock:
            self._db.close()


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
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> set[tuple[str, str]]:
        result: set[tuple[str, str]] = await self._offload(self.backend.apply, upserts, deletions)
        return result

    async def describe(self, users: list[str] | None) -> dict[str, list[tuple[str, int]]]:
        result: dict[str, list[tuple[str, int]]] = await self._offload(self.backend.describe, users)
        return result
