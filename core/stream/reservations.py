"""Offset reservations: the metadata store always knows an upper bound of the offsets a
partition ever acknowledged or made visible (docs/several-nodes.md, "A lost disk").

Each partition has a *reserved* mark in the metadata store (table `offset_reservations`,
only ever raised). An append whose end is above the partition's committed mark is neither
acknowledged nor made visible until the mark is raised above it (`append.on_durable`
defers it; `release_deferred` lets it go). Marks are raised in blocks, by one task in the
store's nursery, through the metadata worker thread: when an append passes the middle of
the current block (`Partition.reserve_at`) the next block is asked for, so acks almost
never wait. A block is the larger of `MIN_BLOCK` offsets and about `BLOCK_S` seconds of the
partition's rate since its last raise (at most `MAX_BLOCK`).

On open (core/stream/recovery.py), a partition whose local log is missing (lost disk,
removed files) and whose recovered end is below its mark has lost the offsets in between,
some of which may have been acknowledged: they are never handed out again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..failure_log import FailureLog
from ..partition import UNRESERVED, Partition
from ..shared_ints import shared
from .append import fail_deferred, release_deferred

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger(__name__)

MIN_BLOCK = 10_000
MAX_BLOCK = 10_000_000
BLOCK_S = 2.0
RETRY_S = 0.5

Call = Callable[..., Awaitable[Any]]


def block_for(rate_per_s: float) -> int:
    """Offsets to reserve at once for a partition appending `rate_per_s` offsets a second."""
    return int(min(MAX_BLOCK, max(MIN_BLOCK, rate_per_s * BLOCK_S)))


def initial_reserve_at(mark: int) -> int:
    """Where a partition loaded with reservation `mark` asks for the next block."""
    return mark - MIN_BLOCK // 2


class Reservations:
    """The store's reservation raiser. `call` runs a blocking metadata call off the event
    loop (the metadata worker)."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self._wanted: dict[int, tuple[Stream, Partition]] = {}  # by id(partition)
        self._wake = trio.Event()
        self.raises = 0  # committed raise transactions (tests, metrics)
        self.failures = FailureLog("", log, every_s=10.0)

    def request(self, stream: Stream, partition: Partition) -> None:
        """Ask for the partition's next block (on the loop; cheap, idempotent)."""
        partition.reserve_at = UNRESERVED  # asked once until the raise is committed
        self._wanted[id(partition)] = (stream, partition)
        self._wake.set()

    def plan(self, stream: Stream, partition: Partition, now: float) -> tuple[int, int]:
        """(new mark, block) for a partition: a block past its next offset."""
        # the rate since the partition's last raise (kept on the partition: a dict entry
        # per partition here cost ~200 bytes each, for every partition ever written)
        rate = 0.0
        if partition.raised_at >= 0 and now > partition.raised_at:
            rate = (partition.next_offset - partition.raised_offset) / (now - partition.raised_at)
        partition.raised_at, partition.raised_offset = now, partition.next_offset
        block = block_for(rate)
        current = partition.reserved if partition.reserved < UNRESERVED else 0
        return max(current, partition.next_offset) + block, block

    async def run(self) -> None:
        """Raise the marks asked for, one transaction per topic per round, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            wanted, self._wanted = self._wanted, {}
            by_stream: dict[int, tuple[Stream, list[Partition]]] = {}
            for stream, partition in wanted.values():
                if stream.deleted:
                    fail_deferred(partition)
                    continue
                by_stream.setdefault(id(stream), (stream, []))[1].append(partition)
            for stream, partitions in by_stream.values():
                await self._raise(stream, partitions)

    async def _raise(self, stream: Stream, partitions: list[Partition]) -> None:
        metadata = stream.metadata
        assert metadata is not None
        now = trio.current_time()
        plans = {p.index: self.plan(stream, p, now) for p in partitions}
        try:
            await self._call(
                metadata.raise_reservations, stream.name, {i: m for i, (m, _b) in plans.items()}
            )
        except Exception as exc:  # database unreachable: acks wait, try again shortly
            self.failures.failed(f"topic {stream.name}: raising offset reservations", exc)
            for p in partitions:
                self._wanted[id(p)] = (stream, p)
            await trio.sleep(RETRY_S)
            self._wake.set()
            return
        self.failures.succeeded(f"topic {stream.name}: raising offset reservations")
        self.raises += 1
        for p in partitions:
            mark, block = plans[p.index]
            mark = shared(mark)  # partitions raised together mostly get equal marks
            stream.reserved_marks[p.index] = max(stream.reserved_marks.get(p.index, 0), mark)
            if stream.loaded_partition(p.index) is not p:
                continue  # replaced meanwhile (a hand-over): the new object loaded its mark
            p.reserved = max(p.reserved if p.reserved < UNRESERVED else 0, mark)
            p.reserve_at = shared(p.reserved - block // 2)
            if p.deferred:
                release_deferred(p)
            if stream.deleted:
                fail_deferred(p)
            elif p.next_offset > p.reserve_at:  # a burst already used half of it
                self.request(stream, p)
