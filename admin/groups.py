"""Consumer groups as the console and /metrics show them: members, assignments, lag."""

from __future__ import annotations

from typing import Any

from core.groups import GroupCoordinator
from core.groups.consumer_protocol import assigned_partitions
from core.store import StreamStore


def group_ids(groups: GroupCoordinator) -> list[str]:
    """Live groups and groups that only have committed offsets, sorted."""
    live = {g.group_id for g in groups.list_groups()}
    return sorted(live | set(groups.offsets.group_ids()))


def describe_group(store: StreamStore, groups: GroupCoordinator, group_id: str) -> dict[str, Any]:
    """Members with their assignments, and per partition the committed offset, the end
    (high watermark) and the lag (None where unknown: no commit yet)."""
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
    committed = {(c.topic, c.partition): c.offset for c in groups.all_committed(group_id)}
    offsets = []
    for topic, partition in sorted(committed.keys() | owner.keys()):
        stream = store.streams.get(topic)
        end = None
        if stream is not None and stream.has_partition(partition):
            end = stream.partition(partition).high_watermark
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
    return {
        "group_id": group_id,
        "state": group.state.value if group is not None else "Empty",
        "protocol_type": group.protocol_type if group is not None else None,
        "protocol": group.protocol_name if group is not None else None,
        "generation": group.generation_id if group is not None else 0,
        "members": members,
        "offsets": offsets,
    }
