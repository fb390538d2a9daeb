"""Checks shared by the client modules."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from compat.matrix.model import CellContext, expect

T = TypeVar("T")

LARGE_VALUE_BYTES = 900_000
LARGE_RECORDS = 3


def expect_values(ctx: CellContext, got: Iterable[bytes | None], n: int, start: int = 0) -> None:
    """`got` holds exactly the values start..n-1 of this cell, each once."""
    values = list(got)
    want = {ctx.value(i) for i in range(start, n)}
    seen = set(values)
    expect(len(values) == len(seen), f"{len(values) - len(seen)} duplicate records read back")
    missing = want - seen
    extra = seen - want
    expect(not missing, f"{len(missing)} of {len(want)} records not read back")
    expect(not extra, f"{len(extra)} unexpected records read back")


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Call `check` until it answers something truthy, and return that."""
    deadline = time.monotonic() + timeout
    last = check()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
        last = check()
    return last


def expect_split(assignments: Sequence[set[int]], partitions: int, label: str) -> str:
    """Members' partition sets are disjoint and cover every partition."""
    union: set[int] = set()
    for a in assignments:
        expect(not (union & a), f"{label}: partitions {sorted(union & a)} assigned twice")
        union |= a
    expect(
        union == set(range(partitions)),
        f"{label}: assigned {sorted(union)}, want 0..{partitions - 1}",
    )
    expect(all(assignments), f"{label}: a member got nothing: {[sorted(a) for a in assignments]}")
    return f"{label}: " + " | ".join(str(sorted(a)) for a in assignments)


def in_order_per_partition(pairs: Iterable[tuple[int | None, bytes | None]]) -> bool:
    """Values (partition, value) appear in increasing order within each partition."""
    last: dict[int | None, bytes] = {}
    for partition, value in pairs:
        assert value is not None
        if partition in last and value <= last[partition]:
            return False
        last[partition] = value
    return True


def broker_api_keys(bootstrap: str, timeout: float = 10.0) -> set[int]:
    """The API keys the broker at `bootstrap` advertises (a raw ApiVersions v0), for cells
    whose feature only some brokers have (share groups: Kafka 4.1+)."""
    host, port = bootstrap.rsplit(":", 1)
    request = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0, no client id
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        body = _recv(sock, size)
    _correlation, _error, count = struct.unpack_from(">ihi", body, 0)
    return {struct.unpack_from(">h", body, 10 + 6 * i)[0] for i in range(count)}


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise AssertionError("connection closed during ApiVersions")
        data += chunk
    return data
