"""Consumer groups as the console and /metrics show them: members, assignments, lag.

Three kinds share one group id namespace: classic groups (JoinGroup/SyncGroup),
consumer groups (`group.protocol=consumer`, ConsumerGroupHeartbeat) and share groups
(ShareGroupHeartbeat). Classic and consumer groups commit offsets, so they have lag per
partition; a share group has instead, per partition, a share-partition window: its start
(everything before it is done), its end (everything before it was handed out at least once)
and the records in flight between the two.
"""

from __future__ import annotations

from typing import Any

from core.groups import GroupCoordinator
from core.groups.assignors import TopicPartitions
from core.groups.consumer_coordinator import ConsumerGroups
from core.groups.consumer_group import ConsumerGroup
from core.groups.consumer_protocol import assigned_partitions
from core.sharegroups.coordinator import ShareCoordinator
from core.store import StreamStore

CLASSIC, CONSUMER, SHARE = "classic", "consumer", "share"


def group_ids(groups: GroupCoordinator, shares: ShareCoordinator | None = None) -> list[str]:
    """Live groups of every kind and groups that only have committed offsets or persisted
    share state, sorted."""
    live = {g.group_id for g in groups.list_groups()} | set(groups.consumer.groups)
    if shares is not None:
        live |= set(shares.group_ids())
    return sorted(live | set(groups.offsets.group_ids()))


def group_type(groups: GroupCoordinator, shares: ShareCoordinator | None, group_id: str) -> str:
    if group_id in groups.consumer.groups:
        return CONSUMER
    if shares is not None and shares.group(group_id) is not None:
        return SHARE
    return CLASSIC


def describe_group(
    store: StreamStore,
    groups: GroupCoordinator,
    group_id: str,
    shares: ShareCoordinator | None = None,
) -> dict[str, Any]:
    """The group, by kind: `type` is classic, consumer or share. Classic and consumer
    groups list per partition the committed offset, the end (high watermark) and the lag
    (None where unknown: no commit yet); share groups list `share_partitions`."""
    kind = group_type(groups, shares, group_id)
    if kind == SHARE:
        assert shares is not None
        return _describe_share(store, shares, group_id)
    if kind == CONSUMER:
        return _describe_consumer(store, groups, groups.consumer.groups[group_id])
    return _describe_classic(store, groups, group_id)


def summary(described: dict[str, Any]) -> dict[str, Any]:
    """One row of the groups list."""
    if described["type"] == SHARE:
        lag = sum(p["lag"] or 0 for p in described["share_partitions"])
    else:
        lag = sum(o["lag"] or 0 for o in described["offsets"])
    return {
        "group_id": described["group_id"],
        "type": described["type"],
        "state": described["state"],
        "protocol_type": described["protocol_type"],
        "members": len(described["members"]),
        "lag": lag,
    }


def _describe_classic(
    store: StreamStore, groups: GroupCoordinator, group_id: str
) -> dict[str, Any]:
    group = groups.group(group_id)
    members = []
    owner: dict[tuple[str, int], str] = {}
    if group is not None:
        for member in group.members.values():
            try:
                assignment = assigned_partitions(member.assignment)
            except Exception:  # noqa: BLE001 - a non-consumer protocol: opaque bytes
                assignment = {}
            for topic, partitions in assignment.items():
                for partition in partitions:
                    owner[(topic, partition)] = member.member_id
            members.append(
                {
                    "member_id": member.member_id,
                    "group_instance_id": member.group_instance_id,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "assignment": assignment,
                }
            )
    return {
        "group_id": group_id,
        "type": CLASSIC,
        "state": group.state.value if group is not None else "Empty",
        "protocol_type": group.protocol_type if group is not None else None,
        "protocol": group.protocol_name if group is not None else None,
        "generation": group.generation_id if group is not None else 0,
        "members": members,
        "offsets": _offsets(store, groups, group_id, owner),
    }


