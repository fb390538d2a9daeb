"""The share-group coordinator: membership (ShareGroupHeartbeat), share sessions, record
acquisition (ShareFetch) and acknowledgements (ShareFetch, ShareAcknowledge).

Every change to a share partition is persisted in the metadata store before the request
that made it is answered, so an acknowledgement the client saw succeed survives a restart
or SIGKILL, and so do delivery counts. Acquisition locks are not persisted: after a
restart no member holds anything, and acquired records are available again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from core.api import Store, StoreError, Topic
from core.configs.group import (
    SHARE_AUTO_OFFSET_RESET,
    SHARE_HEARTBEAT_INTERVAL,
    SHARE_RECORD_LOCK_DURATION,
    SHARE_SESSION_TIMEOUT,
    GroupConfigs,
)
from core.failure_log import FailureLog
from core.metadata.interface import MetadataStore
from core.recordbatch import iter_stored_batches

from .errors import ShareError
from .group import ShareGroup, ShareMember, TopicPartition, assign
from .partition import AckType, Acquired, SharePartition, Snapshot

log = logging.getLogger(__name__)
T = TypeVar("T")
Offload = Callable[..., Awaitable[Any]]
PartitionKey = tuple[str, str, int]  # (group, topic, partition)


@dataclass(slots=True)
class ShareSettings:
    """Kafka's broker defaults for share groups (group.share.*), in their units."""

    record_lock_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    auto_offset_reset: str = "latest"  # share.auto.offset.reset (earliest, latest)
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_record_locks: int = 2_000  # group.share.partition.max.record.locks


@dataclass(slots=True)
class HeartbeatResult:
    error: ShareError
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    assignment: dict[str, list[int]] | None = None  # topic name -> partitions


@dataclass(slots=True)
class FetchedPartition:
    error: ShareError = ShareError.NONE
    message: str | None = None
    batches: list[bytes] = field(default_factory=list)
    acquired: list[Acquired] = field(default_factory=list)


@dataclass(slots=True)
class AckBatch:
    first: int
    last: int
    types: list[int]


@dataclass(slots=True)
class ShareSession:
    epoch: int
    partitions: set[TopicPartition]


