"""Say what is wrong, once: repeated failures of background work as a few log lines.

A loop that retries (a metadata sync, a write-ahead commit, a lease renewal) would log a
line per attempt while its database or store is away. `FailureLog.failed` logs the first
failure of a kind (what failed and the exception's type) at once, then at most one line per
`every_s` with the count so far; `succeeded` logs one line when that work runs again. The
exception's text is folded onto one line (psycopg's messages span several).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class FailureLog:
    def __init__(
        self,
        prefix: str,
        logger: logging.Logger,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.counts: dict[str, int] = {}  # kind -> failures so far (reported in /tier)
        self._log = logger
        self._every_s = every_s
        self._clock = clock
        self._said: dict[str, float] = {}  # kind -> when last logged
        self._failing: set[str] = set()  # what has failed since it last worked

    def failed(self, what: str, exc: BaseException, then: str = "retrying") -> int:
        """Count a failure of `what`; log it if due. Returns the count of its kind."""
        kind = f"{what}: {type(exc).__name__}"
        count = self.counts[kind] = self.counts.get(kind, 0) + 1
        self._failing.add(what)
        now = self._clock()
        if now - self._said.get(kind, -1e18) >= self._every_s:
            self._said[kind] = now
            text = " ".join(str(exc).split()) or type(exc).__name__
            self._log.warning("%s%s failed %d times, %s: %s", self.prefix, what, count, then, text)
        return count

    def succeeded(self, what: str) -> None:
        """`what` worked: one line if it had been failing."""
        if what in self._failing:
            self._failing.discard(what)
            for kind in [k for k in self._said if k.startswith(f"{what}: ")]:
                del self._said[kind]
            self._log.warning("%s%s works again", self.prefix, what)
