"""SCRAM credentials in the shared PostgreSQL metadata database, so every node of a
cluster sees the same users (the table comes with metadata_pg's schema migrations)."""

from __future__ import annotations

import threading

import psycopg

from .credentials import ScramCredential
from .metadata_pg import migrate


class PostgresCredentialStore:
    """`CredentialStore` on a psycopg connection of its own (blocking; one call at a time)."""

    def __init__(self, url: str) -> None:
        self._db = psycopg.connect(url, autocommit=True)
        self._lock = threading.Lock()
        with self._lock:
            migrate(self._db)  # a no-op when the metadata store migrated already

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            row = self._db.execute(
                "SELECT salt, iterations, stored_key, server_key FROM scram_credentials "
                "WHERE username = %s AND mechanism = %s",
                (user, mechanism),
            ).fetchone()
        if row is None:
            return None
        return ScramCredential(bytes(row[0]), int(row[1]), bytes(row[2]), bytes(row[3]))

    def apply(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> set[tuple[str, str]]:
        """Apply changes in one transaction; return the deletions that found nothing."""
        missing: set[tuple[str, str]] = set()
        with self._lock, self._db.transaction():
            for user, mechanism in deletions:
                cursor = self._db.execute(
                    "DELETE FROM scram_credentials WHERE username = %s AND mechanism = %s",
                    (user, mechanism),
                )
                if cursor.rowcount == 0:
                    missing.add((user, mechanism))
            for user, mechanism, c in upserts:
                self._db.execute(
                    "INSERT INTO scram_credentials VALUES (%s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (username, mechanism) DO UPDATE SET salt = excluded.salt, "
                    "iterations = excluded.iterations, stored_key = excluded.stored_key, "
                    "server_key = excluded.server_key",
                    (user, mechanism, c.salt, c.iterations, c.stored_key, c.server_key),
                )
        return missing

    def describe(self, users: list[str] | None) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)], for the given users (None: every user)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT username, mechanism, iterations FROM scram_credentials "
                "ORDER BY username, mechanism"
            ).fetchall()
        result: dict[str, list[tuple[str, int]]] = {}
        for user, mechanism, iterations in rows:
            if users is None or user in users:
                result.setdefault(user, []).append((mechanism, int(iterations)))
        return result

    def close(self) -> None:
        with self._lock:
            self._db.close()
