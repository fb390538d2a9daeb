"""The coordinator of consumer groups of the next-generation protocol (ConsumerGroupHeartbeat).

One heartbeat does everything: joins (member epoch 0), leaves (-1; -2 for a static member
that will be back), updates the member's subscription, bumps the group epoch when members,
subscriptions or the subscribed topics' partitions changed, recomputes the target
assignment with the server-side assignor when the group epoch is ahead of it, and moves the
member one reconciliation step (`consumer_group.reconcile`). Everything is synchronous on
the trio thread, so there are no locks.

Membership lives in memory, like the classic groups' (committed offsets are durable in the
metadata store): after a restart a member's heartbeat gets UNKNOWN_MEMBER_ID and the client
joins again with epoch 0. Regular expressions are matched in full against topic names
(the `regex` module's syntax, which agrees with Kafka's RE2J for the usual patterns; each
match is time-limited, since unlike RE2 it can backtrack) on every heartbeat, so topics
created later join the subscription at the next heartbeat.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import regex
import trio

from core.configs.group import CONSUMER_HEARTBEAT_INTERVAL, CONSUMER_SESSION_TIMEOUT, GroupConfigs
from core.errors import ErrorCode

from .assignors import ASSIGNORS, DEFAULT_ASSIGNOR, AssignmentSpec, TopicPartitions
from .consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    is_subset,
    reconcile,
)

log = logging.getLogger(__name__)


class TopicInfo(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def topic_id(self) -> uuid.UUID: ...
    @property
    def partition_count(self) -> int: ...


class TopicCatalogue(Protocol):
    """The slice of `core.api.Store` the coordinator reads."""

    def topics(self) -> Iterable[TopicInfo]: ...
    def get(self, name: str) -> TopicInfo | None: ...


@dataclass(slots=True)
class ConsumerGroupSettings:
    """Kafka's group.consumer.* settings; times in seconds."""

    session_timeout: float = 45.0
    heartbeat_interval: float = 5.0
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout: float | None  # None: unchanged
    subscribed_names: tuple[str, ...] | None  # None: unchanged
    subscribed_regex: str | None
    server_assignor: str | None
    owned: TopicPartitions | None  # None: unchanged
    client_id: str = ""
    client_host: str = ""
    # Whether the member's principal may DESCRIBE a topic: a regex subscription resolves to
    # those only (None: no authorizer, every topic).
    can_describe: Callable[[str], bool] | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: unchanged since the last answer


class RegexMatcher:
    """Full matches of subscription patterns against topic names, remembered (each pair is
    evaluated once) and time-limited: a pattern that backtracks for longer than
    `MATCH_TIMEOUT` on a name is taken as not matching it."""

    MATCH_TIMEOUT = 0.005  # seconds
    _MAX_REMEMBERED = 100_000

    def __init__(self) -> None:
        self._compiled: dict[str, Any] = {}
        self._matches: dict[tuple[str, str], bool] = {}

    def compile(self, pattern: str) -> Any:
        """The compiled pattern; regex.error if it does not compile."""
        compiled = self._compiled.get(pattern)
        if compiled is None:
            if len(self._compiled) > 1000:
                self._compiled.clear()
            compiled = self._compiled[pattern] = regex.compile(pattern)
        return compiled

    def matches(self, pattern: str, name: str) -> bool:
        known = self._matches.get((pattern, name))
        if known is not None:
            return known
        try:
            found = self.compile(pattern).fullmatch(name, timeout=self.MATCH_TIMEOUT) is not None
        except regex.error:
            found = False
        except TimeoutError:
            log.warning("pattern %r took too long on topic %r: taken as no match", pattern, name)
            found = False
        if len(self._matches) > self._MAX_REMEMBERED:
            self._matches.clear()
        self._matches[(pattern, name)] = found
        return found


