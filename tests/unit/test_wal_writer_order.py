"""The write-ahead writer keeps several objects in flight, yet records them, and so
acknowledges their appends, in the order they started (core/wal/writer.py): a slow PUT
followed by a fast one never lets the later object commit first."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from core.wal.writer import MAX_IN_FLIGHT, WalSettings, WalWriter

ENTRY_HEADER_SIZE = 16  # only positions matter here


class _Store:
    """PUTs whose durations the test chooses, one per object in order."""

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self.started = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def put(self, key: str, data: Any) -> None:
        delay = self.delays[self.started]
        self.started += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await trio.sleep(delay)
        self.in_flight -= 1

    async def list_keys(self, prefix: str) -> list[str]:
        return []

    async def delete_many(self, keys: list[str]) -> None:
        pass


class _Metadata:
    def __init__(self) -> None:
        self.committed: list[int] = []  # the first log position of each recorded object

    def commit_wal_object(self, key: str, node: int, size: int, ranges: Any, inc: int) -> None:
        self.committed.append(ranges[0].start_position)

    def wal_object_keys(self, node: int) -> list[str]:
        return []

    def folded_wal_objects(self) -> list[str]:
        return []


class _Log:
    segment_id = 0

    def __init__(self) -> None:
        self.acknowledged: list[int] = []

    def wal_committed(self, batch: list[Any]) -> None:
        self.acknowledged.append(batch[0].position)


async def _call(fn: Any, *args: Any) -> Any:
    return fn(*args)


def test_objects_in_flight_are_recorded_in_the_order_they_started() -> None:
    delays = [5.0, 0.1, 3.0, 0.2, 0.1, 0.1]  # the first PUT is the slowest
    store, metadata, log = _Store(delays), _Metadata(), _Log()

    async def main() -> None:
        writer = WalWriter(store, metadata, _call, 1, WalSettings(flush_ms=10))  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            for n in range(len(delays)):
                position = 1000 * n + ENTRY_HEADER_SIZE
                batch = [SimpleNamespace(position=position, end=1000 * (n + 1))]
                writer.submit("t", uuid.uuid4(), log, [b"x"], batch)  # type: ignore[arg-type]
                await trio.sleep(0.02)  # past the pace: each group is its own object
            with trio.fail_after(60):
                while len(log.acknowledged) < len(delays):
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    expected = [1000 * n + ENTRY_HEADER_SIZE for n in range(len(delays))]
    assert log.acknowledged == expected
    assert len(metadata.committed) == len(delays)
    assert metadata.committed == sorted(metadata.committed)
    assert store.most_in_flight == MAX_IN_FLIGHT  # the slow first PUT did not hold the rest