def _describe_consumer(
    store: StreamStore, groups: GroupCoordinator, group: ConsumerGroup
) -> dict[str, Any]:
    members = []
    owner: dict[tuple[str, int], str] = {}
    for member in group.members.values():
        assignment = _by_name(store, member.assigned)
        for topic, partitions in assignment.items():
            for partition in partitions:
                owner[(topic, partition)] = member.member_id
        members.append(
            {
                "member_id": member.member_id,
                "group_instance_id": member.instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_epoch": member.epoch,
                "member_state": member.state.value,
                "subscribed": list(member.subscribed_names),
                "subscribed_regex": member.subscribed_regex,
                "assignment": assignment,
                "revoking": _by_name(store, member.pending_revocation),
            }
        )
    return {
        "group_id": group.group_id,
        "type": CONSUMER,
        "state": group.state().value,
        "protocol_type": CONSUMER,
        "protocol": ConsumerGroups.assignor_of(group),
        "generation": group.epoch,
        "assignment_epoch": group.assignment_epoch,
        "members": members,
        "offsets": _offsets(store, groups, group.group_id, owner),
    }


def _describe_share(store: StreamStore, shares: ShareCoordinator, group_id: str) -> dict[str, Any]:
    group = shares.group(group_id)
    assert group is not None
    members = []
    readers: dict[tuple[str, int], list[str]] = {}
    for member in group.members.values():
        assignment: dict[str, list[int]] = {}
        for topic, partition in sorted(member.assignment):
            assignment.setdefault(topic, []).append(partition)
            readers.setdefault((topic, partition), []).append(member.member_id)
        members.append(
            {
                "member_id": member.member_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_epoch": member.epoch,
                "subscribed": list(member.subscribed),
                "assignment": assignment,
            }
        )
    windows = {
        (topic, partition): part
        for (gid, topic, partition), part in list(shares.partitions.items())
        if gid == group_id
    }
    rows = []
    for topic, partition in sorted(windows.keys() | readers.keys()):
        end = _high_watermark(store, topic, partition)
        part = windows.get((topic, partition))
        counts = part.counts() if part is not None else {}
        start = part.start if part is not None else None
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "start": start,
                "end": part.end if part is not None else None,
                "high_watermark": end,
                # records not yet done: from the start to the high watermark
                "lag": None if end is None or start is None else max(0, end - start),
                "in_flight": part.in_flight() if part is not None else 0,
                "acquired": counts.get("acquired", 0),
                "available": counts.get("available", 0),
                "members": readers.get((topic, partition), []),
            }
        )
    return {
        "group_id": group_id,
        "type": SHARE,
        "state": group.state,
        "protocol_type": SHARE,
        "protocol": None,
        "generation": group.epoch,
        "members": members,
        "share_partitions": rows,
    }


def _offsets(
    store: StreamStore, groups: GroupCoordinator, group_id: str, owner: dict[tuple[str, int], str]
) -> list[dict[str, Any]]:
    committed = {(c.topic, c.partition): c.offset for c in groups.all_committed(group_id)}
    offsets = []
    for topic, partition in sorted(committed.keys() | owner.keys()):
        end = _high_watermark(store, topic, partition)
        offset = committed.get((topic, partition))
        lag = None if end is None or offset is None else max(0, end - offset)
        offsets.append(
            {
                "topic": topic,
                "partition": partition,
                "committed": offset,
                "end": end,
                "lag": lag,
                "member": owner.get((topic, partition)),
            }
        )
    return offsets


def _high_watermark(store: StreamStore, topic: str, partition: int) -> int | None:
    stream = store.streams.get(topic)
    if stream is None or not stream.has_partition(partition):
        return None
    return stream.partition(partition).high_watermark


def _by_name(store: StreamStore, partitions: TopicPartitions) -> dict[str, list[int]]:
    """Topic-id keyed partitions by topic name (a deleted topic by its id)."""
    out: dict[str, list[int]] = {}
    for topic_id, indexes in partitions.items():
        stream = store.topic_by_id(topic_id)
        name = stream.name if stream is not None else str(topic_id)
        out.setdefault(name, []).extend(sorted(indexes))
    return out
