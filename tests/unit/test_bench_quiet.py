"""The side-by-side starts each run with every server quiet (`compat.bench.kvs.wait_quiet`):
it waits out a process that is still busy, and gives up after its limit on one that never
stops."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, cast

from compat.bench.kvs import Target, wait_quiet


@contextmanager
def process(busy_s: float) -> Iterator[Target]:
    """A stand-in server: spins a core for `busy_s` (forever when negative), then sleeps."""
    code = (
        "import time, sys\n"
        "end = time.monotonic() + float(sys.argv[1])\n"
        "while float(sys.argv[1]) < 0 or time.monotonic() < end:\n"
        "    pass\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(busy_s)])
    try:
        server = cast(Any, SimpleNamespace(pid=proc.pid))
        yield Target("stand-in", server, "")
    finally:
        proc.kill()
        proc.wait()


def test_a_server_still_busy_is_waited_for() -> None:
    with process(1.5) as target:
        started = time.perf_counter()
        quiet = wait_quiet({"stand-in": target}, quick=True)
    assert quiet["quiet"] is True
    assert time.perf_counter() - started >= 1.2
    assert quiet["cpu_s"]["stand-in"] >= 0.8  # the work it left behind, counted apart


def test_a_server_that_never_rests_ends_the_wait_at_the_limit() -> None:
    with process(-1) as target:
        quiet = wait_quiet({"stand-in": target}, quick=True)
    assert quiet["quiet"] is False
    assert 6.0 <= quiet["waited_s"] < 10.0
