"""A consumer group of the next-generation protocol (`group.protocol=consumer`): state only.

The group has an epoch, bumped whenever what the assignment depends on changes (members,
subscriptions, the partitions of subscribed topics), and a target assignment computed for
some epoch. Each member has its own epoch and moves towards its target one step at a time
(`reconcile`): it first gives up what it must revoke, keeping its epoch; once its heartbeat
shows those partitions are no longer owned it takes the target epoch and the new partitions
that no other member still holds; the rest follow on later heartbeats as they are released.
So a partition never has two owners.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from .assignors import TopicPartitions

# Member epochs a heartbeat sends to leave: for good, or (static members) for now.
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(StrEnum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"  # waiting for the member to revoke
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waiting for other members to revoke


class ConsumerGroupState(StrEnum):
    """The values ListGroups/ConsumerGroupDescribe send for consumer groups."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(slots=True, eq=False)
class ConsumerMember:
    """A member; times in seconds, deadlines are trio clock values."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: float
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)
    session_deadline: float = math.inf
    revocation_deadline: float = math.inf
    # (epoch, assignment) the member was last told, to send the assignment only on change
    last_sent: tuple[int, TopicPartitions] | None = None
    # the principal's DESCRIBE on a topic, filtering what its regex resolves to
    can_describe: Callable[[str], bool] | None = None


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    target: dict[str, TopicPartitions] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # (topic id, partition count) of every topic subscribed when the epoch was last bumped
    subscribed_metadata: frozenset[tuple[uuid.UUID, int]] = frozenset()

    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.epoch == STATIC_LEAVE_EPOCH:
                continue
            if m.epoch != self.assignment_epoch or m.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        self.target.pop(member_id, None)
        return member

    def replace_static(self, old: ConsumerMember, new: ConsumerMember) -> None:
        """A static member back under a new member id takes over the old one's epoch,
        assignment and target, so nothing moves."""
        self.members.pop(old.member_id, None)
        new.epoch, new.previous_epoch, new.state = old.epoch, old.previous_epoch, old.state
        new.assigned, new.pending_revocation = old.assigned, old.pending_revocation
        if new.epoch == STATIC_LEAVE_EPOCH:
            new.epoch = old.previous_epoch if old.previous_epoch > 0 else 0
        if old.member_id in self.target:
            self.target[new.member_id] = self.target.pop(old.member_id)
        self.add(new)

    def held_by_others(self, member_id: str) -> set[tuple[uuid.UUID, int]]:
        """Partitions another member owns or has yet to revoke."""
        held: set[tuple[uuid.UUID, int]] = set()
        for other in self.members.values():
            if other.member_id == member_id:
                continue
            for parts in (other.assigned, other.pending_revocation):
                for topic, ps in parts.items():
                    held.update((topic, p) for p in ps)
        return held


def reconcile(
    group: ConsumerGroup,
    member: ConsumerMember,
    owned: TopicPartitions | None,
    now: float,
) -> None:
    """Move `member` one step towards its target assignment. `owned`: the partitions the
    member's heartbeat says it owns (None if it did not say)."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or _intersects(owned, member.pending_revocation):
            return  # still revoking
        member.pending_revocation = {}
        member.revocation_deadline = math.inf
    elif member.state is MemberState.STABLE and member.epoch == group.assignment_epoch:
        return
    target = group.target.get(member.member_id, {})
    kept = _intersection(member.assigned, target)
    revoke = _difference(member.assigned, target)
    if revoke:
        member.state = MemberState.UNREVOKED_PARTITIONS
        member.assigned, member.pending_revocation = kept, revoke
        member.revocation_deadline = now + member.rebalance_timeout
        return
    held = group.held_by_others(member.member_id)
    wanted = _difference(target, member.assigned)
    granted: dict[uuid.UUID, set[int]] = {t: set(ps) for t, ps in kept.items()}
    missing = False
    for topic, parts in wanted.items():
        for p in parts:
            if (topic, p) in held:
                missing = True
            else:
                granted.setdefault(topic, set()).add(p)
    member.assigned = {t: frozenset(ps) for t, ps in granted.items() if ps}
    if member.epoch != group.assignment_epoch:
        member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
    member.state = MemberState.UNRELEASED_PARTITIONS if missing else MemberState.STABLE


def _intersects(a: TopicPartitions, b: TopicPartitions) -> bool:
    return any(a.get(topic, frozenset()) & parts for topic, parts in b.items())


def _intersection(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _difference(a: TopicPartitions, b: TopicPartitions) -> TopicPartitions:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def is_subset(a: TopicPartitions, b: TopicPartitions) -> bool:
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())
