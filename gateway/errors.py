"""The one place where the store's errors become Kafka error codes."""

from __future__ import annotations

import logging

from core.api import StorageError, StoreError, StoreUnavailable, TopicError
from core.errors import ErrorCode

log = logging.getLogger(__name__)


def error_code(exc: StoreError) -> int:
    """The Kafka error code to answer a request the store failed with `exc`."""
    if isinstance(exc, TopicError):
        return exc.error_code
    if isinstance(exc, StoreUnavailable | StorageError):
        # KAFKA_STORAGE_ERROR is retriable for Kafka clients: they retry, as they should.
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


def log_store_error(what: str, exc: StoreError) -> int:
    """Log a failed store request (one line) and return its error code."""
    log.log(logging.WARNING if exc.retriable else logging.ERROR, "%s failed: %s", what, exc)
    return error_code(exc)
