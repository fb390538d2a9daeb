"""What differs between the SQL engines, in one small object, and the handle the queries
run through.

Queries are written once, with `?` placeholders and `{name}` slots the dialect fills:
`{greatest}` (SQLite's two-argument MAX, PostgreSQL's GREATEST) and `{for_update}` (row
locks: PostgreSQL's FOR UPDATE; nothing on SQLite, whose BEGIN IMMEDIATE makes every
transaction the one writer). DDL uses the type slots `{BIGINT}`, `{BOOL}`, `{BLOB}`,
`{DOUBLE}` and `{SERIAL_PK}`. Upserts are `INSERT ... ON CONFLICT`, which both engines
speak (SQLite since 3.24), and `RETURNING` (SQLite since 3.35).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Dialect:
    name: str  # "sqlite" or "postgresql"
    placeholder: str  # what `?` becomes
    slots: dict[str, str]  # `{name}` -> text, for queries and DDL alike
    # The engine's error for a duplicate key (a topic or segment created twice).
    unique_violation: tuple[type[Exception], ...]
    # The names of a table's columns: one query with the table name as its parameter.
    columns_query: str
    # Serialises migrations across processes, inside their transaction (None: the
    # transaction itself is exclusive).
    migration_lock: str | None = None
    _rendered: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def render(self, query: str) -> str:
        text = self._rendered.get(query)
        if text is None:
            text = query.format_map(self.slots) if "{" in query else query
            if self.placeholder != "?":
                text = text.replace("?", self.placeholder)
            if len(self._rendered) < 512:  # IN lists vary in length: keep the cache small
                self._rendered[query] = text
        return text


def marks(count: int) -> str:
    """`(?, ?, ...)` for an IN list of `count` values; `(NULL)`, which matches nothing,
    when there are none (an empty list is a syntax error on PostgreSQL)."""
    return "(" + ", ".join("?" * count) + ")" if count else "(NULL)"


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Handle:
    """A connection seen through its dialect: what the shared queries call."""

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self.conn = conn
        self.dialect = dialect

    def execute(self, query: str, params: Sequence[object] = ()) -> Cursor:
        cursor: Cursor = self.conn.execute(self.dialect.render(query), params)
        return cursor

    def executemany(self, query: str, rows: Iterable[Sequence[object]]) -> None:
        self.conn.cursor().executemany(self.dialect.render(query), list(rows))

    def one(self, query: str, params: Sequence[object] = ()) -> Any:
        return self.execute(query, params).fetchone()

    def all(self, query: str, params: Sequence[object] = ()) -> list[Any]:
        return self.execute(query, params).fetchall()

    def columns(self, table: str) -> set[str]:
        return {str(row[0]) for row in self.conn.execute(self.dialect.columns_query, (table,))}


class Engine:
    """One connection of an engine, shared by the metadata worker thread and the rare
    event-loop calls: `read()` and `transaction()` take turns on it under a lock. An
    engine says how it begins and ends a transaction; `transaction()` commits on a normal
    exit and rolls back on an exception."""

    dialect: Dialect

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.handle = Handle(conn, self.dialect)
        self.lock = threading.Lock()

    @contextmanager
    def read(self) -> Iterator[Handle]:
        with self.lock:
            yield self.handle

    def transaction(self) -> AbstractContextManager[Handle]:
        raise NotImplementedError

    def close(self) -> None:
        with self.lock:
            self.conn.close()