class ShareCoordinator:
    def record_lock_ms(self, group_id: str) -> int:
        return int(self._group_value(group_id, SHARE_RECORD_LOCK_DURATION, "record_lock_ms"))

    def session_timeout_ms(self, group_id: str) -> int:
        return int(self._group_value(group_id, SHARE_SESSION_TIMEOUT, "session_timeout_ms"))

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self._group_value(group_id, SHARE_HEARTBEAT_INTERVAL, "heartbeat_interval_ms"))

    def _group_value(self, group_id: str, name: str, setting: str) -> str:
        """The group's own config `name`, else the gateway's `setting`."""
        if self.group_configs is None:
            return str(getattr(self.settings, setting))
        return self.group_configs.value(group_id, name)

    def __init__(
        self,
        store: Store,
        metadata: MetadataStore,
        settings: ShareSettings | None = None,
        offload: Offload | None = None,
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.settings = settings or ShareSettings()
        # Per-group configs (core/configs/group.py); None: the settings for every group.
        self.group_configs: GroupConfigs | None = None
        self._offload = offload
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._released = trio.Event()  # set (and replaced) when records become available
        self._stopped = False
        self._failures = FailureLog("share groups: ", log, every_s=30.0)
        self._deleted_topics: set[str] = set()

    # --- lifecycle ---------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the persisted share partitions, then expire locks and silent members."""
        rows = await self._call(self.metadata.load_share_partitions)
        for group_id, topic, index, start, end, records in rows:
            snapshot = Snapshot(start, end, [tuple(r) for r in json.loads(records)])  # type: ignore[misc]
            self.partitions[(group_id, topic, index)] = SharePartition.restore(snapshot)
        task_status.started()
        while not self._stopped:
            await trio.sleep(0.05)
            try:
                await self.tick(trio.current_time())
            except StoreError as exc:  # the database is away (or closing): next tick
                if self._stopped:
                    return
                self._failures.failed("share state", exc)

    def stop(self) -> None:
        self._stopped = True

    async def tick(self, now: float) -> None:
        """Release expired locks (persisting records archived by it) and drop members
        whose session timed out."""
        limit = self.settings.delivery_count_limit
        changed = []
        for key, part in self.partitions.items():
            if part.expire_locks(now, limit):  # cheap unless a lock is due
                self._wake()
                changed.append(key)  # records at the limit were archived, maybe
        for group in list(self.groups.values()):
            timeout = self.session_timeout_ms(group.group_id) / 1000
            for member in list(group.members.values()):
                if now - member.last_seen > timeout:
                    log.info(
                        "share group %s: member %s timed out", group.group_id, member.member_id
                    )
                    changed.extend(self._remove_member(group, member.member_id))
        if changed:
            await self._persist(changed)
        for topic in list(self._deleted_topics):  # a row left by a failure goes next tick
            await self._call(self.metadata.delete_share_partitions, None, topic)
            self._deleted_topics.discard(topic)

    def on_topic_deleted(self, topic: str) -> None:
        """Forget the topic's share partitions (their rows go on the next tick)."""
        for key in [k for k in self.partitions if k[1] == topic]:
            del self.partitions[key]
        self._deleted_topics.add(topic)

    # --- membership --------------------------------------------------------------------

    async def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        subscribed: Iterable[str] | None,
        rack_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
    ) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(ShareError.INVALID_GROUP_ID, "the group id is empty")
        if not member_id:
            return HeartbeatResult(ShareError.INVALID_REQUEST, "the member id is empty")
        now = trio.current_time()
        group = self.groups.get(group_id)
        if member_epoch == -1:
            if group is not None and member_id in group.members:
                changed = self._remove_member(group, member_id)
                await self._persist(changed)
            return HeartbeatResult(ShareError.NONE, member_id=member_id, member_epoch=-1)
        if member_epoch == 0:
            if subscribed is None:
                return HeartbeatResult(
                    ShareError.INVALID_REQUEST, "a joining member names its topics"
                )
            group = self.groups.setdefault(group_id, ShareGroup(group_id))
            member = group.members.get(member_id)
            if member is None:
                member = group.members[member_id] = ShareMember(member_id)
            member.epoch = 0
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(
                    ShareError.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group"
                )
            if member_epoch != member.epoch:
                return HeartbeatResult(
                    ShareError.FENCED_MEMBER_EPOCH,
                    f"epoch {member_epoch}, the member is at {member.epoch}",
                )
        member.last_seen = now
        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None:
            member.subscribed = tuple(sorted(set(subscribed)))
        await self._reassign(group)
        result = HeartbeatResult(ShareError.NONE, member_id=member_id)
        if member.epoch != group.epoch:
            member.epoch = group.epoch
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(member.assignment):
                by_topic.setdefault(topic, []).append(index)
            result.assignment = by_topic
        result.member_epoch = member.epoch
        return result

    async def _reassign(self, group: ShareGroup) -> None:
        """Recompute the target assignment; a change bumps the group epoch, and every
        newly assigned share partition is initialised (and persisted) now, so records
        produced from here on are delivered even with auto offset reset `latest`."""
        counts: dict[str, int] = {}
        for topic in group.subscribed_topics():
            stream = self.store.get(topic)
            if stream is not None:
                counts[topic] = stream.partition_count
        target = assign(group.members, counts)
        if all(group.members[m].assignment == frozenset(t) for m, t in target.items()):
            if group.epoch == 0:
                group.epoch = 1
            return
        group.epoch += 1
        for member_id, partitions in target.items():
            group.members[member_id].assignment = frozenset(partitions)
        new = []
        for topic, index in {tp for parts in target.values() for tp in parts}:
            key = (group.group_id, topic, index)
            if key not in self.partitions:
                stream = self.store.get(topic)
                if stream is not None and stream.has_partition(index):
                    self.partitions[key] = self._initial(group.group_id, stream, index)
                    new.append(key)
        await self._persist(new)

    def _initial(self, group_id: str, stream: Topic, index: int) -> SharePartition:
        view = stream.partition(index)
        if self._group_value(group_id, SHARE_AUTO_OFFSET_RESET, "auto_offset_reset") == "earliest":
            return SharePartition(view.log_start_offset)
        return SharePartition(view.high_watermark)

    def _remove_member(self, group: ShareGroup, member_id: str) -> list[PartitionKey]:
        """Drop a member: its acquired records are released, its session closed."""
        group.members.pop(member_id, None)
        group.epoch += 1
        self.sessions.pop((group.group_id, member_id), None)
        changed = self._release_member(group.group_id, member_id)
        for other in group.members.values():  # the rest is recomputed on their heartbeats
            other.assignment = frozenset()
        return changed

    def _release_member(self, group_id: str, member_id: str) -> list[PartitionKey]:
        changed = []
        limit = self.settings.delivery_count_limit
        for key, part in self.partitions.items():
            if key[0] == group_id and part.release_member(member_id, limit):
                changed.append(key)
        if changed:
            self._wake()
        return changed

    # --- share sessions and fetches ------------------------------------------------------

    def open_session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[TopicPartition],
        forgotten: Iterable[TopicPartition],
    ) -> tuple[ShareError, ShareSession | None]:
        """Apply a ShareFetch's session epoch: 0 opens (or reopens) the session with the
        request's partitions; a later epoch adds and forgets partitions."""
        key = (group_id, member_id)
        if epoch == 0:
            opened = self.sessions[key] = ShareSession(0, set(added))
            return ShareError.NONE, opened
        session = self.sessions.get(key)
        if session is None:
            return ShareError.SHARE_SESSION_NOT_FOUND, None
        session.epoch = epoch
        session.partitions.update(added)
        session.partitions.difference_update(forgotten)
        return ShareError.NONE, session

    async def close_session(self, group_id: str, member_id: str) -> None:
        """The member closed its share session: what it still holds is released."""
        self.sessions.pop((group_id, member_id), None)
        await self._persist(self._release_member(group_id, member_id))

    def has_session(self, group_id: str, member_id: str) -> bool:
        return (group_id, member_id) in self.sessions

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic: str,
        index: int,
        batches: list[AckBatch],
        changed: list[PartitionKey],
    ) -> ShareError:
        """Apply acknowledgements to one partition (persisted by the caller through
        `persist(changed)`): the first error, or NONE."""
        key = (group_id, topic, index)
        part = self.partitions.get(key)
        if part is None:
            return ShareError.INVALID_RECORD_STATE
        limit = self.settings.delivery_count_limit
        error = ShareError.NONE
        deadline = trio.current_time() + self.record_lock_ms(group_id) / 1000
        for batch in batches:
            result = part.acknowledge(member_id, batch.first, batch.last, batch.types, limit)
            if result is ShareError.NONE and AckType.RENEW in batch.types:
                part.renew(member_id, batch.first, batch.last, deadline)
            if result is not ShareError.NONE and error is ShareError.NONE:
                error = result
            if result is ShareError.NONE and any(t == AckType.RELEASE for t in batch.types):
                self._wake()
        changed.append(key)
        return error

    async def acquire(
        self,
        group_id: str,
        member_id: str,
        stream: Topic,
        index: int,
        max_records: int,
        max_bytes: int,
    ) -> FetchedPartition:
        """Read the partition and acquire up to `max_records` records for the member:
        available ones first (redeliveries), then new ones past the end."""
        key = (group_id, stream.name, index)
        part = self.partitions.get(key)
        if part is None:
            part = self.partitions[key] = self._initial(group_id, stream, index)
        out = FetchedPartition()
        view = stream.partition(index)
        if part.start < view.log_start_offset:  # records deleted under the window
            part.records = {o: r for o, r in part.records.items() if o >= view.log_start_offset}
            part.start = view.log_start_offset
            part.end = max(part.end, part.start)
        settings = self.settings
        deadline = trio.current_time() + self.record_lock_ms(group_id) / 1000
        budget = max_records
        for _ in range(4):  # a few reads at most per fetch
            position = part.first_available()
            if position is None:
                if part.in_flight() >= settings.max_record_locks:
                    break
                position = part.end
            if position >= view.high_watermark:
                break
            result = await stream.read(index, position, max_bytes)
            if result.error:
                out.error = ShareError.UNKNOWN_TOPIC_OR_PARTITION
                out.message = f"read failed (error {result.error})"
                break
            progressed = False
            for chunk in result.batches or []:
                for pos, header in iter_stored_batches(chunk):
                    if header.last_offset < position:
                        continue
                    if not progressed and header.base_offset > position:
                        part.vanished(position, header.base_offset - 1)  # compacted away
                    progressed = True
                    if header.is_control:
                        part.skip(header.base_offset, header.last_offset)
                        continue
                    runs = part.acquire(
                        header.base_offset,
                        header.last_offset,
                        member_id,
                        deadline,
                        settings.delivery_count_limit,
                        budget,
                        settings.max_record_locks,
                    )
                    if runs:
                        out.batches.append(bytes(chunk[pos : pos + header.total_size]))
                        out.acquired.extend(runs)
                        budget -= sum(r.last - r.first + 1 for r in runs)
                    if budget <= 0:
                        break
                if budget <= 0:
                    break
            if budget <= 0 or not progressed or out.acquired:
                break
        return out

    async def wait_for_records(self, watched: list[Any], deadline: float) -> None:
        """Wait until a watched partition gets new data or records are released."""
        event = trio.Event()
        for view in watched:
            view.add_waiter(event)
        released = self._released
        try:
            with trio.move_on_at(deadline):
                async with trio.open_nursery() as nursery:

                    async def on(ev: trio.Event) -> None:
                        await ev.wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(on, event)
                    nursery.start_soon(on, released)
        finally:
            for view in watched:
                view.remove_waiter(event)

    def _wake(self) -> None:
        self._released.set()
        self._released = trio.Event()

    # --- persistence ---------------------------------------------------------------------

    async def persist(self, keys: Iterable[PartitionKey]) -> None:
        await self._persist(keys)

    async def _persist(self, keys: Iterable[PartitionKey]) -> None:
        rows = []
        for key in dict.fromkeys(keys):
            part = self.partitions.get(key)
            if part is None:
                continue
            snap = part.snapshot()
            rows.append((key[0], key[1], key[2], snap.start, snap.end, json.dumps(snap.records)))
        if rows:
            await self._call(self.metadata.save_share_partitions, rows)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._offload is None:
            return fn(*args)
        result: T = await self._offload(fn, *args)
        return result

    # --- admin -------------------------------------------------------------------------

    def group(self, group_id: str) -> ShareGroup | None:
        group = self.groups.get(group_id)
        if group is None and any(k[0] == group_id for k in self.partitions):
            group = ShareGroup(group_id)  # known by its persisted state alone: Empty
        return group

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | {k[0] for k in self.partitions})

    def start_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        return {(k[1], k[2]): p.start for k, p in self.partitions.items() if k[0] == group_id}

    async def alter_start_offsets(
        self, group_id: str, offsets: dict[TopicPartition, int]
    ) -> ShareError:
        """Reset share partitions' start offsets (only while the group has no members)."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ShareError.NON_EMPTY_GROUP
        keys = []
        for (topic, index), offset in offsets.items():
            key = (group_id, topic, index)
            self.partitions.setdefault(key, SharePartition(offset)).reset(offset)
            keys.append(key)
        await self._persist(keys)
        return ShareError.NONE

    async def delete_group(self, group_id: str) -> ShareError:
        """DeleteGroups: forget an empty share group and all its share state."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ShareError.NON_EMPTY_GROUP
        self.groups.pop(group_id, None)
        for key in [k for k in self.partitions if k[0] == group_id]:
            del self.partitions[key]
        await self._call(self.metadata.delete_share_partitions, group_id)
        return ShareError.NONE

    async def delete_start_offsets(self, group_id: str, topics: list[str]) -> ShareError:
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ShareError.NON_EMPTY_GROUP
        for topic in topics:
            for key in [k for k in self.partitions if k[0] == group_id and k[1] == topic]:
                del self.partitions[key]
            await self._call(self.metadata.delete_share_partitions, group_id, topic)
        return ShareError.NONE


def new_member_id() -> str:
    return str(uuid.uuid4())
