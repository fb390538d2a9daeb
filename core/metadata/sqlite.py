"""The embedded engine: a SQLite file (metadata.db in the data folder) with WAL journaling
and synchronous=FULL. One connection per store, shared by the metadata worker thread and
the rare event-loop calls under a lock; every write transaction is BEGIN IMMEDIATE, so
SQLite's single writer needs no row locks."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from .credentials import SqlCredentialStore
from .dialect import Dialect, Engine, Handle
from .shared import SqlMetadataStore

SQLITE = Dialect(
    name="sqlite",
    placeholder="?",
    slots={
        "greatest": "MAX",
        "for_update": "",
        "BIGINT": "INTEGER",
        "BOOL": "INTEGER",
        "BLOB": "BLOB",
        "DOUBLE": "REAL",
        "SERIAL_PK": "INTEGER PRIMARY KEY AUTOINCREMENT",
    },
    unique_violation=(sqlite3.IntegrityError,),
    columns_query="SELECT name FROM pragma_table_info(?)",
)


class SQLiteEngine(Engine):
    dialect = SQLITE

    def __init__(self, path: str, timeout: float = 5.0) -> None:
        super().__init__(
            sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=timeout)
        )
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA foreign_keys=ON")

    @contextmanager
    def transaction(self) -> Iterator[Handle]:
        """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on an exception), holding the lock: two
        transactions must never interleave on the one connection."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.handle
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            try:
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise


class SQLiteMetadataStore(SqlMetadataStore):
    """The embedded default: `MetadataStore` on the SQLite file at `path`."""

    def __init__(self, path: str) -> None:
        super().__init__(SQLiteEngine(path))


class SQLiteCredentialStore(SqlCredentialStore):
    """SCRAM credentials in metadata.db, on a connection of their own."""

    def __init__(self, path: str) -> None:
        super().__init__(SQLiteEngine(path, timeout=30))
