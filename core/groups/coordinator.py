"""The group coordinator: Kafka's classic consumer group protocol for every group.

This gateway is the coordinator of every group. The coordinator runs on the trio thread and
never blocks inside a state change, so there are no locks: each request handler calls in,
the group changes state synchronously, and JoinGroup/SyncGroup handlers then wait for their
`Reply`.

Transitions follow Kafka's GroupCoordinator (the rebalance itself is in `rebalance`):

    Empty --join--> PreparingRebalance --all rejoined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable/CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;  Empty --DeleteGroups--> Dead

Only committed offsets are durable; membership lives in memory, so after a restart every
member's next request gets UNKNOWN_MEMBER_ID and the group forms again.

Timers: each group has one task in the coordinator's nursery that sleeps in a cancel scope
whose deadline is the group's next deadline (the earliest member session expiry, pending
member expiry, or the end of the rebalance). Whatever moves a deadline earlier moves the
scope's deadline (`_reschedule`); heartbeats only push deadlines later, so they touch
nothing and the task recomputes when it wakes.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

import trio

from core.errors import ErrorCode
from core.metadata import CommittedOffset

from .consumer_coordinator import ConsumerGroups, ConsumerGroupSettings
from .consumer_protocol import subscribed_topics
from .offsets import Offload, OffsetPersistence, OffsetStore, Partition, run_inline
from .rebalance import Rebalancer, answer_sync, next_deadline
from .state import Group, GroupState, JoinResult, Member, Reply, SyncResult

log = logging.getLogger(__name__)

_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE


@dataclass(slots=True)
class GroupSettings:
    """Coordinator tunables; times in seconds."""

    # Kafka's group.initial.rebalance.delay.ms is 3 s; a short default keeps small groups
    # snappy while still collecting members that start together into one generation.
    initial_rebalance_delay: float = 0.3
    min_session_timeout: float = 1.0
    max_session_timeout: float = 1800.0
    max_metadata_bytes: int = 4096  # offset.metadata.max.bytes
    # Groups of the next-generation protocol (group.consumer.* settings)
    consumer: ConsumerGroupSettings = field(default_factory=ConsumerGroupSettings)


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    # JoinGroup v4+: a dynamic member's first join only gets a member id (MEMBER_ID_REQUIRED)
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


class GroupCoordinator:
    def __init__(
        self,
        offsets: OffsetPersistence,
        settings: GroupSettings | None = None,
        offload: Offload = run_inline,
    ) -> None:
        """Load every committed offset; groups that have some start out Empty. `offload`
        runs the blocking offset writes off the event loop."""
        self.settings = settings or GroupSettings()
        self.offsets = OffsetStore(offsets, offload)
        self._groups: dict[str, Group] = {}
        self._rebalance = Rebalancer(self.settings.initial_rebalance_delay)
        self._nursery: trio.Nursery | None = None
        self._stopping = trio.Event()
        # Consumer groups (`group.protocol=consumer`) share the group id namespace.
        self.consumer = ConsumerGroups(self.settings.consumer, self._classic_busy, self._claim)

    def set_initial_rebalance_delay(self, seconds: float) -> None:
        """group.initial.rebalance.delay.ms, changed at run time: the next rebalances use it."""
        self.settings.initial_rebalance_delay = seconds
        self._rebalance.initial_delay = seconds

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the groups' timers until `stop`."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.consumer.run_expiry)
            for group_id in self.offsets.group_ids():
                self._create_group(group_id)
            log.info("group coordinator up: %d groups with committed offsets", len(self._groups))
            task_status.started()
            await self._stopping.wait()
            nursery.cancel_scope.cancel()

    def stop(self) -> None:
        self._stopping.set()

    # --- lookups ---------------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        """The live group (never a Dead one), for DescribeGroups."""
        return self._groups.get(group_id)

    def list_groups(self, states: set[str] | None = None) -> list[Group]:
        """Groups whose state is in `states` (lower-case state names), or all of them."""
        return [
            g for g in self._groups.values() if states is None or g.state.value.lower() in states
        ]

    def _classic_busy(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and (bool(group.members) or group.state is not GroupState.EMPTY)

    def _claim(self, group_id: str) -> None:
        """An empty classic group becomes a consumer group: drop the classic one (its
        committed offsets stay)."""
        group = self._groups.pop(group_id, None)
        if group is not None:
            group.lifetime.cancel()

    # --- JoinGroup -------------------------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResult:
        """Answer a JoinGroup; waits while the group rebalances (up to its rebalance
        timeout, plus the initial delay for a group that was empty)."""
        outcome = self._join(request)
        if isinstance(outcome, JoinResult):
            return outcome
        return await outcome.wait()

    def _join(self, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        if not req.group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, req.member_id)
        settings = self.settings
        if not settings.min_session_timeout <= req.session_timeout <= settings.max_session_timeout:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        if not self.consumer.drop_if_empty(req.group_id):
            log.info(
                "group %s: %s uses the classic protocol in a consumer group",
                req.group_id,
                req.client_id,
            )
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
            group = self._create_group(req.group_id)
        if group.state is GroupState.DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if not group.supports(req.protocol_type, [name for name, _ in req.protocols]):
            log.info(
                "group %s: refusing %s: protocols %s (%s) share nothing with the group's %s (%s)",
                group.group_id,
                req.client_id,
                [name for name, _ in req.protocols],
                req.protocol_type,
                group.candidate_protocols(),
                group.protocol_type,
            )
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        if req.member_id:
            outcome = self._join_known_member(group, req)
        else:
            outcome = self._join_new_member(group, req)
        self._reschedule(group)
        return outcome

    def _join_new_member(self, group: Group, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        instance_id = req.group_instance_id
        if instance_id is not None:
            new_id = f"{instance_id}-{uuid.uuid4()}"
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                return self._rejoin_static_member(group, instance_id, old_id, new_id, req)
            return self._add_member_and_rebalance(group, req, new_id)
        member_id = f"{req.client_id}-{uuid.uuid4()}"
        if req.require_known_member_id:
            # KIP-394: the member exists only once it comes back with this id, so a client
            # that dies before rejoining leaves nothing behind but a short-lived entry.
            group.pending_members[member_id] = trio.current_time() + req.session_timeout
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        return self._add_member_and_rebalance(group, req, member_id)

    def _join_known_member(self, group: Group, req: JoinRequest) -> JoinResult | Reply[JoinResult]:
        if req.member_id in group.pending_members:
            del group.pending_members[req.member_id]
            return self._add_member_and_rebalance(group, req, req.member_id)
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error:
            return JoinResult(error, req.member_id)
        member = group.members[req.member_id]
        is_leader = member.member_id == group.leader_id
        unchanged = member.protocols == req.protocols
        if group.state is _COMPLETING and unchanged:
            # The JoinGroup response was lost: answer it again.
            return group.current_join_result(member, leader_view=is_leader)
        if group.state is GroupState.STABLE and unchanged and not is_leader:
            # A follower with nothing new: it may go straight to SyncGroup. (A leader's
            # rejoin always rebalances: that is how it reacts to topic metadata changes.)
            return group.current_join_result(member, leader_view=False)
        return self._update_member_and_rebalance(group, member, req)

    def _add_member_and_rebalance(
        self, group: Group, req: JoinRequest, member_id: str
    ) -> Reply[JoinResult]:
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout,
            req.rebalance_timeout,
            req.protocol_type,
            list(req.protocols),
        )
        reply = member.join_reply = Reply()
        if group.state is _PREPARING and group.generation_id == 0:
            group.new_member_added = True  # extends the initial delay
        group.add(member)
        log.info("group %s: member %s joins", group.group_id, member_id)
        self._rebalance.maybe_prepare(group, f"member {member_id} joined")
        return reply  # (the rebalance may already have answered it)

    def _update_member_and_rebalance(
        self, group: Group, member: Member, req: JoinRequest
    ) -> Reply[JoinResult]:
        _update_member(member, req)
        if member.join_reply is None:
            member.join_reply = Reply()
        reply = member.join_reply
        self._rebalance.maybe_prepare(group, f"member {member.member_id} rejoined")
        return reply

    def _rejoin_static_member(
        self, group: Group, instance_id: str, old_id: str, new_id: str, req: JoinRequest
    ) -> JoinResult | Reply[JoinResult]:
        """A known group.instance.id joins again (a restarted static member): it takes
        over its old member's place and assignment; the old member id is fenced."""
        old = group.members[old_id]
        if old.join_reply is not None:
            old.join_reply.set(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
            old.join_reply = None
        if old.sync_reply is not None:
            old.sync_reply.set(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
            old.sync_reply = None
        leader_before = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        _update_member(member, req)
        member.heartbeat_deadline = trio.current_time() + member.session_timeout
        log.info("group %s: static member %s is back as %s", group.group_id, instance_id, new_id)
        if group.state is GroupState.STABLE and group.protocol_name == group.select_protocol():
            # No rebalance. The leader id from before is returned on purpose: even a former
            # leader must not compute an assignment a Stable group would never hand out; it
            # fetches its current one with SyncGroup like any follower.
            return JoinResult(
                ErrorCode.NONE,
                member_id=new_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=leader_before or "",
            )
        reply = member.join_reply = Reply()
        self._rebalance.maybe_prepare(group, f"static member {instance_id} rejoined")
        return reply

    # --- SyncGroup -------------------------------------------------------------------------

    async def sync_group(self, request: SyncRequest) -> SyncResult:
        """Answer a SyncGroup. Followers wait for the leader's assignment (or for the
        rebalance to be abandoned); the leader's request hands out every assignment."""
        outcome = self._sync(request)
        if isinstance(outcome, SyncResult):
            return outcome
        group, member, reply = outcome
        try:
            return await reply.wait()
        finally:
            if not reply.done and reply.waiters == 0 and member.sync_reply is reply:
                # Nobody waits any more (the connection closed): let the session expire.
                member.sync_reply = None
                member.heartbeat_deadline = trio.current_time() + member.session_timeout
                self._reschedule(group)

    def _sync(self, req: SyncRequest) -> SyncResult | tuple[Group, Member, Reply[SyncResult]]:
        group = self._groups.get(req.group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error:
            return SyncResult(error)
        if req.generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[req.member_id]
        now = trio.current_time()
        if group.state is _PREPARING:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            member.heartbeat_deadline = now + member.session_timeout
            return self._sync_result(group, member)
        # CompletingRebalance
        if member.sync_reply is None:
            member.sync_reply = Reply()
        reply = member.sync_reply
        if member.member_id == group.leader_id:
            for each in group.members.values():
                each.assignment = req.assignments.get(each.member_id, b"")
            group.state = GroupState.STABLE
            for each in group.members.values():
                answer_sync(each, self._sync_result(group, each), now)
            log.info("group %s: stable at generation %d", group.group_id, group.generation_id)
            self._reschedule(group)
        return group, member, reply

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(
            ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
        )

    # --- Heartbeat, LeaveGroup ---------------------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member = group.members[member_id]
        member.heartbeat_deadline = trio.current_time() + member.session_timeout
        if group.state is _PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members given as (member id, group instance id or None); returns the
        request-level error and one error per member."""
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        errors = [self._leave_one(group, member_id, instance) for member_id, instance in leaving]
        self._reschedule(group)
        return ErrorCode.NONE, errors

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member_id and member_id != current:
                return ErrorCode.FENCED_INSTANCE_ID
            member_id = current  # an admin may remove a static member by instance id alone
        elif member_id in group.pending_members:
            del group.pending_members[member_id]
            self._rebalance.try_complete_join(group)
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._rebalance.remove_member(group, member, "left the group")
        return ErrorCode.NONE

    # --- DeleteGroups ------------------------------------------------------------------------

    async def delete_groups(self, group_ids: list[str]) -> list[ErrorCode]:
        """Delete Empty groups with their offsets: NON_EMPTY_GROUP if a group has members,
        GROUP_ID_NOT_FOUND if it does not exist."""
        return [await self._delete_group(group_id) for group_id in group_ids]

    async def _delete_group(self, group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if group_id in self.consumer.groups:
            if not self.consumer.drop_if_empty(group_id):
                return ErrorCode.NON_EMPTY_GROUP
            await self.offsets.delete_group(group_id)
            log.info("consumer group %s deleted", group_id)
            return ErrorCode.NONE
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        group.state = GroupState.DEAD  # first: nobody joins while the delete commits
        try:
            await self.offsets.delete_group(group_id)
        except BaseException:
            group.state = GroupState.EMPTY
            raise
        group.lifetime.cancel()
        del self._groups[group_id]
        log.info("group %s deleted", group_id)
        return ErrorCode.NONE

    # --- offsets -----------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[CommittedOffset],
    ) -> ErrorCode:
        """Commit for a member of the current generation, or (generation < 0) for a group
        that does not use group management and has no members. All or nothing."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if group_id in self.consumer.groups:
            error = self.consumer.validate_commit(group_id, member_id, generation_id)
            if error:
                return error
            return await self._store_offsets(group_id, offsets)
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return ErrorCode.ILLEGAL_GENERATION
            group = self._create_group(group_id)
        elif group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif not (generation_id < 0 and group.state is GroupState.EMPTY):
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            if group.state is _COMPLETING:
                return ErrorCode.REBALANCE_IN_PROGRESS
            # Commits during PreparingRebalance are fine: members commit while revoking.
            member = group.members[member_id]
            member.heartbeat_deadline = trio.current_time() + member.session_timeout
        return await self._store_offsets(group_id, offsets)

    async def _store_offsets(self, group_id: str, offsets: list[CommittedOffset]) -> ErrorCode:
        now_ms = int(time.time() * 1000)
        for offset in offsets:
            offset.group_id = group_id
            offset.commit_ms = now_ms
        try:
            await self.offsets.commit(offsets)
        except Exception:
            log.exception("group %s: storing committed offsets failed", group_id)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        return ErrorCode.NONE

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+: a consumer group member fetching (member id given) must be
        one, with its epoch; anyone else (tools, classic members) fetches freely."""
        if not member_id or group_id not in self.consumer.groups:
            return ErrorCode.NONE
        return self.consumer.validate_commit(group_id, member_id, member_epoch)

    def committed(self, group_id: str, partition: Partition) -> CommittedOffset | None:
        return self.offsets.get(group_id, partition)

    def all_committed(self, group_id: str) -> list[CommittedOffset]:
        return self.offsets.all_of(group_id)

    async def delete_offsets(
        self, group_id: str, partitions: list[Partition]
    ) -> tuple[ErrorCode, dict[Partition, ErrorCode]]:
        """OffsetDelete: an Empty group loses any offsets; an active consumer group only
        those of topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise)."""
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group.state is GroupState.EMPTY:
            subscribed: set[str] = set()
        elif group.protocol_type == "consumer":
            subscribed = self._subscribed_topics(group)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        results = {
            p: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if p[0] in subscribed else ErrorCode.NONE
            for p in partitions
        }
        try:
            await self.offsets.delete(group_id, [p for p, error in results.items() if not error])
        except Exception:
            log.exception("group %s: deleting committed offsets failed", group_id)
            return ErrorCode.UNKNOWN_SERVER_ERROR, {}
        return ErrorCode.NONE, results

    @staticmethod
    def _subscribed_topics(group: Group) -> set[str]:
        topics: set[str] = set()
        for member in group.members.values():
            if group.protocol_name is not None:
                topics.update(subscribed_topics(member.metadata_for(group.protocol_name)))
            else:  # no protocol chosen yet: count every protocol's subscription
                for _name, metadata in member.protocols:
                    topics.update(subscribed_topics(metadata))
        return topics

    def on_topic_deleted(self, topic: str) -> None:
        self.offsets.forget_topic(topic)

    # --- timers ------------------------------------------------------------------------------

    def _create_group(self, group_id: str) -> Group:
        assert self._nursery is not None, "the coordinator is not running"
        group = Group(group_id)
        self._groups[group_id] = group
        self._nursery.start_soon(self._run_timer, group)
        return group

    async def _run_timer(self, group: Group) -> None:
        with group.lifetime:
            while True:
                with trio.CancelScope(deadline=next_deadline(group)) as scope:
                    group.timer = scope
                    await trio.sleep_forever()
                group.timer = None
                try:
                    self._rebalance.expire(group, trio.current_time())
                except Exception:  # a bug here must not take the whole gateway down
                    log.exception("group %s: timer failed", group.group_id)

    def _reschedule(self, group: Group) -> None:
        if group.timer is not None:
            group.timer.deadline = next_deadline(group)


def _update_member(member: Member, req: JoinRequest) -> None:
    member.protocols = list(req.protocols)
    member.protocol_type = req.protocol_type
    member.session_timeout = req.session_timeout
    member.rebalance_timeout = req.rebalance_timeout
    member.client_id = req.client_id
    member.client_host = req.client_host
