"""ShareCoordinator membership on trio's clock: joins, epochs, fencing, session timeout,
and what a leaving member held, with an in-memory store and metadata."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing

from core.sharegroups import RecordState, ShareCoordinator, ShareError, ShareSettings


@dataclass
class _View:
    high_watermark: int = 10
    log_start_offset: int = 0


@dataclass
class _Topic:
    name: str
    partition_count: int
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)

    def has_partition(self, index: int) -> bool:
        return 0 <= index < self.partition_count

    def partition(self, index: int) -> _View:
        return _View()


class _Store:
    def __init__(self, *topics: _Topic) -> None:
        self.topics = {t.name: t for t in topics}

    def get(self, name: str) -> _Topic | None:
        return self.topics.get(name)


class _Metadata:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, int], tuple[Any, ...]] = {}

    def load_share_partitions(self) -> list[Any]:
        return [(*k, *v) for k, v in self.rows.items()]

    def save_share_partitions(self, rows: list[Any]) -> None:
        for g, t, p, s, e, r in rows:
            self.rows[(g, t, p)] = (s, e, r)

    def delete_share_partitions(self, group_id: str | None, topic: str | None = None) -> None:
        pass


def _coordinator(**settings: Any) -> tuple[ShareCoordinator, _Metadata]:
    metadata = _Metadata()
    store = _Store(_Topic("t", 2))
    shares = ShareCoordinator(store, metadata, ShareSettings(**settings))  # type: ignore[arg-type]
    return shares, metadata


def _run(test: Any) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def test_joins_bump_the_epoch_and_spread_partitions() -> None:
    async def main() -> None:
        shares, metadata = _coordinator()
        a = await shares.heartbeat("g", "a", 0, ["t"])
        assert a.error is ShareError.NONE and a.assignment == {"t": [0, 1]}
        assert set(metadata.rows) == {("g", "t", 0), ("g", "t", 1)}  # initialised, durable
        b = await shares.heartbeat("g", "b", 0, ["t"])
        assert b.member_epoch > a.member_epoch and b.assignment is not None
        again = await shares.heartbeat("g", "a", a.member_epoch, None)
        assert again.assignment is not None and again.member_epoch == b.member_epoch
        parts = sorted(again.assignment["t"] + b.assignment["t"])
        assert parts == [0, 1]  # one each
        quiet = await shares.heartbeat("g", "a", again.member_epoch, None)
        assert quiet.assignment is None  # nothing changed: no assignment sent

    _run(main)


def test_unknown_members_and_stale_epochs_are_refused() -> None:
    async def main() -> None:
        shares, _ = _coordinator()
        assert (await shares.heartbeat("g", "x", 3, None)).error is ShareError.UNKNOWN_MEMBER_ID
        joined = await shares.heartbeat("g", "a", 0, ["t"])
        stale = await shares.heartbeat("g", "a", joined.member_epoch + 5, None)
        assert stale.error is ShareError.FENCED_MEMBER_EPOCH
        assert (await shares.heartbeat("g", "", 0, ["t"])).error is ShareError.INVALID_REQUEST

    _run(main)


def test_a_silent_member_leaves_and_its_records_are_released() -> None:
    async def main() -> None:
        shares, _ = _coordinator(session_timeout_ms=1000, auto_offset_reset="earliest")
        await shares.heartbeat("g", "a", 0, ["t"])
        part = shares.partitions[("g", "t", 0)]
        part.acquire(0, 4, "a", trio.current_time() + 60, 5, 100, 100)
        await trio.sleep(2)
        await shares.tick(trio.current_time())
        assert "a" not in shares.groups["g"].members
        assert all(r.state is RecordState.AVAILABLE for r in part.records.values())
        assert [r.delivery_count for r in part.records.values()] == [1] * 5

    _run(main)


def test_state_is_restored_from_the_metadata() -> None:
    async def main() -> None:
        shares, metadata = _coordinator(auto_offset_reset="earliest")
        await shares.heartbeat("g", "a", 0, ["t"])
        part = shares.partitions[("g", "t", 0)]
        part.acquire(0, 2, "a", trio.current_time() + 60, 5, 100, 100)
        await shares.persist([("g", "t", 0)])
        again = ShareCoordinator(_Store(_Topic("t", 2)), metadata)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            restored = again.partitions[("g", "t", 0)]
            assert [r.delivery_count for r in restored.records.values()] == [1, 1, 1]
            assert restored.first_available() == 0
            again.stop()

    _run(main)
