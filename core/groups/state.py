"""A classic (JoinGroup/SyncGroup) consumer group's members and state, without any timers.

`Group` holds what Kafka's GroupMetadata holds: the state, generation, selected protocol,
leader, members (in join order) and the static-membership map. The coordinator drives the
transitions; this module only answers questions about the group and keeps its maps
consistent.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

import trio

from core.errors import ErrorCode

T = TypeVar("T")


class GroupState(StrEnum):
    """Kafka's classic group states; the values are what ListGroups/DescribeGroups send."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Reply(Generic[T]):
    """A one-shot answer request handlers wait for (JoinGroup, SyncGroup).

    The first `set` wins; later ones are ignored. Several handlers may wait for the same
    reply (a client retrying on a new connection); `waiters` counts those still waiting,
    so a handler that is cancelled can tell whether anyone else still listens.
    """

    __slots__ = ("_event", "_value", "waiters")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None
        self.waiters = 0

    @property
    def done(self) -> bool:
        return self._event.is_set()

    def set(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    async def wait(self) -> T:
        self.waiters += 1
        try:
            await self._event.wait()
        finally:
            self.waiters -= 1
        assert self._value is not None
        return self._value


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One entry of the member list the leader gets in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True, eq=False)
class Member:
    """A group member. Timeouts are in seconds; deadlines are trio clock values."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float
    protocol_type: str
    # (name, metadata) in the member's order of preference
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    heartbeat_deadline: float = math.inf
    join_reply: Reply[JoinResult] | None = None
    sync_reply: Reply[SyncResult] | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def kept_alive(self) -> bool:
        """A member waiting in JoinGroup or SyncGroup cannot heartbeat, so it cannot expire."""
        return self.join_reply is not None or self.sync_reply is not None


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, float] = field(default_factory=dict)  # member id -> deadline
    # The rebalance in progress (state PreparingRebalance): when it ends, and whether it is
    # still in its initial delay (group.initial.rebalance.delay.ms, extended while new
    # members keep arriving, never past the rebalance timeout).
    join_deadline: float | None = None
    initial_delay: bool = False
    initial_delay_remaining: float = 0.0
    new_member_added: bool = False
    # Stops the group's timer task once the group is deleted.
    lifetime: trio.CancelScope = field(default_factory=trio.CancelScope)
    timer: trio.CancelScope | None = None

    # --- membership --------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give a static member a new member id, keeping its place, assignment and role."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """FENCED_INSTANCE_ID if the instance id now belongs to another member id,
        UNKNOWN_MEMBER_ID if the member id is not in the group, else NONE."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is not None and current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    @property
    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_reply is not None for m in self.members.values()
        )

    @property
    def rebalance_timeout(self) -> float:
        return max((m.rebalance_timeout for m in self.members.values()), default=0.0)

    # --- protocols ---------------------------------------------------------------------

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order of preference."""
        members = list(self.members.values())
        if not members:
            return []
        common = set(members[0].protocol_names)
        for member in members[1:]:
            common &= set(member.protocol_names)
        return [name for name in members[0].protocol_names if name in common]

    def supports(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Could a member with these protocols join? (INCONSISTENT_GROUP_PROTOCOL if not.)"""
        if not self.members:
            return bool(protocol_type) and bool(protocol_names)
        if protocol_type != self.protocol_type:
            return False
        candidates = set(self.candidate_protocols())
        return any(name in candidates for name in protocol_names)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred common protocol; most votes wins (ties
        go to the protocol the first member prefers)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(n for n in member.protocol_names if n in candidates)] += 1
        return max(candidates, key=lambda name: votes[name])  # max keeps the first on ties

    def joined_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )

    def current_join_result(self, member: Member, leader_view: bool) -> JoinResult:
        """The JoinGroup answer for the current generation (a rejoin that changes nothing)."""
        return JoinResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id or "",
            members=self.joined_members() if leader_view else (),
        )
