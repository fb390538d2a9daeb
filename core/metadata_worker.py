"""One worker thread for the metadata store's blocking calls (SQLite with fsync).

Every commit on the request path (offsets, chunks, log starts, producer ids, topic
deletes) goes through `MetadataWorker.call`: a limiter of one thread, so calls run one at
a time in the order they were made (trio's limiter is FIFO) and the event loop keeps
serving other connections meanwhile. Callers update their in-memory state right after the
await, with no checkpoint in between, so memory follows the durable order; the thread is
never abandoned on cancellation, so a started commit always finishes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

import trio

from .api import StorageError

T = TypeVar("T")

# The backends' own errors become StorageError (psycopg only when it is installed).
_BACKEND_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, OSError)
try:
    import psycopg

    _BACKEND_ERRORS += (psycopg.Error,)
except ImportError:  # pragma: no cover - the SQLite-only install
    pass


class MetadataWorker:
    def __init__(self) -> None:
        self._limiter = trio.CapacityLimiter(1)

    async def call(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` in the worker thread; StorageError if the database failed it."""
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        except _BACKEND_ERRORS as exc:
            raise StorageError(f"metadata store: {exc}") from exc
