"""The group coordinator's timing rules, in-process on trio's mock clock (no sockets, no
waiting): the initial rebalance delay and its bound, and abandoned SyncGroup waiters."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from core.groups import GroupCoordinator, GroupSettings, GroupState, JoinRequest, SyncRequest
from core.metadata import CommittedOffset

NONE = 0


class NoPersistence:
    def load_offsets(self) -> list[CommittedOffset]:
        return []

    def commit_offsets(self, offsets: list[CommittedOffset]) -> None:
        pass

    def delete_offsets(self, group_id: str, partitions: Any = None) -> None:
        pass


def join_request(member_id: str = "", rebalance: float = 10.0, session: float = 5.0) -> JoinRequest:
    return JoinRequest(
        group_id="g",
        member_id=member_id,
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout=session,
        rebalance_timeout=rebalance,
        protocol_type="consumer",
        protocols=[("range", b"")],
        require_known_member_id=False,
    )


def run(test: Any, delay: float = 0.3) -> None:
    async def main() -> None:
        coordinator = GroupCoordinator(
            NoPersistence(), GroupSettings(initial_rebalance_delay=delay)
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(coordinator.run)
            await test(coordinator)
            coordinator.stop()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_initial_delay_extends_while_members_arrive():
    async def scenario(coordinator: GroupCoordinator) -> None:
        results: list[Any] = []

        async def member(after: float) -> None:
            await trio.sleep(after)
            results.append((await coordinator.join_group(join_request()), trio.current_time()))

        async with trio.open_nursery() as nursery:
            for after in (0.0, 0.2, 0.4):
                nursery.start_soon(member, after)
        # 0.3: someone new came, wait again; 0.6: again; 0.9: nobody new, complete.
        assert [round(t, 3) for _, t in results] == [0.9, 0.9, 0.9]
        assert {r.generation_id for r, _ in results} == {1}
        assert sum(1 for r, _ in results if r.members) == 1  # the leader sees all three
        assert len(next(r for r, _ in results if r.members).members) == 3

    run(scenario)


def test_initial_delay_never_exceeds_the_rebalance_timeout():
    async def scenario(coordinator: GroupCoordinator) -> None:
        done: list[float] = []

        async def member(after: float) -> None:
            await trio.sleep(after)
            result = await coordinator.join_group(join_request(rebalance=1.0))
            if result.generation_id == 1:
                done.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            for i in range(10):  # a new member every 0.15 s, past the rebalance timeout
                nursery.start_soon(member, i * 0.15)
        # delays of 0.3, 0.3, 0.3, then the 0.1 left of the 1.0 s rebalance timeout
        assert round(min(done), 3) == 1.0

    run(scenario)


def test_abandoned_sync_waiter_lets_the_member_expire():
    async def scenario(coordinator: GroupCoordinator) -> None:
        async with trio.open_nursery() as nursery:
            leader_join: list[Any] = []

            async def join_leader() -> None:
                leader_join.append(await coordinator.join_group(join_request(session=2.0)))

            nursery.start_soon(join_leader)
            follower = await coordinator.join_group(join_request(session=2.0))
        leader = leader_join[0]
        if not leader.members:
            leader, follower = follower, leader
        # The follower's SyncGroup waits for the leader, then its connection goes away.
        with trio.move_on_after(0.5):
            await coordinator.sync_group(
                SyncRequest("g", 1, follower.member_id, None, None, None, {})
            )
        # The leader stays alive (it heartbeats) but never syncs: without its waiter, the
        # follower is no longer kept alive and its session runs out.
        for _ in range(6):
            coordinator.heartbeat("g", 1, leader.member_id, None)
            await trio.sleep(0.5)
        group = coordinator.group("g")
        assert group is not None
        assert follower.member_id not in group.members
        assert group.state is GroupState.PREPARING_REBALANCE

    run(scenario, delay=0.0)