class ConsumerGroups:
    """Every consumer group of this node. `classic_busy(group_id)` says whether a classic
    group with members holds the id; `claim(group_id)` drops an empty classic group of
    that id (the conversion to a consumer group)."""

    def __init__(
        self,
        settings: ConsumerGroupSettings | None = None,
        classic_busy: Callable[[str], bool] = lambda _g: False,
        claim: Callable[[str], None] = lambda _g: None,
    ) -> None:
        self.settings = settings or ConsumerGroupSettings()
        # Per-group configs (core/configs/group.py); None: the settings for every group.
        self.group_configs: GroupConfigs | None = None
        self.groups: dict[str, ConsumerGroup] = {}
        self._classic_busy = classic_busy
        self._claim = claim
        self._matcher = RegexMatcher()

    # --- heartbeat ---------------------------------------------------------------------

    def _seconds(self, group_id: str, name: str, default: float) -> float:
        """The group's own config `name` (ms) in seconds, else `default`."""
        if self.group_configs is None:
            return default
        return self.group_configs.int_value(group_id, name) / 1000

    def heartbeat(self, req: HeartbeatRequest, topics: TopicCatalogue) -> HeartbeatResult:
        if not req.group_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if req.server_assignor is not None and req.server_assignor not in ASSIGNORS:
            return HeartbeatResult(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(sorted(ASSIGNORS))}.",
            )
        if req.subscribed_regex:
            try:
                self._matcher.compile(req.subscribed_regex)
            except regex.error as exc:
                return HeartbeatResult(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc))
        if req.member_epoch == 0:
            missing = _missing_on_join(req)
            if missing:
                return HeartbeatResult(
                    ErrorCode.INVALID_REQUEST, f"{missing} must be set in the first request."
                )
        now = trio.current_time()
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(req)
        group = self.groups.get(req.group_id)
        if req.member_epoch == 0:
            if group is None:
                if self._classic_busy(req.group_id):
                    return HeartbeatResult(
                        ErrorCode.GROUP_ID_NOT_FOUND,
                        f"Group {req.group_id} is not a consumer group.",
                    )
                self._claim(req.group_id)
                group = self.groups[req.group_id] = ConsumerGroup(req.group_id)
            joined = self._join(group, req)
            if isinstance(joined, HeartbeatResult):
                return joined
            member = joined
        else:
            member_or_error = self._known_member(group, req)
            if isinstance(member_or_error, HeartbeatResult):
                return member_or_error
            member = member_or_error
            assert group is not None
        member.session_deadline = now + self._seconds(
            req.group_id, CONSUMER_SESSION_TIMEOUT, self.settings.session_timeout
        )
        changed = self._update_subscription(member, req)
        # A new member (not a returning static one) changes the assignment too.
        changed |= req.member_epoch == 0 and member.epoch == 0
        self._refresh_target(group, topics, changed)
        reconcile(group, member, req.owned, now)
        assignment: TopicPartitions | None = None
        sent = (member.epoch, member.assigned)
        if member.last_sent != sent or req.owned is not None and req.owned != member.assigned:
            assignment = member.assigned
            member.last_sent = sent
        return HeartbeatResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=int(
                self._seconds(
                    req.group_id, CONSUMER_HEARTBEAT_INTERVAL, self.settings.heartbeat_interval
                )
                * 1000
            ),
            assignment=assignment,
        )

    def _join(
        self, group: ConsumerGroup, req: HeartbeatRequest
    ) -> ConsumerMember | HeartbeatResult:
        member_id = req.member_id or str(uuid.uuid4())  # v0 clients let the server choose
        member = ConsumerMember(
            member_id,
            req.instance_id,
            req.rack_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout if req.rebalance_timeout is not None else 300.0,
        )
        if req.instance_id is not None:
            old_id = group.static_members.get(req.instance_id)
            old = group.members.get(old_id) if old_id is not None else None
            if old is not None and old.member_id != member_id:
                if old.epoch != STATIC_LEAVE_EPOCH:
                    return HeartbeatResult(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {old.member_id} with instance id {req.instance_id} "
                        "is present in the group.",
                    )
                member.subscribed_names = old.subscribed_names
                member.subscribed_regex = old.subscribed_regex
                member.server_assignor = old.server_assignor
                group.replace_static(old, member)
                log.info("group %s: static member %s is back", group.group_id, req.instance_id)
                return member
        previous = group.members.get(member_id)
        if previous is not None:
            # A member that lost its state joins again: it owns nothing any more.
            group.remove(member_id)
        elif len(group.members) >= self.settings.max_size:
            return HeartbeatResult(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.settings.max_size} members.",
            )
        group.add(member)
        log.info("group %s: member %s joins", group.group_id, member_id)
        return member

    def _known_member(
        self, group: ConsumerGroup | None, req: HeartbeatRequest
    ) -> ConsumerMember | HeartbeatResult:
        member = group.members.get(req.member_id) if group is not None else None
        if member is None:
            return HeartbeatResult(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {req.group_id}.",
            )
        if req.member_epoch > member.epoch or (
            req.member_epoch < member.epoch
            and (
                req.member_epoch != member.previous_epoch
                or (req.owned is not None and not is_subset(req.owned, member.assigned))
            )
        ):
            return HeartbeatResult(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The member epoch {req.member_epoch} is fenced; "
                f"the member's epoch is {member.epoch}.",
            )
        return member

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if group is None or member is None:
            return HeartbeatResult(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {req.group_id}.",
            )
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # Keeps its partitions for a session timeout, waiting for the instance to return.
            if member.epoch != STATIC_LEAVE_EPOCH:
                member.previous_epoch, member.epoch = member.epoch, STATIC_LEAVE_EPOCH
            log.info(
                "group %s: static member %s leaves for now", group.group_id, member.instance_id
            )
        else:
            self._remove(group, member, "left the group")
        return HeartbeatResult(
            ErrorCode.NONE, member_id=req.member_id, member_epoch=req.member_epoch
        )

    def _remove(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        group.remove(member.member_id)
        group.epoch += 1
        log.info(
            "group %s: member %s %s (epoch %d)", group.group_id, member.member_id, why, group.epoch
        )

    @staticmethod
    def _update_subscription(member: ConsumerMember, req: HeartbeatRequest) -> bool:
        changed = False
        if req.subscribed_names is not None and req.subscribed_names != member.subscribed_names:
            member.subscribed_names = req.subscribed_names
            changed = True
        if req.subscribed_regex is not None:
            regex = req.subscribed_regex or None  # "" clears it
            if regex != member.subscribed_regex:
                member.subscribed_regex = regex
                changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            changed = True
        if req.rebalance_timeout is not None:
            member.rebalance_timeout = req.rebalance_timeout
        member.can_describe = req.can_describe
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        return changed

    # --- target assignment ---------------------------------------------------------------

    def subscriptions(
        self, group: ConsumerGroup, topics: TopicCatalogue
    ) -> tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int], dict[uuid.UUID, str]]:
        """Each member's subscribed topic ids, the partition count and name of each."""
        all_topics: list[TopicInfo] | None = None
        counts: dict[uuid.UUID, int] = {}
        names: dict[uuid.UUID, str] = {}
        members: dict[str, frozenset[uuid.UUID]] = {}
        for member in group.members.values():
            ids: set[uuid.UUID] = set()
            for name in member.subscribed_names:
                topic = topics.get(name)
                if topic is not None:
                    ids.add(topic.topic_id)
                    counts[topic.topic_id], names[topic.topic_id] = topic.partition_count, name
            if member.subscribed_regex:
                if all_topics is None:
                    all_topics = list(topics.topics())
                for topic in all_topics:
                    if self._matcher.matches(member.subscribed_regex, topic.name) and (
                        member.can_describe is None or member.can_describe(topic.name)
                    ):
                        ids.add(topic.topic_id)
                        counts[topic.topic_id] = topic.partition_count
                        names[topic.topic_id] = topic.name
            members[member.member_id] = frozenset(ids)
        return members, counts, names

    def _refresh_target(self, group: ConsumerGroup, topics: TopicCatalogue, changed: bool) -> None:
        """Bump the group epoch (once) if the member changed what the assignment depends
        on or the subscribed topics' partitions changed; then compute the target
        assignment if it is behind the group epoch."""
        members, counts, _names = self.subscriptions(group, topics)
        metadata = frozenset(counts.items())
        if metadata != group.subscribed_metadata:
            group.subscribed_metadata = metadata
            changed = True
        if changed:
            group.epoch += 1
        if group.assignment_epoch >= group.epoch:
            return
        assign = ASSIGNORS[self.assignor_of(group)]
        active = {m: ids for m, ids in members.items()}
        group.target = assign(AssignmentSpec(active, counts, group.target))
        group.assignment_epoch = group.epoch
        log.info(
            "group %s: target assignment of epoch %d for %d members",
            group.group_id,
            group.epoch,
            len(active),
        )

    @staticmethod
    def assignor_of(group: ConsumerGroup) -> str:
        """The assignor most members asked for (the default if none did)."""
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        return votes.most_common(1)[0][0] if votes else DEFAULT_ASSIGNOR

    # --- offsets, expiry, deletion ---------------------------------------------------------

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit/OffsetFetch from a consumer group member: the member must exist and
        send its epoch (the one before also passes: a commit may cross the heartbeat that
        moved the member on). An empty group accepts admin commits (epoch < 0)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE
        if member_epoch < 0 and not member_id and not group.members:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch not in (member.epoch, member.previous_epoch):
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def expire(self, now: float) -> None:
        """Remove members whose session ended or that did not revoke in time."""
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                if member.session_deadline <= now:
                    self._remove(group, member, "expired (session timeout)")
                elif (
                    member.state is MemberState.UNREVOKED_PARTITIONS
                    and member.revocation_deadline <= now
                ):
                    self._remove(group, member, "did not revoke in its rebalance timeout")

    async def run_expiry(self, tick: float = 0.2) -> None:
        while True:
            await trio.sleep(tick)
            try:
                self.expire(trio.current_time())
            except Exception:  # a bug here must not take the gateway down
                log.exception("consumer group expiry failed")

    def drop_if_empty(self, group_id: str) -> bool:
        """Forget an empty consumer group (its id goes back to the classic protocol, or is
        deleted); False if it has members."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        del self.groups[group_id]
        return True


def _missing_on_join(req: HeartbeatRequest) -> str | None:
    """What a joining member's heartbeat lacks, as Kafka checks it (None: nothing)."""
    if req.rebalance_timeout is None:
        return "RebalanceTimeoutMs"
    if req.subscribed_names is None and req.subscribed_regex is None:
        return "SubscribedTopicNames or SubscribedTopicRegex"
    if req.owned is None:
        return "TopicPartitions"
    return None
