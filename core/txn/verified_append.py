"""A transactional append that starts only once the transaction's coordinator agrees.

Several nodes: the transactional id's committed record, which the partition's leader checks
a transactional write against, is in the metadata store, so the check cannot be made
synchronously. Only a producer's first write to a partition in a transaction needs the
check (later ones find its transaction open there, as Kafka's verification guard); that one
is deferred: the record is loaded, the write refused or appended. Writes of one producer to
one partition stay in order: each deferred one starts after the one before it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from ..api import AppendResult, PendingAppend

# How long a deferred write waits for the one before it (which never started if its request
# was dropped unanswered) before it goes on by itself.
_PREVIOUS_WAIT_S = 30.0


class VerifiedAppend:
    """A `PendingAppend` whose append begins after `verify` answers NONE."""

    __slots__ = ("_verify", "_start", "_previous", "_done", "_result")

    def __init__(
        self,
        verify: Callable[[], Awaitable[int]],
        start: Callable[[], AppendResult | PendingAppend],
        previous: trio.Event | None,
        done: trio.Event,
    ) -> None:
        self._verify = verify
        self._start = start
        self._previous = previous
        self._done = done
        self._result: AppendResult | None = None

    def result_now(self) -> AppendResult | None:
        return self._result

    def notify_when_done(self, callback: Callable[[], None]) -> bool:
        return False  # its append starts in `wait`: only a waiting task sees it end

    async def wait(self) -> AppendResult:
        if self._result is not None:
            return self._result
        try:
            if self._previous is not None:
                with trio.move_on_after(_PREVIOUS_WAIT_S):
                    await self._previous.wait()
            error = await self._verify()
            started = AppendResult(error) if error else self._start()
        finally:
            self._done.set()  # the next write of this producer to the partition may go
        result = started if isinstance(started, AppendResult) else await started.wait()
        self._result = result
        return result
