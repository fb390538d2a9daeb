"""`streamgate groups list` and `streamgate groups describe GROUP`.

They talk to a running gateway over the Kafka protocol (`kafkaclient`), the way
`kafka-consumer-groups --list/--describe` talks to a broker: ListGroups (with the group
type: classic or consumer); ConsumerGroupDescribe or DescribeGroups for members and their
assignments, OffsetFetch for committed offsets and ListOffsets (latest)
for log end offsets, from which the lag follows.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from core.groups.consumer_protocol import assigned_partitions
from kafkaclient.client import KafkaClient, KafkaClientError
from kafkawire.apis import ApiKey

_LATEST = -1
_DEAD = "Dead"
# The versions this tool speaks (the gateway supports all of them).
_LIST_GROUPS_V = 5
_DESCRIBE_GROUPS_V = 5
_CONSUMER_GROUP_DESCRIBE_V = 0
_OFFSET_FETCH_V = 7
_LIST_OFFSETS_V = 7


def register(commands: Any) -> None:
    """Add the `groups` command with its `list` and `describe` subcommands."""
    default_bootstrap = os.environ.get("STREAMGATE_BOOTSTRAP", "127.0.0.1:9092")
    groups = commands.add_parser("groups", help="list and describe consumer groups")
    groups.set_defaults(run=run_groups)
    actions = groups.add_subparsers(dest="groups_command", required=True)
    for name, help_text in (
        ("list", "list the consumer groups"),
        ("describe", "show a group's partitions, offsets, lag and members"),
    ):
        action = actions.add_parser(name, help=help_text)
        if name == "describe":
            action.add_argument("group", help="the group id")
        action.add_argument(
            "--bootstrap",
            default=default_bootstrap,
            help="gateway address HOST:PORT (STREAMGATE_BOOTSTRAP, default 127.0.0.1:9092)",
        )


def run_groups(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run a `groups` subcommand; returns the exit code (1: no such group, 2: no gateway)."""
    try:
        with KafkaClient(args.bootstrap) as client:
            if args.groups_command == "list":
                return list_groups(client, out)
            return describe_group(client, args.group, out)
    except KafkaClientError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2


def list_groups(client: KafkaClient, out: TextIO) -> int:
    response = client.request(ApiKey.LIST_GROUPS, _LIST_GROUPS_V, {"states_filter": []})
    rows = [
        [g.group_id, g.group_state, g.protocol_type or "-", g.group_type or "-"]
        for g in sorted(response.groups, key=lambda g: g.group_id)
    ]
    out.write(format_table(["GROUP", "STATE", "PROTOCOL-TYPE", "TYPE"], rows))
    return 0


@dataclass(slots=True)
class _Owner:
    consumer_id: str = "-"
    host: str = "-"
    client_id: str = "-"


def describe_group(client: KafkaClient, group_id: str, out: TextIO) -> int:
    (modern,) = client.request(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        _CONSUMER_GROUP_DESCRIBE_V,
        {"group_ids": [group_id], "include_authorized_operations": False},
    ).groups
    (group,) = client.request(
        ApiKey.DESCRIBE_GROUPS,
        _DESCRIBE_GROUPS_V,
        {"groups": [group_id], "include_authorized_operations": False},
    ).groups
    fetched = client.request(
        ApiKey.OFFSET_FETCH, _OFFSET_FETCH_V, {"group_id": group_id, "topics": None}
    )
    committed = {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }
    is_consumer_group = modern.error_code == 0
    state = modern.group_state if is_consumer_group else group.group_state
    if state == _DEAD and not committed:
        print(f"Error: Consumer group '{group_id}' does not exist.", file=sys.stderr)
        return 1
    owners: dict[tuple[str, int], _Owner] = {}
    if is_consumer_group:  # group.protocol=consumer: the gateway's own assignment
        for m in modern.members:
            owner = _Owner(m.member_id, m.client_host, m.client_id)
            for tp in m.assignment.topic_partitions:
                for partition in tp.partitions:
                    owners[(tp.topic_name, partition)] = owner
    for member in group.members:
        owner = _Owner(member.member_id, member.client_host, member.client_id)
        for topic, assigned in assigned_partitions(member.member_assignment).items():
            for partition in assigned:
                owners[(topic, partition)] = owner
    partitions = sorted(set(committed) | set(owners))
    log_end = _log_end_offsets(client, partitions)
    if state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        out.write(f"\nWarning: Consumer group '{group_id}' is rebalancing.\n")
    elif not group.members and not (is_consumer_group and modern.members):
        out.write(f"\nConsumer group '{group_id}' has no active members.\n")
    rows = []
    for key in partitions:
        current, end = committed.get(key), log_end.get(key)
        owner = owners.get(key, _Owner())
        lag = end - current if current is not None and end is not None else None
        rows.append(
            [
                group_id,
                key[0],
                str(key[1]),
                _dash(current),
                _dash(end),
                _dash(lag),
                owner.consumer_id,
                owner.host,
                owner.client_id,
            ]
        )
    headers = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    out.write("\n" + format_table([*headers, "CONSUMER-ID", "HOST", "CLIENT-ID"], rows))
    return 0


def _log_end_offsets(
    client: KafkaClient, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    response = client.request(
        ApiKey.LIST_OFFSETS,
        _LIST_OFFSETS_V,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": _LATEST}
                        for p in indexes
                    ],
                }
                for topic, indexes in by_topic.items()
            ],
        },
    )
    return {
        (t.name, p.partition_index): p.offset
        for t in response.topics
        for p in t.partitions
        if p.error_code == 0 and p.offset >= 0
    }


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns, each as wide as its widest cell, one space apart."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [
        " ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
    return "\n".join(lines) + "\n"
