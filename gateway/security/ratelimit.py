"""Log lines a hostile client could trigger at will, rate limited so it cannot flood the log."""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    """At most one line per `interval_s`; the next line that gets through says how many
    were suppressed meanwhile."""

    def __init__(self, logger: logging.Logger, interval_s: float = 1.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._next = 0.0
        self._suppressed = 0

    def log(self, level: int, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        self._next = now + self.interval_s
        if self._suppressed:
            message += " (%d similar lines suppressed)"
            args = (*args, self._suppressed)
            self._suppressed = 0
        self.logger.log(level, message, *args)

    def warning(self, message: str, *args: object) -> None:
        self.log(logging.WARNING, message, *args)

    def info(self, message: str, *args: object) -> None:
        self.log(logging.INFO, message, *args)
