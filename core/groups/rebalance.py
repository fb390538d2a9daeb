"""The rebalance state machine of one group: preparing, completing, expiring.

`Rebalancer` moves a `Group` through Kafka's transitions and answers the JoinGroup and
SyncGroup requests waiting on it. Everything here is synchronous (called from the trio
thread, between awaits); the coordinator wakes `expire` when `next_deadline` is due.

    Empty/Stable/CompletingRebalance --prepare--> PreparingRebalance
    PreparingRebalance --everyone rejoined, or the deadline--> CompletingRebalance (or Empty)

A group that was Empty first waits `initial_delay` (and again while new members keep
coming, up to its rebalance timeout) so that members starting together share a generation.
Each of those waits lasts at least `MIN_INITIAL_WAIT`, even with a delay of 0: Kafka ends
them from its delayed-operation purgatory (a timer thread with 1 ms ticks, then the group
lock), so on Kafka 3.5.1 a first JoinGroup with `group.initial.rebalance.delay.ms=0` is
answered 1-4 ms after it arrives, and a second member arriving meanwhile shares generation 1
(measured side by side: tests/system/test_groups_static_vs_kafka.py). Answered on the next loop
iteration instead, a static member started together with another formed a generation of
one, took every partition, and a second rebalance revoked them again.
"""

from __future__ import annotations

import logging
import math

import trio

from core.errors import ErrorCode

from .state import Group, GroupState, JoinResult, Member, SyncResult

log = logging.getLogger(__name__)

_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE

# The shortest wait of the initial rebalance (seconds), whatever the configured delay.
MIN_INITIAL_WAIT = 0.005


class Rebalancer:
    def __init__(self, initial_delay: float) -> None:
        self.initial_delay = initial_delay

    def maybe_prepare(self, group: Group, reason: str) -> None:
        """Start a rebalance, or, if one is under way, see whether it can finish now."""
        if group.state is _PREPARING:
            self.try_complete_join(group)
        elif group.state is not GroupState.DEAD:
            self.prepare(group, reason)

    def prepare(self, group: Group, reason: str) -> None:
        now = trio.current_time()
        if group.state is _COMPLETING:
            # This generation's assignment never took effect: whoever waits for it must
            # rejoin.
            for member in group.members.values():
                member.assignment = b""
                answer_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS), now)
        if group.state is GroupState.EMPTY:
            group.initial_delay = True
            group.initial_delay_remaining = max(group.rebalance_timeout - self.initial_delay, 0.0)
            group.new_member_added = False
            group.join_deadline = now + max(self.initial_delay, MIN_INITIAL_WAIT)
        else:
            group.initial_delay = False
            group.join_deadline = now + group.rebalance_timeout
        log.info(
            "group %s: rebalancing (generation %d, %s): %s",
            group.group_id,
            group.generation_id,
            group.state.value,
            reason,
        )
        group.state = _PREPARING
        self.try_complete_join(group)

    def try_complete_join(self, group: Group) -> None:
        if group.state is _PREPARING and not group.initial_delay and group.all_members_joined:
            self.complete_join(group)

    def complete_join(self, group: Group) -> None:
        """End the join phase: drop whoever did not rejoin, start the next generation and
        answer every waiting JoinGroup (the leader gets the member list)."""
        now = trio.current_time()
        for member in [m for m in group.members.values() if m.join_reply is None]:
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
            fail_waiters(member, ErrorCode.UNKNOWN_MEMBER_ID)
            group.remove(member.member_id)
        group.join_deadline = None
        group.initial_delay = False
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.state = GroupState.EMPTY
            log.info("group %s: empty (generation %d)", group.group_id, group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        group.state = _COMPLETING
        everyone = group.joined_members()
        for member in group.members.values():
            reply = member.join_reply
            assert reply is not None
            member.join_reply = None
            member.heartbeat_deadline = now + member.session_timeout
            is_leader = member.member_id == group.leader_id
            reply.set(
                JoinResult(
                    ErrorCode.NONE,
                    member_id=member.member_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader_id or "",
                    members=everyone if is_leader else (),
                )
            )
        log.info(
            "group %s: generation %d with %d members (protocol %s, leader %s)",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )

    def remove_member(self, group: Group, member: Member, reason: str) -> None:
        """A member leaves (LeaveGroup) or expires: the others must rebalance without it."""
        fail_waiters(member, ErrorCode.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        log.info("group %s: member %s removed: %s", group.group_id, member.member_id, reason)
        if group.state in (GroupState.STABLE, _COMPLETING):
            self.prepare(group, f"member {member.member_id} {reason}")
        elif group.state is _PREPARING:
            self.try_complete_join(group)

    def expire(self, group: Group, now: float) -> None:
        """Act on every deadline that has passed: pending member ids and sessions expire,
        and the join phase ends (or, in the initial delay, is extended)."""
        expired_pending = [m for m, deadline in group.pending_members.items() if deadline <= now]
        for member_id in expired_pending:
            del group.pending_members[member_id]
        for member in list(group.members.values()):
            if (
                group.members.get(member.member_id) is member
                and not member.kept_alive
                and member.heartbeat_deadline <= now
            ):
                self.remove_member(group, member, "session timed out")
        if expired_pending:
            self.try_complete_join(group)
        deadline = group.join_deadline
        if group.state is _PREPARING and deadline is not None and deadline <= now:
            self._on_join_deadline(group, now)

    def _on_join_deadline(self, group: Group, now: float) -> None:
        if group.initial_delay and group.new_member_added and group.initial_delay_remaining > 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            delay = min(max(self.initial_delay, MIN_INITIAL_WAIT), group.initial_delay_remaining)
            group.initial_delay_remaining = max(group.initial_delay_remaining - delay, 0.0)
            group.new_member_added = False
            group.join_deadline = now + delay
            return
        self.complete_join(group)


def next_deadline(group: Group) -> float:
    """When `Rebalancer.expire` has something to do next (inf: nothing)."""
    deadline = math.inf
    if group.state is _PREPARING and group.join_deadline is not None:
        deadline = group.join_deadline
    for expiry in group.pending_members.values():
        deadline = min(deadline, expiry)
    for member in group.members.values():
        if not member.kept_alive:
            deadline = min(deadline, member.heartbeat_deadline)
    return deadline


def answer_sync(member: Member, result: SyncResult, now: float) -> None:
    """Answer a member waiting in SyncGroup; from now on it must heartbeat again."""
    if member.sync_reply is not None:
        member.sync_reply.set(result)
        member.sync_reply = None
        member.heartbeat_deadline = now + member.session_timeout


def fail_waiters(member: Member, error: ErrorCode) -> None:
    """Answer the member's waiting JoinGroup/SyncGroup, if any, with `error`."""
    if member.join_reply is not None:
        member.join_reply.set(JoinResult(error, member.member_id))
        member.join_reply = None
    if member.sync_reply is not None:
        member.sync_reply.set(SyncResult(error))
        member.sync_reply = None
