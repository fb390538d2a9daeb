"""Durable tier-1 writes in native threads that never take the GIL (`durable_writer.c`).

The flush threads (`flush_threads.py`) are Python threads: each needs the GIL to pick up a
write and again when its fsync returns, and while the event loop runs Python it waits up to
the switch interval for it each time. The compiled writer's threads hold no GIL at all: the
loop hands them the buffers' addresses and waits on an eventfd they bump. Built with the
hot path (`python -m hotpath.build`); without the build, or with STREAMGATE_PURE_PYTHON=1,
`NATIVE` is None and the segment logs use the flush threads.
"""

from __future__ import annotations

import os
from types import ModuleType

from hotpath import extension_usable


def _load() -> ModuleType | None:
    if not extension_usable("core.segments._durable_writer"):
        return None
    try:
        from core.segments import _durable_writer  # type: ignore[attr-defined]
    except ImportError:
        return None
    module: ModuleType = _durable_writer
    return module


NATIVE: ModuleType | None = _load()


class WakeFd:
    """One eventfd a task waits on for its writes, one at a time; close it when done."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
