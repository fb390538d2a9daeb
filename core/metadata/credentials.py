"""SCRAM credentials (core/credentials.py: the SCRAM side) in the metadata database, on
either engine: the queries once, a connection of their own (`streamgate users` opens the
store while a node may be serving from the same database)."""

from __future__ import annotations

from typing import Protocol

from .dialect import Engine
from .records import CredentialInfo, CredentialKey, ScramCredential, UserCredential
from .schema import migrate


class CredentialStore(Protocol):
    """Blocking credential storage (one call at a time)."""

    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...
    def apply(
        self, upserts: list[UserCredential], deletions: list[CredentialKey]
    ) -> set[CredentialKey]: ...
    def describe(self, users: list[str] | None) -> dict[str, list[CredentialInfo]]: ...
    def close(self) -> None: ...


class SqlCredentialStore:
    """The scram_credentials table, one row per (user, mechanism)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        with engine.transaction() as db:
            migrate(db)  # a no-op when the metadata store migrated already

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self.engine.read() as db:
            row = db.one(
                "SELECT salt, iterations, stored_key, server_key FROM scram_credentials "
                "WHERE username = ? AND mechanism = ?",
                (user, mechanism),
            )
        if row is None:
            return None
        return ScramCredential(bytes(row[0]), int(row[1]), bytes(row[2]), bytes(row[3]))

    def apply(
        self, upserts: list[UserCredential], deletions: list[CredentialKey]
    ) -> set[CredentialKey]:
        """Apply changes in one transaction; return the deletions that found nothing."""
        missing: set[CredentialKey] = set()
        with self.engine.transaction() as db:
            for key in deletions:
                cursor = db.execute(
                    "DELETE FROM scram_credentials WHERE username = ? AND mechanism = ?",
                    (key.user, key.mechanism),
                )
                if cursor.rowcount == 0:
                    missing.add(key)
            for user, mechanism, c in upserts:
                db.execute(
                    "INSERT INTO scram_credentials VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (username, mechanism) DO UPDATE SET salt = excluded.salt, "
                    "iterations = excluded.iterations, stored_key = excluded.stored_key, "
                    "server_key = excluded.server_key",
                    (user, mechanism, c.salt, c.iterations, c.stored_key, c.server_key),
                )
        return missing

    def describe(self, users: list[str] | None) -> dict[str, list[CredentialInfo]]:
        """user -> its mechanisms and iterations, for the given users (None: every user)."""
        with self.engine.read() as db:
            rows = db.all(
                "SELECT username, mechanism, iterations FROM scram_credentials "
                "ORDER BY username, mechanism"
            )
        result: dict[str, list[CredentialInfo]] = {}
        for user, mechanism, iterations in rows:
            if users is None or user in users:
                result.setdefault(user, []).append(CredentialInfo(mechanism, int(iterations)))
        return result

    def close(self) -> None:
        self.engine.close()
