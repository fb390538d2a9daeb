"""Test-only crash injection: `STREAMGATE_TEST_CRASH_AT=<point>` makes the process exit
abruptly (os._exit(137), like SIGKILL: no flush, no cleanup) when it reaches that point."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

CRASH_POINTS = ("scale-before-commit", "scale-after-commit")


def crash_point(name: str) -> None:
    """Exit the process here if the environment asks for a crash at `name`."""
    if os.environ.get("STREAMGATE_TEST_CRASH_AT") == name:
        log.critical("test crash injected at %s", name)
        logging.shutdown()
        os._exit(137)
