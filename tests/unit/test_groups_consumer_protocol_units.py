"""The consumer group protocol's coordinator in-process: assignors, reconciliation (a
partition never has two owners), fencing, static members and session expiry on trio's mock
clock."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import trio
import trio.testing

from core.errors import ErrorCode
from core.groups.assignors import AssignmentSpec, range_, uniform
from core.groups.consumer_coordinator import (
    ConsumerGroups,
    ConsumerGroupSettings,
    HeartbeatRequest,
    HeartbeatResult,
)

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


@dataclass
class FakeTopic:
    name: str
    topic_id: uuid.UUID
    partition_count: int


class Catalogue:
    def __init__(self, *topics: FakeTopic) -> None:
        self.by_name = {t.name: t for t in topics}

    def topics(self) -> list[FakeTopic]:
        return list(self.by_name.values())

    def get(self, name: str) -> FakeTopic | None:
        return self.by_name.get(name)


def beat(
    groups: ConsumerGroups,
    topics: Catalogue,
    member: str,
    epoch: int,
    owned: dict[uuid.UUID, frozenset[int]] | None = None,
    names: tuple[str, ...] | None = None,
    instance: str | None = None,
    regex: str | None = None,
) -> HeartbeatResult:
    return groups.heartbeat(
        HeartbeatRequest(
            group_id="g",
            member_id=member,
            member_epoch=epoch,
            instance_id=instance,
            rack_id=None,
            rebalance_timeout=30.0 if epoch == 0 else None,
            subscribed_names=names if names is not None else (("t1",) if epoch == 0 else None),
            subscribed_regex=regex,
            server_assignor=None,
            owned=owned if owned is not None else ({} if epoch == 0 else None),
        ),
        topics,
    )


def count(parts: dict[uuid.UUID, frozenset[int]] | None) -> int:
    return sum(len(p) for p in (parts or {}).values())


def in_trio(test: Any) -> None:
    async def main() -> None:
        await test()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_uniform_is_balanced_and_sticky():
    members = {m: frozenset({T1}) for m in ("a", "b", "c")}
    first = uniform(AssignmentSpec(members, {T1: 12}, {}))
    assert sorted(count(p) for p in first.values()) == [4, 4, 4]
    members["d"] = frozenset({T1})
    second = uniform(AssignmentSpec(members, {T1: 12}, first))
    assert sorted(count(p) for p in second.values()) == [3, 3, 3, 3]
    for m in ("a", "b", "c"):  # each old member keeps 3 of its 4
        assert second[m][T1] <= first[m][T1]


def test_uniform_with_different_subscriptions():
    members = {"a": frozenset({T1}), "b": frozenset({T1, T2})}
    result = uniform(AssignmentSpec(members, {T1: 2, T2: 4}, {}))
    assert count(result["a"]) == 2 and result["b"] == {T2: frozenset(range(4))}


def test_range_gives_consecutive_partitions():
    members = {m: frozenset({T1}) for m in ("a", "b")}
    result = range_(AssignmentSpec(members, {T1: 5}, {}))
    assert result == {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4})}}


def test_partition_moves_only_after_its_owner_revoked_it():
    async def scenario() -> None:
        topics = Catalogue(FakeTopic("t1", T1, 4))
        groups = ConsumerGroups()
        a = beat(groups, topics, "a", 0)
        assert a.member_epoch == 1 and count(a.assignment) == 4
        b = beat(groups, topics, "b", 0)
        assert b.member_epoch == 2 and count(b.assignment) == 0  # a still owns everything
        a2 = beat(groups, topics, "a", 1, owned=a.assignment)
        assert a2.member_epoch == 1 and count(a2.assignment) == 2  # revoke 2, same epoch
        b2 = beat(groups, topics, "b", 2, owned={})
        assert count(b2.assignment) == 0  # not released yet
        a3 = beat(groups, topics, "a", 1, owned=a2.assignment)
        assert a3.member_epoch == 2
        b3 = beat(groups, topics, "b", 2, owned={})
        assert count(b3.assignment) == 2
        assert b3.assignment is not None and a3.assignment is not None
        assert not (b3.assignment[T1] & a3.assignment[T1])
        assert groups.groups["g"].state().value == "Stable"

    in_trio(scenario)


def test_fencing_and_unknown_members():
    async def scenario() -> None:
        topics = Catalogue(FakeTopic("t1", T1, 2))
        groups = ConsumerGroups()
        beat(groups, topics, "a", 0)
        assert beat(groups, topics, "a", 5).error is ErrorCode.FENCED_MEMBER_EPOCH
        assert beat(groups, topics, "x", 1).error is ErrorCode.UNKNOWN_MEMBER_ID
        assert groups.validate_commit("g", "a", 1) is ErrorCode.NONE
        assert groups.validate_commit("g", "a", 7) is ErrorCode.STALE_MEMBER_EPOCH
        assert groups.validate_commit("g", "x", 1) is ErrorCode.UNKNOWN_MEMBER_ID
        assert beat(groups, topics, "a", -1).member_epoch == -1
        assert groups.validate_commit("g", "", -1) is ErrorCode.NONE  # empty: admin commits

    in_trio(scenario)


def test_static_member_keeps_its_partitions_until_its_session_ends():
    async def scenario() -> None:
        topics = Catalogue(FakeTopic("t1", T1, 4))
        groups = ConsumerGroups(ConsumerGroupSettings(session_timeout=5.0))
        a = beat(groups, topics, "a1", 0, instance="A")
        beat(groups, topics, "a1", 1, owned=a.assignment, instance="A")
        b = beat(groups, topics, "b", 0)
        a = beat(groups, topics, "a1", 1, owned=a.assignment, instance="A")
        a = beat(groups, topics, "a1", 1, owned=a.assignment, instance="A")
        b = beat(groups, topics, "b", b.member_epoch, owned={})
        assert count(a.assignment) == 2 and count(b.assignment) == 2
        assert beat(groups, topics, "a2", 0, instance="A").error is (
            ErrorCode.UNRELEASED_INSTANCE_ID
        )
        assert beat(groups, topics, "a1", -2, instance="A").member_epoch == -2
        back = beat(groups, topics, "a2", 0, instance="A")
        assert back.error is ErrorCode.NONE and back.assignment == a.assignment
        # Now the instance goes away for good: after the session timeout b gets everything.
        beat(groups, topics, "a2", -2, instance="A")
        owned = b.assignment
        for _ in range(8):
            await trio.sleep(1.0)
            groups.expire(trio.current_time())
            b = beat(groups, topics, "b", b.member_epoch, owned=owned)
            owned = b.assignment if b.assignment is not None else owned
        assert count(owned) == 4

    in_trio(scenario)


def test_regex_and_invalid_regex():
    async def scenario() -> None:
        topics = Catalogue(FakeTopic("orders-eu", T1, 2), FakeTopic("payments", T2, 2))
        groups = ConsumerGroups()
        a = beat(groups, topics, "a", 0, names=(), regex="orders-.*")
        assert a.assignment == {T1: frozenset({0, 1})}
        bad = beat(groups, topics, "b", 0, names=(), regex="orders-(")
        assert bad.error is ErrorCode.INVALID_REGULAR_EXPRESSION
        topics.by_name["orders-us"] = FakeTopic("orders-us", uuid.UUID(int=3), 1)
        a = beat(groups, topics, "a", a.member_epoch, owned=a.assignment)
        assert count(a.assignment) == 3

    in_trio(scenario)


def test_an_empty_group_converts_between_the_protocols():
    from core.groups import GroupCoordinator, JoinRequest
    from core.metadata import CommittedOffset

    class Offsets:
        def load_offsets(self) -> list[CommittedOffset]:
            return [CommittedOffset("g", "t1", 0, 5, -1, "")]

        def commit_offsets(self, offsets: list[CommittedOffset]) -> None:
            pass

        def delete_offsets(self, group_id: str, partitions: Any = None) -> None:
            pass

    def classic_join(member_id: str = "") -> JoinRequest:
        return JoinRequest(
            "g", member_id, None, "c", "", 5.0, 5.0, "consumer", [("range", b"")], True
        )

    async def scenario() -> None:
        coordinator = GroupCoordinator(Offsets())
        async with trio.open_nursery() as nursery:
            await nursery.start(coordinator.run)
            assert coordinator.group("g") is not None  # an Empty classic group (offsets)
            topics = Catalogue(FakeTopic("t1", T1, 1))
            joined = beat(coordinator.consumer, topics, "a", 0)
            assert joined.error is ErrorCode.NONE and coordinator.group("g") is None
            assert coordinator.committed("g", ("t1", 0)) is not None  # offsets kept
            refused = await coordinator.join_group(classic_join())
            assert refused.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            beat(coordinator.consumer, topics, "a", -1)
            answer = await coordinator.join_group(classic_join())
            assert answer.error is ErrorCode.MEMBER_ID_REQUIRED  # a classic group again
            assert "g" not in coordinator.consumer.groups
            busy = beat(coordinator.consumer, topics, "b", 0)
            assert busy.error is ErrorCode.NONE  # a pending classic member is no member yet
            coordinator.stop()

    in_trio(scenario)


def test_a_backtracking_pattern_cannot_stall_the_coordinator():
    async def scenario() -> None:
        name = "a" * 40 + "!"
        topics = Catalogue(FakeTopic(name, T1, 1), FakeTopic("aaa", T2, 1))
        groups = ConsumerGroups()
        started = time.monotonic()
        joined = beat(groups, topics, "a", 0, names=(), regex="(a+)+")
        assert time.monotonic() - started < 2.0
        assert joined.assignment == {T2: frozenset({0})}  # the name it gave up on: no match

    in_trio(scenario)


def test_a_join_without_its_subscription_is_refused():
    async def scenario() -> None:
        groups = ConsumerGroups()
        bad = groups.heartbeat(
            HeartbeatRequest("g", "a", 0, None, None, 30.0, None, None, None, {}), Catalogue()
        )
        assert bad.error is ErrorCode.INVALID_REQUEST
        assert (
            bad.message
            == "SubscribedTopicNames or SubscribedTopicRegex must be set in the first request."
        )

    in_trio(scenario)
