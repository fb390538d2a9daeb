"""Test-only crash injection: `STREAMGATE_TEST_CRASH_AT=<point>` makes the process exit
abruptly (os._exit(137), like SIGKILL: no flush, no cleanup) when it reaches that point."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

CRASH_POINTS = (
    "scale-before-commit",
    "scale-after-commit",
    "compaction-after-put",
    "compaction-after-commit",
    # --wal object (core/wal/writer.py, core/tiering.py): an object written, not recorded;
    # recorded, not acknowledged; its data also in a committed chunk; its rows forgotten,
    # the object not deleted yet
    "wal-after-put",
    "wal-after-record",
    "chunk-after-commit",
    "fold-after-forget",
)


def crash_point(name: str) -> None:
    """Exit the process here if the environment asks for a crash at `name`."""
    if os.environ.get("STREAMGATE_TEST_CRASH_AT") == name:
        log.critical("test crash injected at %s", name)
        logging.shutdown()
        os._exit(137)
